# The CUDA toolchain for kernels/cuda/ (and NCCL for mesh/): nvcc 13 from /usr/local/cuda, code
# for sm_90 (H100/H200; the Hopper-only kernels add sm_90a themselves). Nothing here needs a GPU:
# the build compiles and links everywhere, and the backend says at run time when a rank finds no
# device.
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
if(NOT CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
enable_language(CUDA)
# C++20 device code (the targets' CXX_STANDARD 20 carries over to their .cu files): nvcc 13 has
# it, CMake 3.25 does not know that yet, so the flag is named here.
set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
# Debian's imported targets (fmt, hwy) name /usr/include, which CMake drops for g++ but would pass
# to nvcc as -isystem, breaking libstdc++'s #include_next <math.h>: it is the host's default.
list(APPEND CMAKE_CUDA_IMPLICIT_INCLUDE_DIRECTORIES /usr/include)
find_package(CUDAToolkit REQUIRED)
if(CCACHE_PROGRAM)
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
endif()
# NCCL ships with the toolkit here (/usr/local/cuda/lib, include/nccl.h), not as a CMake package.
find_library(MAXCTX_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_ROOT}/lib
                                            ${CUDAToolkit_LIBRARY_ROOT}/lib64 REQUIRED)
add_library(maxctx_nccl INTERFACE)
target_link_libraries(maxctx_nccl INTERFACE ${MAXCTX_NCCL_LIBRARY} CUDA::cudart)
target_include_directories(maxctx_nccl INTERFACE ${CUDAToolkit_INCLUDE_DIRS})

# Adds every .cu file under src/maxctx/kernels/cuda/ to the kernels area (the backend registry in
# kernels/backends.cpp calls into it under MAXCTX_HAVE_CUDA), with cuBLASLt and the runtime.
function(maxctx_add_cuda_sources)
  file(GLOB_RECURSE cuda_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/maxctx/kernels/cuda/*.cu)
  target_sources(maxctx_kernels PRIVATE ${cuda_sources})
  target_link_libraries(maxctx_kernels PRIVATE CUDA::cudart CUDA::cublasLt CUDA::cublas)
  set_target_properties(maxctx_kernels PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
  # nvcc forwards host flags through -Xcompiler; keep the AVX2/native flags off device code.
  target_compile_options(maxctx_kernels PRIVATE
                         $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo>)
endfunction()
