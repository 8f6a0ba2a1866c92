# Refuses to configure with flags under which the compiler miscompiles constant vectors (g++ 12.2
# with AVX-512 turns std::vector<int64_t>{1, 1, 0, 0} into 1 1 1 1). Runs the reproducer with
# the project's optimisation and architecture flags; a wrong answer stops the build rather than
# letting every table-driven test and config list be silently corrupted.
set(guard_source ${CMAKE_BINARY_DIR}/compiler_guard.cpp)
file(WRITE ${guard_source} [=[
#include <cstdint>
#include <vector>
int main() {
  std::vector<int64_t> v{1, 1, 0, 0};
  std::vector<double> d{1.0, 1.0, 0.0, 0.0};
  return (v[2] == 0 && v[3] == 0 && d[2] == 0.0 && d[3] == 0.0) ? 0 : 1;
}
]=])
set(guard_flags -O3)
if(MAXCTX_NATIVE)
  list(APPEND guard_flags -march=native -mno-avx512f)
endif()
try_run(guard_run guard_compiles ${CMAKE_BINARY_DIR}/compiler_guard ${guard_source}
        COMPILE_DEFINITIONS ${guard_flags} CXX_STANDARD 20)
if(NOT guard_compiles OR NOT guard_run EQUAL 0)
  message(FATAL_ERROR "The C++ compiler miscompiles constant vectors with flags '${guard_flags}'"
                      " (compiled: ${guard_compiles}, exit: ${guard_run}). Configure with "
                      "-DMAXCTX_NATIVE=OFF or another compiler.")
endif()
