# Sourced by the failure tests (fault_injection.sh, hostile_inputs.sh).
#   expect_failure <log> <seconds> <expected line part> <command ...>
# Runs the command (an mpirun of every rank) and asserts what issue #21 asks of a failure: a
# non-zero exit within <seconds> (a hang is killed by the caller's `timeout` and reported), no
# std::terminate and no sanitizer report, and exactly one "maxctx: error" line, holding the
# expected part. FAILURE_LINE="pattern" changes the counted line (a killed rank leaves no maxctx
# line; mpirun's own notice is the one line then).
expect_failure() {
  local log=$1 limit=$2 part=$3
  shift 3
  local line=${FAILURE_LINE:-maxctx: error}
  local start rc=0
  start=$(date +%s%N)
  "$@" > "$log" 2>&1 || rc=$?
  local took_ms=$((($(date +%s%N) - start) / 1000000))
  local took="$((took_ms / 1000)).$(printf '%03d' $((took_ms % 1000)))"
  local name
  name=$(basename "$log" .log)
  if [[ $rc == 0 || $rc == 124 ]]; then
    echo "FAIL $name: exit $rc after ${took}s (0: no error; 124: hung)"; tail -20 "$log"; exit 1
  fi
  if ((took_ms > limit * 1000)); then
    echo "FAIL $name: took ${took}s, more than $limit s"; tail -20 "$log"; exit 1
  fi
  if grep -q -e "terminate called" -e "ERROR: AddressSanitizer" -e "runtime error:" "$log"; then
    echo "FAIL $name: std::terminate or a sanitizer report"; cat "$log"; exit 1
  fi
  local lines
  lines=$(grep -c -F -- "$line" "$log" || true)
  if [[ $lines != 1 ]] || ! grep -F -- "$line" "$log" | grep -q -F -- "$part"; then
    echo "FAIL $name: expected one '$line' line with '$part', got $lines"; cat "$log"; exit 1
  fi
  echo "$name: exit $rc in ${took}s: $(grep -F -- "$line" "$log")"
}

# failure_test_setup <build dir> <work subdirectory>: sets maxctx (the binary), work (an emptied
# directory under the build's tests/) and mpirun (2 ranks, one thread each, killed after 60 s).
failure_test_setup() {
  maxctx=$1/maxctx
  work=$1/tests/$2
  rm -rf "$work"
  mkdir -p "$work"
  mpirun=(timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1
    -x OPENBLAS_NUM_THREADS=1)
}
