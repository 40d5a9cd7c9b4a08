# gradcomp-params --check validates the GRADCOMP_CONFIG file it finds, not only
# the variables: a file that is not TOML, or names an unknown key, fails with
# the file's name; a good one is reported with its rule count. This file is both the
# CTest registration (included by tests/CMakeLists.txt) and, with -P, the check.
if(NOT CMAKE_SCRIPT_MODE_FILE)
  add_test(NAME params_check_config_file
           COMMAND ${CMAKE_COMMAND} -DPARAMS_TOOL=$<TARGET_FILE:gradcomp-params>
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/params_check -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(params_check_config_file PROPERTIES TIMEOUT 60)
  return()
endif()

file(MAKE_DIRECTORY ${WORK})
file(WRITE ${WORK}/not_toml.toml "this is not = = toml [\n")
file(WRITE ${WORK}/unknown_key.toml "algo = \"dense\"\nalgorithm = \"dense\"\n")
file(WRITE ${WORK}/bad_algo.toml "algo = \"nosuch\"\n")
file(WRITE ${WORK}/good.toml "algo = \"dense\"\nmin_bytes = \"1M\"\n[[rule]]\nmin_bytes = \"64M\"\nalgo = \"off\"\n")

# run(<file> <expected exit> <text the output must contain>)
function(run file expected needle)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=GRADCOMP_ALGO --unset=GRADCOMP_COMMS
                          GRADCOMP_CONFIG=${file} ${PARAMS_TOOL} --check
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL expected)
    message(FATAL_ERROR "GRADCOMP_CONFIG=${file}: exit ${rc}, expected ${expected}\n${out}${err}")
  endif()
  string(FIND "${out}${err}" "${needle}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "GRADCOMP_CONFIG=${file}: no '${needle}' in:\n${out}${err}")
  endif()
  message(STATUS "GRADCOMP_CONFIG=${file}: exit ${rc}: ${out}${err}")
endfunction()

run(${WORK}/not_toml.toml 1 "not_toml.toml")
run(${WORK}/unknown_key.toml 1 "algorithm")
run(${WORK}/bad_algo.toml 1 "nosuch")
run(${WORK}/missing.toml 1 "missing.toml")
run(${WORK}/good.toml 0 "1 rule(s), config file ${WORK}/good.toml (GRADCOMP_CONFIG)")
