# Included by tests/CMakeLists.txt (every tests/*.cmake is). The C export
# check of libgradcomp.so, the test-double libnccl.so.2, and the build
# dependencies of the tests that load them by path at run time.
add_subdirectory(${CMAKE_CURRENT_SOURCE_DIR}/nccl_double ${CMAKE_CURRENT_BINARY_DIR}/nccl_double)

add_executable(test_exports_c ${CMAKE_CURRENT_SOURCE_DIR}/test_exports.c)
set_target_properties(test_exports_c PROPERTIES LINKER_LANGUAGE C)
target_link_libraries(test_exports_c PRIVATE ${CMAKE_DL_LIBS})
add_dependencies(test_exports_c gradcomp)
add_test(NAME exports COMMAND test_exports_c $<TARGET_FILE:gradcomp>)

foreach(t test_nccl_interposer test_nccl_shim test_net_plugin)
  if(TARGET ${t})
    add_dependencies(${t} gradcomp nccl_double gradcomp_nccl_shim)
  endif()
endforeach()
