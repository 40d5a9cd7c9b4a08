# Included by tests/CMakeLists.txt. What an admin installs and runs:
#   install_staged  cmake --install into <build>/staging, checked with the
#                   installed files only (tests/install_check.sh); the CTest
#                   fixture gradcomp_staged for the tests below
#   launch_cli      the staged gradcomp-launch around a 2-rank application that
#                   calls ncclAllReduce through the NCCL test double: summary
#                   against the stats files, exit codes, bad flags
#   launchers       the staged gradcomp-bench/-train as ranks of srun and
#                   torchrun (their variables set by hand) and, when mpirun is
#                   on PATH at configure time (CI installs openmpi-bin), of mpirun
#   deb_package     cpack -G DEB, Depends, and as root dpkg -i with the
#                   installed tools and /etc/gradcomp.conf (RUN_SERIAL: it
#                   changes /usr and /etc while it runs)
# Not in sanitizer builds: their libraries need the sanitizer runtime loaded
# first, which programs built against the install do not have.
if(GRADCOMP_SANITIZE)
  return()
endif()
find_program(GC_MPIRUN NAMES mpirun)
set(stage ${PROJECT_BINARY_DIR}/staging)
set(app $<TARGET_FILE:nccl_double_app>)

add_test(NAME install_staged
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/install_check.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${stage})
set_tests_properties(install_staged PROPERTIES FIXTURES_SETUP gradcomp_staged TIMEOUT 300
                     RESOURCE_LOCK gradcomp_staging)
add_test(NAME deb_package COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/deb_check.sh ${PROJECT_BINARY_DIR} ${app})
set_tests_properties(deb_package PROPERTIES RUN_SERIAL ON SKIP_RETURN_CODE 4 TIMEOUT 300)

find_program(GC_TEST_PYTHON3 NAMES python3)
if(NOT GC_TEST_PYTHON3)
  message(WARNING "python3 not found: gradcomp-launch and the launcher tests cannot run")
  return()
endif()

add_test(NAME launch_cli COMMAND ${GC_TEST_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/launch_check.py cli ${stage}/bin ${app})
set(launchers_args ${stage}/bin)
if(GC_MPIRUN)
  list(APPEND launchers_args ${app})
else()
  message(STATUS "mpirun not found: the launchers test sets the launchers' variables by hand only")
endif()
add_test(NAME launchers COMMAND ${GC_TEST_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/launch_check.py launchers ${launchers_args})
set_tests_properties(launch_cli launchers PROPERTIES FIXTURES_REQUIRED gradcomp_staged TIMEOUT 300
                     RESOURCE_LOCK gradcomp_staging)
