#!/usr/bin/env bash
# The observability commands as a user runs them: `decode` with profiler=xplane on 2 ranks
# (context_autoregressive=2) writes a trace with prefill, decode steps, their attention and
# merge, and sampling, on both ranks, with the same generated ids as without the profiler;
# `trace-summary` and `plot --trace` read it; `plot` draws a run; bad input is one error line.
#   observe_cli.sh <build dir> <source dir>
set -euo pipefail
build=$1
src=$2
maxctx=$build/maxctx
work=$build/tests/observe/cli
rm -rf "$work"
mkdir -p "$work"
mpirun=(mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1
  -x OPENBLAS_NUM_THREADS=1)
decode=(decode "$src/configs/inference.yml" load_parameters_path="$src/tests/fixtures/tiny_llama"
  prompt="1 5 9 3 17 2 44" max_prefill_predict_length=16 max_target_length=24
  per_device_batch_size=2 base_output_directory="$work" run_name=decode)
generated() { grep -a -o -- '-> `.*`' "$1"; }

"${mpirun[@]}" "$maxctx" "${decode[@]}" > "$work/plain.log" 2>&1 ||
  { echo "FAIL: decode"; tail -5 "$work/plain.log"; exit 1; }
"${mpirun[@]}" "$maxctx" "${decode[@]}" profiler=xplane > "$work/profiled.log" 2>&1 ||
  { echo "FAIL: decode profiler=xplane"; tail -5 "$work/profiled.log"; exit 1; }
cmp <(generated "$work/plain.log") <(generated "$work/profiled.log") ||
  { echo "FAIL: the profiled decode generated other ids"; exit 1; }
grep -q "exposed comm ms" "$work/profiled.log" || { echo "FAIL: no summary printed"; exit 1; }
/usr/bin/python3 - "$work/decode/trace.json" <<'PY'
import collections, json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
for rank in (0, 1):
    names = collections.Counter(e["name"] for e in events if e["pid"] == rank)
    steps = names["decode_step"]
    assert names["prefill"] == 1, (rank, names["prefill"])
    assert steps >= 5, (rank, steps)
    assert names["sample"] == steps + 1, (rank, names["sample"], steps)  # one after prefill
    # Every decode step: each layer's attention on this rank's cache shard, then the merge.
    assert names["single_query_attention"] == 2 * steps, (rank, names)
    assert names["decode_merge"] == 2 * steps, (rank, names)
    merges = [e for e in events if e["pid"] == rank and e["name"] == "all_gather"]
    assert merges and all(e["args"]["detail"] == "context_autoregressive" for e in merges)
print(f"trace: {len(events)} spans; ok")
PY
"$maxctx" trace-summary "$work/decode/trace.json" > "$work/summary.txt"
[[ $(grep -c "^ *[01] " "$work/summary.txt") -ge 2 ]] || { echo "FAIL: summary rows"; exit 1; }
"$maxctx" plot --trace "$work/decode/trace.json" --out "$work/timeline.png" > /dev/null
[[ $(head -c 8 "$work/timeline.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] ||
  { echo "FAIL: timeline.png is not a PNG"; exit 1; }

# The console: on a terminal (script(1) gives the command one) a progress line rewritten in place
# and a step line for the first step, every log_period-th and the last; under mpirun, whose
# children write to its pseudo-terminal, and through a pipe, whole lines only, no escapes.
train=(train "$src/configs/base.yml" model_name=maxctx-tiny max_target_length=64 steps=6
  log_period=4 ici_fsdp_parallelism=1 per_device_batch_size=1 dataset_type=synthetic
  enable_checkpointing=false base_output_directory="$work")
script -qec "$maxctx ${train[*]} run_name=tty" "$work/tty.log" > /dev/null
grep -aq $'\r\e\[Kstep 2/6 \[33.3%\].*ETA.*loss .*tokens/s/device' "$work/tty.log" ||
  { echo "FAIL: no progress line on a terminal"; cat -v "$work/tty.log" | tail -5; exit 1; }
step_lines() { grep -a -o "completed step: [0-9]*" "$1" | tr -dc '0-9\n' | tr '\n' ' '; }
[[ $(step_lines "$work/tty.log") == "0 3 5 " ]] || { echo "FAIL: tty step lines"; exit 1; }
"$maxctx" "${train[@]}" run_name=piped | cat > "$work/piped.log"
"${mpirun[@]}" "$maxctx" "${train[@]}" run_name=mpi ici_context_parallelism=2 > "$work/mpi.log"
for log in piped mpi; do
  ! grep -aq $'\e' "$work/$log.log" || { echo "FAIL: escape codes in $log output"; exit 1; }
  [[ $(step_lines "$work/$log.log") == "0 3 5 " ]] || { echo "FAIL: $log step lines"; exit 1; }
done

# Bad input: one error line each (stderr), non-zero exit.
expect_error() {  # expect_error <text> <command...>
  local text=$1
  shift
  if "$@" 2> "$work/error.log" > /dev/null; then echo "FAIL: '$*' succeeded"; exit 1; fi
  grep -q "$text" "$work/error.log" || { echo "FAIL: '$*':"; cat "$work/error.log"; exit 1; }
  [[ $(wc -l < "$work/error.log") -eq 1 ]] || { echo "FAIL: '$*' printed:"; cat "$work/error.log"; exit 1; }
}
echo '{"traceEvents": 5}' > "$work/bad.json"
expect_error "no traceEvents array" "$maxctx" trace-summary "$work/bad.json"
expect_error "missing.json' cannot be opened" "$maxctx" trace-summary "$work/missing.json"
# plot --trace reads the trace as trace-summary does (a string timestamp used to escape as a JSON
# library exception and MPI_Abort).
echo '{"traceEvents": [{"name": "a", "ph": "X", "ts": "0", "dur": 1, "pid": 0}]}' > "$work/bad_ts.json"
expect_error "without numeric ts" "$maxctx" plot --trace "$work/bad_ts.json"
expect_error "a run directory" "$maxctx" plot "$work/missing_run"
expect_error "unknown option --width" "$maxctx" plot --width 3 "$work/decode"
expect_error "is not allowed" "$maxctx" decode "$src/configs/inference.yml" profiler=perfetto
expect_error "profiler_steps = 0" "$maxctx" train "$src/configs/base.yml" model_name=maxctx-tiny \
  base_output_directory="$work" run_name=bad_window profiler=xplane profiler_steps=0
[[ ! -e "$work/bad_window" ]] || { echo "FAIL: a refused run left its directory"; exit 1; }
echo "observe cli: ok"
