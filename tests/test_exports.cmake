# Included by tests/CMakeLists.txt (every tests/*.cmake is). The C export
# check of libgradcomp.so, the DT_NEEDED check, the test-double libnccl.so.2,
# and the build dependencies of the tests that load them by path at run time.
#
# Run as a script (cmake -DGC_LIBRARY=... -DGC_READELF=... -P this file), it is
# the DT_NEEDED check itself: libgradcomp.so is LD_PRELOADed into jobs whose
# CUDA and NCCL libraries live wherever the job put them (pip wheels), so it
# must not need libcudart, libcufft or libnccl by name (cudart is linked
# statically, cuFFT dlopened, NCCL resolved through the already-loaded copy).
if(CMAKE_SCRIPT_MODE_FILE)
  execute_process(COMMAND ${GC_READELF} -d ${GC_LIBRARY} OUTPUT_VARIABLE dynamic
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${GC_READELF} -d ${GC_LIBRARY} failed (${rc})")
  endif()
  string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*" needed "${dynamic}")
  if(NOT needed)
    message(FATAL_ERROR "no NEEDED entries in ${GC_LIBRARY}: not a readelf -d listing?\n${dynamic}")
  endif()
  foreach(entry ${needed})
    message(STATUS "${entry}")
    if(entry MATCHES "libcudart|libcufft|libnccl")
      message(FATAL_ERROR "${GC_LIBRARY} has a forbidden dependency: ${entry}")
    endif()
  endforeach()
  return()
endif()

add_subdirectory(${CMAKE_CURRENT_SOURCE_DIR}/nccl_double ${CMAKE_CURRENT_BINARY_DIR}/nccl_double)

add_executable(test_exports_c ${CMAKE_CURRENT_SOURCE_DIR}/test_exports.c)
# In sanitizer builds libgradcomp.so needs the C++ parts of the sanitizer
# runtime (UBSan's vptr checks), which only a C++ link brings in.
if(GRADCOMP_SANITIZE)
  set_target_properties(test_exports_c PROPERTIES LINKER_LANGUAGE CXX)
else()
  set_target_properties(test_exports_c PROPERTIES LINKER_LANGUAGE C)
endif()
target_link_libraries(test_exports_c PRIVATE ${CMAKE_DL_LIBS})
add_dependencies(test_exports_c gradcomp)
add_test(NAME exports COMMAND test_exports_c $<TARGET_FILE:gradcomp>)

find_program(GC_READELF NAMES readelf ${CMAKE_READELF})
if(GC_READELF)
  add_test(NAME exports_no_cuda_or_nccl_needed
           COMMAND ${CMAKE_COMMAND} -DGC_LIBRARY=$<TARGET_FILE:gradcomp>
                   -DGC_READELF=${GC_READELF} -P ${CMAKE_CURRENT_LIST_FILE})
endif()

foreach(t test_nccl_interposer test_nccl_reduce_scatter test_nccl_shim test_net_plugin test_collnet_plugin test_tuner_plugin)
  if(TARGET ${t})
    add_dependencies(${t} gradcomp nccl_double gradcomp_nccl_shim)
  endif()
endforeach()
