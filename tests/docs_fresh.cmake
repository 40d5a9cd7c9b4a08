# docs/configuration.md must equal `gradcomp-params --markdown` (it is
# generated from common/param_list.h). This file is both the CTest
# registration (included by tests/CMakeLists.txt) and, run with -P, the check.
if(NOT CMAKE_SCRIPT_MODE_FILE)
  add_test(NAME docs_fresh
           COMMAND ${CMAKE_COMMAND} -DPARAMS_TOOL=$<TARGET_FILE:gradcomp-params>
                   -DDOC=${PROJECT_SOURCE_DIR}/docs/configuration.md -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(docs_fresh PROPERTIES TIMEOUT 60)
  return()
endif()

set(regen "regenerate with: gradcomp-params --markdown > docs/configuration.md (the tool is built at <build>/tools/gradcomp-params/gradcomp-params)")
execute_process(COMMAND ${PARAMS_TOOL} --markdown OUTPUT_VARIABLE generated RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PARAMS_TOOL} --markdown failed (exit ${rc})")
endif()
if(NOT EXISTS ${DOC})
  message(FATAL_ERROR "docs/configuration.md is missing: ${regen}")
endif()
file(READ ${DOC} committed)
if(NOT generated STREQUAL committed)
  message(FATAL_ERROR "docs/configuration.md is stale: ${regen}")
endif()
message(STATUS "docs/configuration.md matches gradcomp-params --markdown")
