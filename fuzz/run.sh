#!/usr/bin/env bash
# Runs every libFuzzer harness of a fuzz build, at the lowest CPU priority so that it never
# starves a build or a test on the same machine:
#   1. each committed reproducer of a past finding (fuzz/regressions/<name>/) once;
#   2. fuzzing from a working copy of the committed seed corpus (fuzz/corpus/<name>/; new inputs
#      stay in the build directory), either for a set time (exploration: what a developer runs,
#      different inputs every run) or, with FUZZ_RUNS=N, for N executions from seed 1
#      (reproducible: the same inputs on every machine with the same clang, which is what CI
#      runs, so that CI fails on a change and not on the luck of a new random input).
#   fuzz/run.sh <fuzz build dir> [seconds per harness, default 60] [harness ...]
#   FUZZ_RUNS=200000 fuzz/run.sh <fuzz build dir>   (FUZZ_RUNS=ci: the counts below)
# A finding (crash, sanitizer report, leak, timeout > 10 s, memory > 2 GiB) stops that harness,
# leaves its reproducer in <build>/fuzz-artifacts/ and makes the script exit non-zero; every
# harness still runs. Prints one line per harness: executions, seconds, outcome.
set -uo pipefail
build=$1
seconds=${2:-60}
shift 2 2> /dev/null || shift $#
here=$(cd "$(dirname "$0")" && pwd)
harnesses=("$@")
if ((${#harnesses[@]} == 0)); then  # every harness: fuzz/fuzz_<name>.cpp
  for source in "$here"/fuzz_*.cpp; do
    name=${source##*/fuzz_}
    harnesses+=("${name%.cpp}")
  done
fi
mkdir -p "$build/fuzz-artifacts" "$build/fuzz-logs"
# FUZZ_RUNS=ci: about a minute of each harness on this project's 2-core machines (measured rates:
# safetensors_header 17k executions/s, golden_logits 13k, hf_config 12k, tokenizer 6k, and
# yaml_config 500: yaml-cpp builds a node tree per input; gguf 2k: each input is dequantized and
# written out as a Hugging Face directory).
declare -A ci_runs=([safetensors_header]=1000000 [golden_logits]=800000 [hf_config]=700000
  [tokenizer]=350000 [yaml_config]=30000 [checkpoint_index]=300000 [checkpoint_state]=100000
  [gguf]=100000)
limits=(-timeout=10 -rss_limit_mb=2048)
# A fixed budget is reproducible only with address randomization off: some code paths depend on
# pointer values (two seed-1 runs of fuzz_tokenizer reached 2652 and 2710 edges with it on, the
# same edges with it off). -reload=0: no rereading of the corpus directory on a timer.
same_addresses=()
if [[ -n "${FUZZ_RUNS:-}" ]]; then
  if setarch -R true 2> /dev/null; then
    same_addresses=(setarch -R)
  else
    echo "fuzz/run.sh: setarch -R is not permitted here; addresses stay random, runs may differ"
  fi
fi
build_tag=$(cd "$build" && pwd | md5sum | cut -c1-8)
failed=0
for name in "${harnesses[@]}"; do
  regressions=("$here/regressions/$name"/*)
  if [[ -e "${regressions[0]}" ]]; then
    log=$build/fuzz-logs/$name-regressions.log
    if ! nice -n 19 "$build/fuzz_$name" "${limits[@]}" "${regressions[@]}" > "$log" 2>&1; then
      failed=1
      echo "fuzz_$name: a past finding is back; see $log"
      grep "^Running:" "$log" | tail -1  # the input it stopped on
      grep -m3 -E "ERROR|runtime error|SUMMARY|deadly signal" "$log"
      continue
    fi
    echo "fuzz_$name: ${#regressions[@]} past findings replayed, none back"
  fi
  corpus=$build/fuzz-corpus/$name
  # A reproducible run starts from the committed seeds alone, not what earlier runs added.
  [[ -n "${FUZZ_RUNS:-}" ]] && corpus=$build/fuzz-corpus-seeded/$name && rm -rf "$corpus"
  mkdir -p "$corpus"
  cp -n "$here/corpus/$name"/* "$corpus"/ 2> /dev/null || true
  log=$build/fuzz-logs/$name.log
  runs_wanted=${FUZZ_RUNS:-}
  [[ "$runs_wanted" == ci ]] && runs_wanted=${ci_runs[$name]:-100000}
  if [[ -n "$runs_wanted" ]]; then
    budget=(-runs="$runs_wanted" -seed=1 -reload=0)
  else
    budget=(-max_total_time="$seconds")
  fi
  # The input is written to a file per execution; /dev/shm keeps that in memory.
  # A fixed scratch directory per build directory and harness (see fuzz_input.h), in memory:
  # the same path, and path length, on every run from this build; another checkout's runs at
  # the same time get their own.
  export MAXCTX_FUZZ_DIR=/dev/shm/maxctx-fuzz-$build_tag-$name
  nice -n 19 "${same_addresses[@]}" "$build/fuzz_$name" "$corpus" "${budget[@]}" "${limits[@]}" \
    -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$build/fuzz-artifacts/$name-" > "$log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  took=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o 'in [0-9]*' | grep -o '[0-9]*' || echo "?")
  if ((rc != 0)); then
    failed=1
    echo "fuzz_$name: FINDING after $runs executions (exit $rc); see $log and $build/fuzz-artifacts/"
    grep -m3 -E "ERROR|runtime error|SUMMARY|deadly signal" "$log"
  else
    echo "fuzz_$name: $runs executions in ${took:-?} s, no finding"
  fi
done
exit $failed
