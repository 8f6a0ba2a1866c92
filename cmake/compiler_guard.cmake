# Picks the baseline architecture flags (MAXCTX_ARCH_FLAGS) under which the compiler builds
# constant vectors correctly. g++ 12.2 with AVX-512 turns std::vector<int64_t>{1, 1, 0, 0} into
# 1 1 1 1; on Intel CPUs that -march=native tunes for (rocketlake, sapphirerapids) the same
# miscompile shows even with -mno-avx512f, and only generic tuning avoids it. Each candidate is
# tried with the reproducer at -O3; the first correct one is used and printed, and when none is
# correct the build stops rather than letting every table-driven test and config list be
# silently corrupted. The SIMD kernels reach AVX-512 through Highway's dynamic dispatch whatever
# the baseline is.
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
if(MAXCTX_NATIVE)
  set(guard_candidates "-march=native -mno-avx512f" "-march=native -mno-avx512f -mtune=generic"
                       "-march=x86-64-v3")
else()
  set(guard_candidates "")
endif()
set(MAXCTX_ARCH_FLAGS "")
set(guard_tried "")
set(guard_index 0)
foreach(candidate IN LISTS guard_candidates)
  separate_arguments(candidate_flags UNIX_COMMAND "${candidate}")
  try_run(guard_run guard_compiles ${CMAKE_BINARY_DIR}/compiler_guard_${guard_index}
          ${guard_source} COMPILE_DEFINITIONS -O3 ${candidate_flags} CXX_STANDARD 20)
  math(EXPR guard_index "${guard_index} + 1")
  if(guard_compiles AND guard_run EQUAL 0)
    set(MAXCTX_ARCH_FLAGS ${candidate_flags})
    message(STATUS "maxctx baseline architecture flags: ${candidate}")
    break()
  endif()
  list(APPEND guard_tried "'${candidate}' (compiled: ${guard_compiles}, exit: ${guard_run})")
endforeach()
if(MAXCTX_NATIVE AND NOT MAXCTX_ARCH_FLAGS)
  message(FATAL_ERROR "The C++ compiler miscompiles constant vectors under every candidate: "
                      "${guard_tried}. Configure with -DMAXCTX_NATIVE=OFF or another compiler.")
endif()
