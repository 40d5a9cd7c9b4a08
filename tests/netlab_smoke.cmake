# netlab_smoke: a 2-host emulated network (tools/netlab/netlab.sh, namespaces +
# tc at 1 Gbit/s), one gradcomp-bench dense rank in each, torn down after.
# Skipped (exit 77) where network namespaces cannot be created (not root).
add_test(NAME netlab_smoke
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/netlab_smoke.sh ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
set_tests_properties(netlab_smoke PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77 RUN_SERIAL ON)
