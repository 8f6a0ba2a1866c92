#!/usr/bin/env python3
"""Precision seam check: no code above kernels/ names a bf16 type or branches on a dtype value.

Issue #15's rule: the model, parallel/, train/, infer/ and the CLI pass dtypes along (the
config's dtype and weight_dtype become the views' dtypes) and the op table dispatches on them,
so precision never forks model code. This reads src/maxctx/{model,parallel,train,infer}/ and
src/cli/ with comments and string literals removed and reports every use of a bf16 name
(`bf16`, `kBF16`, `bfloat16`) and every comparison of a dtype (`dtype() ==`, `dtype() !=`,
`== DType::`, `!= DType::`), as `file:line: text`; exit status 1 if any. A check that two views
share a dtype (`a.dtype() == b.dtype()`) is allowed: it does not name a precision. `--self-test`
checks that the patterns fire on a sample and not on allowed lines. Python 3 standard library.
"""
import os
import re
import sys

AREAS = ["src/maxctx/model", "src/maxctx/parallel", "src/maxctx/train", "src/maxctx/infer",
         "src/cli"]
NAMES = re.compile(r"\b(bf16|kBF16|bfloat16|BF16)\b")
BRANCH = re.compile(r"(dtype\(\)\s*[!=]=\s*DType::|DType::\w+\s*[!=]=)")
COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"', re.S)


def code_lines(text):
    """The text with comments and string literals blanked, line numbers kept."""
    return COMMENT_OR_STRING.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text).split("\n")


def problems_in(path, text):
    found = []
    for number, line in enumerate(code_lines(text), 1):
        if NAMES.search(line) or BRANCH.search(line):
            found.append(f"{path}:{number}: {text.split(chr(10))[number - 1].strip()}")
    return found


def check(root):
    found = []
    for area in AREAS:
        for folder, _, files in os.walk(os.path.join(root, area)):
            for name in sorted(files):
                if name.endswith((".h", ".cpp")):
                    path = os.path.join(folder, name)
                    with open(path, encoding="utf-8") as f:
                        found += problems_in(os.path.relpath(path, root), f.read())
    for line in found:
        print(line)
    print(f"precision seam: {len(found)} violations in {', '.join(AREAS)}")
    return 1 if found else 0


def self_test():
    bad = ["const bf16 x{};", "if (v.dtype() == DType::kBF16) {}", "Tensor t({n}, DType::kBF16);",
           "if (DType::kF32 != d) {}"]
    good = ["// bf16 halves the bytes", 'fail("use bfloat16");', "k.empty({n}, DType::kF32);",
            "MAXCTX_CHECK(a.dtype() == b.dtype(), \"x\");", "const DType dt = c.dtype;"]
    ok = all(problems_in("bad", b) for b in bad) and not any(problems_in("good", g) for g in good)
    print("precision seam self-test: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    if "--self-test" in sys.argv:
        sys.exit(self_test())
    root = next((a for a in sys.argv[1:] if not a.startswith("--")),
                os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(check(root))
