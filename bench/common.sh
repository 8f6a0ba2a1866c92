# shellcheck shell=bash disable=SC2034  # pin and mpi are for the scripts that source this
# Sourced by bench/<area>/run.sh: the environment every benchmark script shares. One
# OpenMP/BLAS thread per process; `pin` runs a command on the last core (empty where taskset is
# missing); `mpi` starts ranks with the same one-thread environment.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
pin=()
if command -v taskset > /dev/null; then
  pin=(taskset -c "$(($(nproc) - 1))")
fi
mpi=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1)
