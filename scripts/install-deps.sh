#!/usr/bin/env bash
# Installs exactly the Debian 12 packages maxctx needs to build, test and benchmark.
# Idempotent: packages already present are left alone and nothing is downloaded.
# Uses sudo when not run as root. Test oracles (python3-torch) are not installed here:
# the committed fixtures make CI independent of torch; tools/reference/README.md says how
# to install it to regenerate them.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libopenmpi-dev openmpi-bin
  libopenblas-openmp-dev
  libhwy-dev libfmt-dev nlohmann-json3-dev libcli11-dev libyaml-cpp-dev
  libsentencepiece-dev sentencepiece libicu-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcairo2-dev protobuf-compiler libprotobuf-dev
  # The fuzz preset (make fuzz): clang, libFuzzer (libclang_rt.fuzzer), OpenMP for clang.
  clang libclang-rt-14-dev libomp-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  sudo_cmd=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
