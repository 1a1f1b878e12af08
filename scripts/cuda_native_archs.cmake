# dgemma_cuda_native_archs(OUT NVCC): the compute capabilities of the GPUs this machine has, as
# "89;120" (no dots), each one that nvcc can compile for and that the fixed targets do not cover
# already (sm_90: the sm_90a code runs there). Empty without a GPU (CI, a build machine), without
# nvidia-smi, or when it fails: CMake's CUDA_ARCHITECTURES=native stops the configuration there and
# nvcc's -arch=native falls back to its default architecture, so the build asks nvidia-smi itself.
function(dgemma_cuda_native_archs out nvcc)
  set(archs "")
  find_program(DGEMMA_NVIDIA_SMI nvidia-smi)
  if(DGEMMA_NVIDIA_SMI)
    execute_process(COMMAND ${DGEMMA_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
                    OUTPUT_VARIABLE caps RESULT_VARIABLE rc ERROR_QUIET TIMEOUT 20)
    execute_process(COMMAND ${nvcc} --list-gpu-code OUTPUT_VARIABLE codes ERROR_QUIET TIMEOUT 20)
    if(rc EQUAL 0)
      string(REPLACE "\n" ";" caps "${caps}")
      string(REPLACE "\n" ";" codes "${codes}")
      foreach(cap IN LISTS caps)
        string(STRIP "${cap}" cap)
        string(REPLACE "." "" sm "${cap}")
        if(NOT sm MATCHES "^[0-9]+$" OR sm STREQUAL "90" OR sm IN_LIST archs)
          continue()
        endif()
        if("sm_${sm}" IN_LIST codes)
          list(APPEND archs ${sm})
        else()
          message(STATUS "dgemma: nvcc has no sm_${sm} (a GPU here): it runs the compute_80 PTX")
        endif()
      endforeach()
    endif()
  endif()
  set(${out} "${archs}" PARENT_SCOPE)
endfunction()
