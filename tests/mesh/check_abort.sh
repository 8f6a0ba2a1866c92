#!/usr/bin/env bash
# A failed MAXCTX_CHECK on one rank ends every rank through the runtime's abort hook: the job
# exits with MPI_Abort's code 1 (a bare std::abort of one rank gives 134, other ranks left
# waiting in their barrier give the timeout's 124), and the failure is printed once, as
# `[rank R] file:line: check failed: ...` from the failing rank.
#   check_abort.sh <build dir> <source dir>
set -uo pipefail
probe=$1/tests/mesh/check_abort_probe
for np in 1 2 4; do
  out=$(timeout 60 mpirun --allow-run-as-root --oversubscribe -np "$np" "$probe" 2>&1)
  rc=$?
  last=$((np - 1))
  if [[ $rc -ne 1 ]]; then
    echo "FAIL: $np ranks: exit code $rc, not MPI_Abort's 1 (134: no hook; 124: ranks hung)"
    echo "$out"
    exit 1
  fi
  lines=$(grep -c "check failed: .*the probe fails on purpose on rank $last" <<<"$out")
  if [[ $lines -ne 1 ]] ||
    ! grep -q "^\[rank $last\] .*check_abort_probe.cpp:[0-9]*: check failed" <<<"$out"; then
    echo "FAIL: $np ranks: expected one '[rank $last] ...check_abort_probe.cpp:N: check failed' line"
    echo "$out"
    exit 1
  fi
  echo "$np ranks: exit code $rc, one failure line from rank $last"
done
