#!/usr/bin/env python3
"""Layering check: reads the #include lines of src/maxctx/** and src/cli/** and reports every one
that breaks a rule of RULES below, as `file:line: includes X: rule: why`; exit status 1 if any.

Why: docs/architecture.md section 1 says dependencies point downward only (cli -> plan -> train, infer -> model ->
parallel -> {kernels, mesh} -> core; config, io, tokenizer -> core), only kernels/ knows its
backends and only mesh/ knows MPI. CMake links each area only to the areas below it, but every
area has all of src/ on its include path, so an upward header-only #include still compiles; this
script is what catches it.

Not a preprocessor: it reads `#include` lines as text, inside #if blocks too. Each include is
reported once, under the first rule it breaks (the specific rules come before the area order).
tests/ and bench/ are not scanned. `--self-test` builds a tree with one violating file per rule
and checks that each rule fires there, and only there. Python 3 standard library only.
"""
import argparse
import collections
import os
import re
import sys
import tempfile

# The areas of src/maxctx/ and what each may include besides itself (docs/architecture.md
# section 1). An area may include any area below it, not only the next one, except that model/
# never includes mesh/; train/ and infer/ sit side by side and neither includes the other.
_BELOW_MODEL = {"core", "kernels", "mesh", "parallel", "config", "io", "tokenizer"}
ALLOWED = {
    "core": set(),
    "mesh": {"core"},
    "kernels": {"core"},
    "config": {"core"},
    "io": {"core"},
    "tokenizer": {"core"},
    "plot": {"core", "io"},
    "parallel": {"core", "kernels", "mesh", "config"},
    "model": {"core", "kernels", "parallel", "config", "io"},
    "train": _BELOW_MODEL | {"model"},
    "infer": _BELOW_MODEL | {"model"},
    "plan": _BELOW_MODEL | {"model", "train", "infer"},
    "cli": _BELOW_MODEL | {"model", "train", "infer", "plot", "plan"},
}

KERNEL_BACKENDS = ("maxctx/kernels/ref/", "maxctx/kernels/cpu/", "maxctx/kernels/cuda/")
# The one place above kernels/ that may pick the emulated GPU (hardware=gpu, MAXCTX_EMULATE_GPU=1).
EMULATED_GPU_CHOOSER = "src/cli/hardware.cpp"
# CUDA toolkit and NCCL headers, by file name or top folder (libcu++, CUB, Thrust).
CUDA_HEADER = re.compile(r"(^|/)(cuda|cublas|cudnn|cusparse|cufft|curand|nvrtc|nvToolsExt|nccl)"
                         r"\w*\.h$|^(cuda|cub|thrust)/")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inl")


class Include:
    """One #include line: the including file's area and the included header's area (if any)."""

    def __init__(self, file, line, header, file_area, header_area, header_path):
        self.file = file  # path relative to the root, e.g. src/maxctx/model/llama.cpp
        self.line = line
        self.header = header  # as written between the brackets
        self.file_area = file_area  # "cli", an area of src/maxctx/, or "" (file outside any)
        self.header_area = header_area  # same for the header; None for third-party headers
        self.header_path = header_path  # maxctx/<area>/..., cli/..., or the header as written


def _kernels_backends(i):
    return i.file_area != "kernels" and i.header_path.startswith(KERNEL_BACKENDS)


def _ref_tests_only(i):
    return (i.header_path.startswith("maxctx/kernels/ref/")
            and not i.file.startswith("src/maxctx/kernels/ref/"))


def _emulated_private(i):
    return (i.header_path.startswith("maxctx/kernels/emulated/") and i.file_area != "kernels"
            and i.file != EMULATED_GPU_CHOOSER)


def _model_mesh(i):
    return i.file_area == "model" and i.header_area == "mesh"


def _parallel_model(i):
    return i.file_area == "parallel" and i.header_area == "model"


def _core_standalone(i):
    return i.file_area == "core" and (
        (i.header_area is not None and i.header_area != "core") or i.header_path == "mpi.h")


def _mpi_mesh(i):
    return i.header_path == "mpi.h" and i.file_area != "mesh" and i.file != "src/cli/main.cpp"


def _cuda_kernels_cuda(i):
    if i.header_area is not None or not CUDA_HEADER.search(i.header_path):
        return False
    if i.file.startswith("src/maxctx/kernels/cuda/"):
        return False
    return not (i.file_area == "mesh" and os.path.basename(i.header_path) == "nccl.h")


def _area_order(i):
    if i.header_area is None or i.header_area == i.file_area:
        return False
    return i.header_area not in ALLOWED.get(i.file_area, set())


# (name, predicate, why). Order matters: an include is reported under the first rule it breaks.
RULES = [
    ("kernels-backends-private", _kernels_backends,
     "only kernels/ includes kernels/{ref,cpu,cuda}/; code above calls the kernel interface"),
    ("kernels-ref-tests-only", _ref_tests_only,
     "only tests and kernels/ref/ itself include kernels/ref/ (the oracle); a backend shares a "
     "formula with it through kernels/ headers (types.h, mask.h)"),
    ("kernels-emulated-private", _emulated_private,
     "only kernels/ and src/cli/hardware.cpp include kernels/emulated/: the emulated GPU poses "
     "as a GPU behind the op table, chosen in one place"),
    ("model-no-mesh", _model_mesh,
     "model/ includes nothing from mesh/: it calls the plans parallel/ built"),
    ("parallel-no-model", _parallel_model,
     "parallel/ includes no model/ header: it shards what it is given"),
    ("core-standalone", _core_standalone,
     "core/ includes no other area and no <mpi.h>"),
    ("mpi-only-in-mesh", _mpi_mesh,
     "only mesh/ (and src/cli/main.cpp) includes <mpi.h>; others use mesh/'s verbs"),
    ("cuda-only-in-kernels-cuda", _cuda_kernels_cuda,
     "only kernels/cuda/ includes CUDA headers (mesh/ may include nccl.h)"),
    ("area-order", _area_order,
     "dependencies point downward: cli -> plan -> train, infer -> model -> parallel -> {kernels, mesh} "
     "-> core; config, io, tokenizer -> core (ALLOWED in tools/check_layering.py)"),
]


def _area_of(path):
    """Area of a path relative to src/ (maxctx/<area>/... or cli/...), None if neither."""
    parts = path.split("/")
    if parts[0] == "cli" and len(parts) > 1:
        return "cli"
    if parts[0] == "maxctx" and len(parts) > 2:
        return parts[1]
    return None


def _resolve(root, file, bracket, header):
    """The header's path relative to src/ when it is one of ours, else the header as written."""
    if bracket == '"' and not header.startswith(("maxctx/", "cli/")):
        # A quoted include relative to the including file ("../mesh/mesh.h").
        beside = os.path.normpath(os.path.join(root, os.path.dirname(file), header))
        src = os.path.join(root, "src")
        if os.path.isfile(beside) and beside.startswith(src + os.sep):
            return os.path.relpath(beside, src).replace(os.sep, "/")
    return header


def scan(root):
    """Every #include of src/maxctx/** and src/cli/** under root, in path order."""
    includes = []
    for top in ("src/maxctx", "src/cli"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for name in sorted(filenames):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                full = os.path.join(dirpath, name)
                file = os.path.relpath(full, root).replace(os.sep, "/")
                file_area = _area_of(file[len("src/"):]) or ""
                with open(full, encoding="utf-8", errors="replace") as f:
                    for line_no, text in enumerate(f, 1):
                        m = INCLUDE.match(text)
                        if not m:
                            continue
                        path = _resolve(root, file, m.group(1), m.group(2))
                        includes.append(Include(file, line_no, m.group(2), file_area,
                                                _area_of(path), path))
    return includes


def violations(root):
    """(include, rule name, why) for each include that breaks a rule."""
    out = []
    for i in scan(root):
        for name, broken, why in RULES:
            if broken(i):
                out.append((i, name, why))
                break
    return out


def check(root):
    found = violations(root)
    for i, name, why in found:
        print(f"{i.file}:{i.line}: includes {i.header}: {name}: {why}")
    counts = collections.Counter(name for _, name, _ in found)
    summary = ", ".join(f"{name} {counts[name]}" for name, _, _ in RULES if counts[name])
    print(f"layering: {len(found)} violation(s)" + (f" ({summary})" if found else ""))
    return 1 if found else 0


# One file per rule that breaks exactly that rule (first in RULES order), and files that break none.
SELF_TEST_BROKEN = {
    "kernels-backends-private": ("src/maxctx/model/a.cpp", '"maxctx/kernels/cpu/matmul.h"'),
    "kernels-ref-tests-only": ("src/maxctx/kernels/cpu/b.cpp", '"maxctx/kernels/ref/rope.h"'),
    "kernels-emulated-private": ("src/maxctx/train/b.cpp",
                                 '"maxctx/kernels/emulated/emulated_gpu.h"'),
    "model-no-mesh": ("src/maxctx/model/b.cpp", '"../mesh/mesh.h"'),
    "parallel-no-model": ("src/maxctx/parallel/a.h", '"maxctx/model/weights.h"'),
    "core-standalone": ("src/maxctx/core/a.cpp", "<mpi.h>"),
    "mpi-only-in-mesh": ("src/cli/common.cpp", "<mpi.h>"),
    "cuda-only-in-kernels-cuda": ("src/maxctx/kernels/cpu/a.cpp", "<cuda_runtime.h>"),
    "area-order": ("src/maxctx/config/a.cpp", '"maxctx/train/trainer.h"'),
}
SELF_TEST_CLEAN = [
    ("src/maxctx/kernels/ref/a.cpp", '"maxctx/kernels/ref/rope.h"'),
    ("src/maxctx/kernels/cuda/a.cu", "<cublasLt.h>"),
    ("src/maxctx/mesh/a.cpp", "<nccl.h>"),
    ("src/maxctx/mesh/b.cpp", "<mpi.h>"),
    ("src/cli/main.cpp", "<mpi.h>"),
    ("src/cli/train.cpp", '"maxctx/train/trainer.h"'),
    ("src/cli/hardware.cpp", '"maxctx/kernels/emulated/emulated_gpu.h"'),
    ("src/maxctx/model/c.cpp", '"maxctx/parallel/model_plan.h"'),
    ("src/maxctx/train/a.cpp", '"hwy/highway.h"'),
]


def self_test():
    with tempfile.TemporaryDirectory() as root:
        headers = ["src/maxctx/mesh/mesh.h", "src/maxctx/model/weights.h",
                   "src/maxctx/kernels/cpu/matmul.h", "src/maxctx/kernels/ref/rope.h",
                   "src/maxctx/parallel/model_plan.h", "src/maxctx/train/trainer.h"]
        cases = list(SELF_TEST_BROKEN.values()) + SELF_TEST_CLEAN
        for path, text in [(h, "#pragma once\n") for h in headers] + [
                (p, f"// fixture\n#include {inc}\n") for p, inc in cases]:
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        got = {(i.file, name) for i, name, _ in violations(root)}
        want = {(path, name) for name, (path, _) in SELF_TEST_BROKEN.items()}
        missing = sorted(want - got)
        extra = sorted(got - want)
        for path, name in missing:
            print(f"self-test: {path} should break {name} and was not reported")
        for path, name in extra:
            print(f"self-test: {path} reported under {name}, expected clean or another rule")
        untested = {name for name, _, _ in RULES} - set(SELF_TEST_BROKEN)
        for name in sorted(untested):
            print(f"self-test: rule {name} has no fixture in SELF_TEST_BROKEN")
        if missing or extra or untested:
            return 1
        print(f"self-test: all {len(RULES)} rules fire on their fixture; "
              f"{len(SELF_TEST_CLEAN)} clean files pass")
        return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))), help="repository root (default: this script's repository)")
    parser.add_argument("--self-test", action="store_true",
                        help="check that every rule fires on a generated tree, then exit")
    args = parser.parse_args()
    return self_test() if args.self_test else check(args.root)


if __name__ == "__main__":
    sys.exit(main())
