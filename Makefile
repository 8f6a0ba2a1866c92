# Thin wrappers over CMake presets. `make demo`, `make test`, `make bench` each install the
# dependencies first (a no-op when present), so they work on a fresh Debian 12 machine.
PRESET ?= release
BUILD_DIR := $(if $(filter release,$(PRESET)),build,build-$(PRESET))
JOBS ?= $(shell nproc)
# CI=true turns warnings into errors.
WERROR := $(if $(filter true 1,$(CI)),ON,OFF)

.PHONY: all deps configure build test demo bench docs format clean

all: build

deps:
	bash scripts/install-deps.sh

configure: deps
	cmake --preset $(PRESET) -DMAXCTX_WERROR=$(WERROR)

build: configure
	cmake --build --preset $(PRESET) -j $(JOBS)

test: build
	ctest --preset $(PRESET) -j $(JOBS) --timeout 600

demo: build
	bash scripts/demo.sh $(BUILD_DIR)

bench: build
	bash bench/run_all.sh $(BUILD_DIR)

docs: build
	$(BUILD_DIR)/maxctx config-doc > docs/config.md

format:
	git ls-files '*.cpp' '*.h' | xargs clang-format -i

clean:
	rm -rf build build-debug build-asan
