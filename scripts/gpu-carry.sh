#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs on the lent GPU machine (docs/gpu.md), from an existing
# release build; builds nothing.
#
#   scripts/gpu-carry.sh [<build dir>] [<out dir>]      (defaults: build, <repo>/gpu-carry)
#
# <out dir>/bin: the stripped binaries (maxctx, cuda_kernels_test, cuda_attention_test,
# cuda_conformance_test, nccl_communicator_test, attention_bench; a missing one is named and left out). <out dir>/lib:
# the shared libraries they load that the lent machine's image lacks (OpenBLAS, Highway,
# yaml-cpp, sentencepiece, fmt, cairo and their own dependencies). Not carried: the C and C++
# runtimes (the image has newer ones), Open MPI and its dependencies (the image's mpirun needs
# its own libmpi), and the CUDA libraries (libcudart, cuBLAS, NCCL: /usr/local/cuda/lib64 and
# torch's nvidia/*/lib there; libcuda is the driver's). Checks that the folder plus the working
# tree that travels with it stay under the device tool's 64 MiB, and prints the `run` call.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
out=${2:-$src/gpu-carry}
binaries=(maxctx cuda_kernels_test cuda_attention_test cuda_conformance_test nccl_communicator_test
  attention_bench)
# Libraries the lent machine brings itself (file names, as ldd prints them).
system_lib='^(linux-vdso|ld-linux-x86-64|ld-linux|libc|libm|libdl|libpthread|librt|libutil|libresolv|libstdc\+\+|libgcc_s)\.'
mpi_lib='^(libmpi|libopen-pal|libopen-rte|libhwloc|libevent|libevent_core|libevent_pthreads|libpmix|libudev|libltdl)[-.]'
cuda_lib='^(libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia|libnvrtc|libnvJitLink)\.'
limit=$((64 << 20))

[ -d "$build" ] || { echo "gpu-carry: no build folder $build (cmake --preset release first)" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"

found=()
for name in "${binaries[@]}"; do
  path=$(find "$build" -type f -name "$name" -perm -u+x -not -path '*/CMakeFiles/*' 2> /dev/null | head -1)
  if [ -z "$path" ]; then
    echo "gpu-carry: $name is not built under $build: not carried (gpu-check records it as missing)"
    continue
  fi
  strip --strip-unneeded -o "$out/bin/$name" "$path"
  found+=("$out/bin/$name")
done
[ ${#found[@]} -gt 0 ] || { echo "gpu-carry: none of ${binaries[*]} is built under $build" >&2; exit 1; }

# Every library ldd resolves for any carried binary, minus the ones the machine has.
ldd "${found[@]}" 2> /dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r soname path; do
    if [[ $soname =~ $system_lib || $soname =~ $mpi_lib || $soname =~ $cuda_lib ]]; then continue; fi
    cp -L "$path" "$out/lib/$soname"
    strip --strip-unneeded "$out/lib/$soname" 2> /dev/null || true
  done

# What travels: the folder as one gzip archive beside it (OpenBLAS alone is 36 MB unpacked, so
# the folder itself would not fit), plus the checkout's tracked and untracked-not-ignored files.
archive=$out.tar.gz
tar -C "$(dirname "$out")" -cf - "$(basename "$out")" | gzip -6 > "$archive"
carried=$(du -sb --apparent-size "$archive" | cut -f1)
tree=0
if git -C "$src" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  tree=$(git -C "$src" ls-files -z --cached --others --exclude-standard |
    (cd "$src" && du --files0-from=- -cb --apparent-size 2> /dev/null) | tail -1 | cut -f1)
fi
total=$((carried + tree))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "gpu-carry: $out: ${#found[@]} binaries, $(ls "$out/lib" | wc -l) libraries," \
  "$(mib "$(du -sb --apparent-size "$out" | cut -f1)") unpacked; $archive: $(mib "$carried");" \
  "with the working tree ($(mib "$tree")): $(mib "$total") of the 64 MiB limit"
if [ "$total" -gt "$limit" ]; then
  echo "gpu-carry: over the 64 MiB the device tool carries; largest files:" >&2
  du -ab "$out" | sort -rn | head -8 >&2
  exit 1
fi

# The call, run from the checkout the session was started in (where the archive must be, and be
# ignored: .gitignore has /gpu-carry.tar.gz and /gpu-carry/).
rel=${archive#"$src"/}
dir=$(basename "$out")
cat << EOF
carry: ["$rel"]
command:
tar -xzf $rel -C $(dirname "$rel") && export LD_LIBRARY_PATH=/usr/local/cuda/lib64:\$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib 2>/dev/null | tr '\n' :)\${LD_LIBRARY_PATH:-} MAXCTX_GPU_CARRY_LIBS=\$PWD/$(dirname "$rel")/$dir/lib && scripts/gpu-check.sh \$OUT/gpu-check.json $(dirname "$rel")/$dir/bin
timeout_s: 540
EOF
