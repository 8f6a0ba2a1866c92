#!/usr/bin/env python3
"""Helpers of the golden-output test (python3 standard library only).

Recording (called by run_cases.sh), each writes one case file of lines `<kind> <name> <value>`:
  golden.py token-file <out.bin>                  packed documents for dataset_type=tokens
  golden.py reference-golden <fixture> <out.jsonl> check-logits golden file: every document of
                                                  the fixture's reference.safetensors
  golden.py train <run dir> <out.txt>             metrics.jsonl of every step + checkpoint hashes
  golden.py check-logits <log> <out.txt>          the figures check-logits prints
  golden.py decode <log> <out.txt>                the generated tokens (ids or text)
  golden.py machine-key <build dir> <out.txt>     what decides the exact bits on this machine
Comparing:
  golden.py compare <expected dir> <actual dir>

Kinds, and how `compare` treats them when the two machine keys differ (on the same key every
line must be textually identical):
  exact   tokens, counts, step numbers: equal
  float   fp32/fp64 results (losses, norms, learning rate, accuracy): relative 1e-5
  noise   figures that measure rounding error themselves (check-logits' max |model - golden|,
          KL): absolute 1e-5 (check-logits' own atol on these fixtures)
  bits    checkpoint sha256 and anything else that only holds on the same machine: skipped
"""
import hashlib
import json
import math
import os
import re
import struct
import sys

CROSS_REL_TOL = 1e-5
CROSS_NOISE_ABS_TOL = 1e-5


def g17(x):
    """A double as %.17g: exact (it parses back to the same bits)."""
    return "%.17g" % x


def write_lines(path, lines):
    with open(path, "w") as f:
        for kind, name, value in lines:
            assert kind in ("exact", "float", "noise", "bits"), kind
            assert " " not in name, name
            f.write("%s %s %s\n" % (kind, name, value))


# ---- inputs -------------------------------------------------------------------------------------

def token_file(out):
    """Documents of 5..40 tokens (ids 3..255) each ending with EOS 2, from a fixed LCG: rows of
    64 hold several documents, so packing, segment masks and position restarts are exercised."""
    state = 12345

    def rand():
        nonlocal state
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return state >> 33

    tokens = []
    for _ in range(80):
        length = 5 + rand() % 36
        tokens += [3 + rand() % 253 for _ in range(length)]
        tokens.append(2)
    header = b"MXCTOKEN" + struct.pack("<IIIIQ", 1, 2, 2, 0, len(tokens))
    with open(out, "wb") as f:
        f.write(header + struct.pack("<%dH" % len(tokens), *tokens))


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        fmt = {"I32": "i", "F32": "f"}.get(t["dtype"])
        if fmt is None:
            continue
        s, e = t["data_offsets"]
        tensors[name] = (t["shape"], struct.unpack("<%d%s" % ((e - s) // 4, fmt), data[base + s:base + e]))
    return tensors


def reference_golden(fixture, out):
    """MaxText's golden-logits JSONL from reference.safetensors: each packed document (a run of
    one segment id > 0) as its own prompt, with its rows of the packed logits (the reference
    checks that these equal the document run alone)."""
    t = read_safetensors(os.path.join(fixture, "reference.safetensors"))
    (rows, seq), ids = t["input_ids"][0], t["input_ids"][1]
    segs = t["segment_ids"][1]
    vocab = t["logits"][0][2]
    logits = t["logits"][1]
    with open(out, "w") as f:
        for r in range(rows):
            s = 0
            while s < seq:
                seg = segs[r * seq + s]
                e = s
                while e < seq and segs[r * seq + e] == seg:
                    e += 1
                if seg > 0:
                    tokens = list(ids[r * seq + s:r * seq + e])
                    rows_out = [[repr(logits[((r * seq) + i) * vocab + v]) for v in range(vocab)]
                                for i in range(s, e)]
                    f.write('{"prompt": "token ids: %s", "tokens": %s, "logits": [%s]}\n' % (
                        " ".join(map(str, tokens)), json.dumps(tokens),
                        ",".join("[" + ",".join(row) + "]" for row in rows_out)))
                s = e


# ---- recording ----------------------------------------------------------------------------------

METRICS = [  # (metrics.jsonl key, kind)
    ("learning/loss", "float"),
    ("learning/raw_grad_norm", "float"),
    ("learning/grad_norm", "float"),
    ("learning/accuracy", "float"),
    ("learning/current_learning_rate", "float"),
    ("learning/total_weights", "exact"),
]


def train(run_dir, out):
    lines = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    if not records:
        sys.exit("no metrics in %s" % run_dir)
    for rec in records:
        step = rec["step"]
        for key, kind in METRICS:
            v = rec[key]
            value = g17(v) if kind == "float" else str(v)
            lines.append((kind, "step%d.%s" % (step, key.split("/")[1]), value))
    ckpt_root = os.path.join(run_dir, "checkpoints")
    steps = sorted(int(d) for d in os.listdir(ckpt_root) if d.isdigit())
    if not steps:
        sys.exit("no checkpoint in %s" % run_dir)
    ckpt = os.path.join(ckpt_root, str(steps[-1]))
    state = json.load(open(os.path.join(ckpt, "state.json")))
    lines.append(("exact", "checkpoint.step", str(state["step"])))
    lines.append(("exact", "checkpoint.data_position", str(state["data_position"])))
    # The state itself, whatever mesh saved it: every tensor of index.json assembled from its
    # slices and hashed with its name, dtype and shape (state.json holds the config with paths:
    # not hashed). The same training state on two meshes gives the same hash.
    lines.append(("bits", "checkpoint.state.sha256", checkpoint_state_sha256(ckpt)))
    write_lines(out, lines)


ELEMENT_SIZE = {"F32": 4, "BF16": 2, "F16": 2, "I8": 1}


def checkpoint_state_sha256(ckpt):
    index = json.load(open(os.path.join(ckpt, "index.json")))["tensors"]
    digest = hashlib.sha256()
    for name in sorted(index):
        t = index[name]
        shape = t["shape"]
        rows, cols = shape[0], (shape[1] if len(shape) > 1 else 1)
        size = ELEMENT_SIZE[t["dtype"]]
        whole = bytearray(rows * cols * size)
        for s in t["slices"]:
            offset, extent = s["offset"], s["shape"]
            r0, c0 = offset[0], (offset[1] if len(offset) > 1 else 0)
            nr, nc = extent[0], (extent[1] if len(extent) > 1 else 1)
            with open(os.path.join(ckpt, s["file"]), "rb") as f:
                f.seek(s["byte_range"][0])
                data = f.read(s["byte_range"][1] - s["byte_range"][0])
            for r in range(nr):
                dst = ((r0 + r) * cols + c0) * size
                whole[dst:dst + nc * size] = data[r * nc * size:(r + 1) * nc * size]
        digest.update(("%s %s %s\n" % (name, t["dtype"], shape)).encode())
        digest.update(bytes(whole))
    return digest.hexdigest()


def check_logits(log, out):
    text = open(log, encoding="utf-8", errors="backslashreplace").read()
    lines = []
    prompt_re = re.compile(
        r"^prompt (\d+): (\d+) tokens(?: \(padded to (\d+)[^)]*\))?: max \|model - golden\| = (\S+), "
        r"max KL\(golden\|\|model\) = (\S+) \(token (\d+)\), (\d+) of (\d+) logits outside", re.M)
    found = prompt_re.findall(text)
    if not found:
        sys.exit("%s: no per-prompt lines" % log)
    for p, n, padded, diff, kl, token, outside, total in found:
        lines.append(("exact", "prompt%s.tokens" % p, n + ("/" + padded if padded else "")))
        lines.append(("noise", "prompt%s.max_abs_diff" % p, diff))
        lines.append(("noise", "prompt%s.max_kl" % p, kl))
        lines.append(("bits", "prompt%s.max_kl_token" % p, token))
        lines.append(("exact", "prompt%s.outside" % p, "%s/%s" % (outside, total)))
    m = re.search(r"^Max absolute difference: (\S+) ", text, re.M)
    k = re.search(r"^Max KL divergence for a single token: (\S+) ", text, re.M)
    ok = re.search(r"^check-logits: PASS \((\d+) prompts, (\d+) tokens\)", text, re.M)
    if not (m and k and ok):
        sys.exit("%s: no totals / PASS line" % log)
    lines.append(("noise", "max_abs_diff", m.group(1)))
    lines.append(("noise", "max_kl", k.group(1)))
    lines.append(("exact", "pass", "%s prompts, %s tokens" % ok.groups()))
    write_lines(out, lines)


def decode(log, out):
    text = open(log, encoding="utf-8", errors="backslashreplace").read()
    m = re.search(r"^(\d+) slots x up to (\d+) tokens on context_autoregressive = (\d+): (\d+) tokens",
                  text, re.M)
    g = re.search(r"^Input `.*` -> `(.*)`$", text, re.M)
    if not (m and g):
        sys.exit("%s: no decode result lines" % log)
    slots, upto, ca, generated = m.groups()
    lines = [("exact", "slots", slots), ("exact", "context_autoregressive", ca),
             ("exact", "slot0_tokens", upto), ("exact", "generated_tokens", generated),
             ("exact", "output", json.dumps(g.group(1), ensure_ascii=True))]
    write_lines(out, lines)


FLAGS = ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
         "avx512_fp16", "avx512_vbmi2", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8"]


def machine_key(build_dir, out):
    """The CPU (model name, family/model/stepping, the SIMD flags Highway and OpenBLAS dispatch
    on), the compiler and build type that built the binary, and the OpenBLAS library."""
    info = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            if not line.strip():
                break  # the first processor is enough
            k, _, v = line.partition(":")
            info[k.strip()] = v.strip()
    flags = set(info.get("flags", "").split())
    lines = [
        "cpu: %s" % info.get("model name", "?"),
        "cpu_id: %s family %s model %s stepping %s" % (
            info.get("vendor_id", "?"), info.get("cpu family", "?"), info.get("model", "?"),
            info.get("stepping", "?")),
        "flags: %s" % " ".join(f for f in FLAGS if f in flags),
    ]
    cache = {}
    try:
        for line in open(os.path.join(build_dir, "CMakeCache.txt")):
            name, sep, value = line.partition("=")
            if sep and not line.startswith(("#", "//")):
                cache[name.split(":")[0]] = value.strip()
    except OSError:
        pass
    cxx = cache.get("CMAKE_CXX_COMPILER", "?")
    if cxx != "?":
        cxx = os.popen("'%s' --version 2>/dev/null" % cxx).readline().strip() or cxx
    lines.append("cxx: %s" % cxx)
    lines.append("build: %s native=%s asan=%s" % (cache.get("CMAKE_BUILD_TYPE", "?"),
                                                  cache.get("MAXCTX_NATIVE", "?"),
                                                  cache.get("MAXCTX_ASAN", "?")))
    blas = sorted(os.path.realpath(p) for p in (
        "/usr/lib/x86_64-linux-gnu/libopenblas.so.0", "/usr/lib/aarch64-linux-gnu/libopenblas.so.0")
        if os.path.exists(p))
    lines.append("openblas: %s" % (" ".join(blas) or "?"))
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


# ---- comparing ----------------------------------------------------------------------------------

def parse_case(path):
    rows = []
    for line in open(path):
        kind, name, value = line.rstrip("\n").split(" ", 2)
        rows.append((kind, name, value))
    return rows


def close(kind, a, b):
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    if math.isnan(x) or math.isnan(y):
        return False
    if kind == "noise":
        return abs(x - y) <= CROSS_NOISE_ABS_TOL
    return abs(x - y) <= CROSS_REL_TOL * max(abs(x), abs(y))


def compare(expected_dir, actual_dir):
    key_e = open(os.path.join(expected_dir, "machine_key.txt")).read()
    key_a = open(os.path.join(actual_dir, "machine_key.txt")).read()
    same = key_e == key_a
    if same:
        print("golden: same machine key; every case must be bit-identical (exact text)")
    else:
        print("golden: CROSS-MACHINE comparison (the machine keys differ: CPU, compiler, build type "
              "or OpenBLAS), so bits may differ and tolerances apply: "
              "fp values relative %g, rounding-error figures absolute %g, tokens exact, "
              "checkpoint hashes skipped" % (CROSS_REL_TOL, CROSS_NOISE_ABS_TOL))
        print("  expected: " + key_e.strip().replace("\n", " | "))
        print("  actual:   " + key_a.strip().replace("\n", " | "))
    cases_e = sorted(f for f in os.listdir(expected_dir) if f.endswith(".txt") and f != "machine_key.txt")
    cases_a = sorted(f for f in os.listdir(actual_dir) if f.endswith(".txt") and f != "machine_key.txt")
    failures = []
    for missing in sorted(set(cases_e) ^ set(cases_a)):
        failures.append("%s: only in %s" % (missing, "expected" if missing in cases_e else "actual"))
    skipped = 0
    for case in cases_e:
        if case not in cases_a:
            continue
        e = parse_case(os.path.join(expected_dir, case))
        a = parse_case(os.path.join(actual_dir, case))
        if [(k, n) for k, n, _ in e] != [(k, n) for k, n, _ in a]:
            failures.append("%s: different lines (expected %d, got %d): %s" % (
                case, len(e), len(a), sorted(set(n for _, n, _ in e) ^ set(n for _, n, _ in a))[:5]))
            continue
        for (kind, name, ve), (_, _, va) in zip(e, a):
            if ve == va:
                continue
            if same or kind == "exact":
                ok = False
            elif kind == "bits":
                skipped += 1
                ok = True
            else:
                ok = close(kind, ve, va)
            if not ok:
                failures.append("%s: %s: expected %s, got %s" % (case[:-4], name, ve, va))
    print("golden: %d cases compared%s" % (len(cases_e), "" if same else ", %d machine-specific values skipped" % skipped))
    if failures:
        print("golden: FAIL, %d difference(s):" % len(failures))
        for f in failures:
            print("  " + f)
        return 1
    print("golden: OK")
    return 0


def main(argv):
    cmd, args = argv[1], argv[2:]
    if cmd == "token-file":
        token_file(*args)
    elif cmd == "reference-golden":
        reference_golden(*args)
    elif cmd == "train":
        train(*args)
    elif cmd == "check-logits":
        check_logits(*args)
    elif cmd == "decode":
        decode(*args)
    elif cmd == "machine-key":
        machine_key(*args)
    elif cmd == "compare":
        return compare(*args)
    else:
        sys.exit("unknown command " + cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
