#!/usr/bin/env bash
# The golden-output test: runs every case of run_cases.sh with this build and compares with
# tests/golden/expected/ (recorded with the binary before a refactor). Same machine key: every
# line must be textually identical (bit-identical losses, checkpoints, figures, tokens); other
# machine key: the tolerances of golden.py compare, said in the output. See README.md here.
#   golden_test.sh <build dir> <source dir>
set -euo pipefail
build=$1
src=$2
actual=$build/tests/golden/actual
bash "$src/tests/golden/run_cases.sh" "$build" "$src" "$actual"
/usr/bin/python3 "$src/tests/golden/golden.py" compare "$src/tests/golden/expected" "$actual"
