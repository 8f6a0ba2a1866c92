#!/usr/bin/env bash
# scripts/gpu-check.sh and scripts/gpu-carry.sh where there is no GPU (CI, this machine):
#  1. no GPU: the report says so (status no_gpu, environment with MPI, no steps), exit 2, fast;
#  2. a stand-in nvidia-smi that names a GPU: every step runs (and fails or skips, there being no
#     GPU), the report holds each one with a valid status, its timing and its log's tail, the
#     comparisons, and exit 1; a small budget makes the last steps "skipped" rather than run;
#  3. gpu-carry.sh packs this build: the archive plus the tree under 64 MiB, and every library
#     the carried binaries and libraries need is carried or is one the lent machine brings (C/C++
#     runtime, Open MPI, CUDA).
#   gpu_check_script.sh <build dir> <source dir>
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
work=$build/tests/gpu_check/work
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }

# ---- 1. no GPU ---------------------------------------------------------------------------------
t0=$(date +%s)
set +e
MAXCTX_GPU_CHECK_NVIDIA_SMI=/nonexistent/nvidia-smi "$src/scripts/gpu-check.sh" \
  "$work/none/report.json" "$build" > "$work/none.log" 2>&1
rc=$?
set -e
elapsed=$(($(date +%s) - t0))
[ $rc -eq 2 ] || { cat "$work/none.log"; fail "no GPU: exit $rc, expected 2"; }
[ $elapsed -le 60 ] || fail "no GPU: took $elapsed s"
python3 - "$work/none/report.json" << 'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["status"] == "no_gpu", r["status"]
assert r["environment"]["gpu"] is None
assert r["environment"]["mpi"], r["environment"]
assert r["steps"] == [], r["steps"]
print("no GPU: exit 2, report status no_gpu, MPI:", r["environment"]["mpi"])
PY

# ---- 2. a stand-in GPU: the step machinery -----------------------------------------------------
cat > "$work/fake-nvidia-smi" << 'EOF'
#!/bin/sh
echo "Stand-in GPU, 0.0, 0 MiB, 00000000:00:00.0"
EOF
chmod +x "$work/fake-nvidia-smi"
set +e
MAXCTX_GPU_CHECK_NVIDIA_SMI=$work/fake-nvidia-smi MAXCTX_GPU_CHECK_BUDGET=90 \
  "$src/scripts/gpu-check.sh" "$work/fake/report.json" "$build" > "$work/fake.log" 2>&1
rc=$?
set -e
[ $rc -eq 1 ] || { tail -30 "$work/fake.log"; fail "stand-in GPU: exit $rc, expected 1"; }
python3 - "$work/fake/report.json" << 'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["status"] == "failures", r["status"]
assert r["environment"]["gpu"]["name"] == "Stand-in GPU", r["environment"]["gpu"]
names = [s["name"] for s in r["steps"]]
for expected in ("cuda_kernels_test", "cuda_attention_test", "cuda_conformance_test",
                 "nccl_communicator_test",
                 "torch_sdpa_bench", "attention_bench"):
    assert expected in names, (expected, names)
statuses = {"passed", "failed", "timeout", "skipped", "missing"}
for s in r["steps"]:
    assert s["status"] in statuses, s
    assert s["seconds"] >= 0 and isinstance(s["log_tail"], list), s
assert sum(r["summary"].values()) == len(r["steps"]), r["summary"]
# The GPU tests exit 77 without a GPU (skipped) or are not built (missing); never "passed".
for s in r["steps"]:
    if s["name"].endswith("_test"):
        assert s["status"] in ("skipped", "missing"), s
for key in ("train_step_S8192", "train_step_S32768", "decode_32k"):
    assert key in r["comparisons"] and r["comparisons"][key]["meets_target"] is False, key
print("stand-in GPU: exit 1,", len(names), "steps:", r["summary"])
PY

# ---- 3. the carry package of this build --------------------------------------------------------
if [ ! -x "$build/maxctx" ]; then
  echo "gpu-carry: $build/maxctx is not built: part 3 not checked"
  exit 0
fi
"$src/scripts/gpu-carry.sh" "$build" "$work/carry/gpu-carry" > "$work/carry.log" 2>&1 ||
  { cat "$work/carry.log"; fail "gpu-carry.sh exited non-zero"; }
grep -q "of the 64 MiB limit" "$work/carry.log" || fail "gpu-carry.sh printed no size"
grep -q '^carry: \[' "$work/carry.log" || fail "gpu-carry.sh printed no carry list"
[ -x "$work/carry/gpu-carry/bin/maxctx" ] || fail "maxctx was not carried"
[ -f "$work/carry/gpu-carry.tar.gz" ] || fail "no archive"
tar -tzf "$work/carry/gpu-carry.tar.gz" > "$work/carry/archive.txt"
grep -q '^gpu-carry/lib/libopenblas' "$work/carry/archive.txt" || fail "the archive holds no OpenBLAS"
# Every NEEDED entry of the carried files: carried, or brought by the lent machine.
brought='^(ld-linux-x86-64|ld-linux|libc|libm|libdl|libpthread|librt|libutil|libresolv|libstdc\+\+|libgcc_s)\.|^(libmpi|libopen-pal|libopen-rte|libhwloc|libevent|libevent_core|libevent_pthreads|libpmix|libudev|libltdl)[-.]|^(libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia|libnvrtc|libnvJitLink)\.'
lacking=""
for f in "$work"/carry/gpu-carry/bin/* "$work"/carry/gpu-carry/lib/*; do
  for needed in $(readelf -d "$f" | awk '/NEEDED/ { gsub(/[\[\]]/, "", $5); print $5 }'); do
    if [ ! -e "$work/carry/gpu-carry/lib/$needed" ] && [[ ! $needed =~ $brought ]]; then
      lacking="$lacking $(basename "$f"):$needed"
    fi
  done
done
[ -z "$lacking" ] || fail "needed but neither carried nor on the lent machine:$lacking"
grep "of the 64 MiB limit" "$work/carry.log"
echo "gpu_check_script: PASS"
