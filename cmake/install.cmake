# Install rules (`cmake --install build --prefix P`, and what cpack packages):
#   P/bin/gradcomp-*                     tools, RUNPATH $ORIGIN/../<libdir> (+ the
#                                        non-system directories they link from)
#   P/<libdir>/libgradcomp.so            the NCCL interposer / net plugin
#   P/<libdir>/libnccl-net-gradcomp.so   -> libgradcomp.so (NCCL_NET_PLUGIN=gradcomp)
#   P/<libdir>/libgradcomp-api.so*       the public C API
#   P/<libdir>/gradcomp/shim/libnccl.so.2  the forwarding shim, in its own directory
#   P/include/gradcomp/gradcomp.h
#   P/<libdir>/cmake/gradcomp/           find_package(gradcomp)
#   P/<libdir>/pkgconfig/gradcomp.pc     pkg-config gradcomp
#   P/share/man/man1/gradcomp-*.1        from each tool's --help
#   P/lib/python3/dist-packages/gradcomp/  the Python package (gradcomp.torch: the
#                                        DDP hook); on sys.path for the .deb (/usr),
#                                        PYTHONPATH for another prefix
#   P/share/doc/gradcomp/                README, usage, configuration, design,
#                                        reliability, gradcomp.conf.example
include(CMakePackageConfigHelpers)

set(GC_INSTALLED_TOOLS gradcomp-bench gradcomp-params gradcomp-run gradcomp-sim gradcomp-train)
if(TARGET gradcomp-kbench)
  list(APPEND GC_INSTALLED_TOOLS gradcomp-kbench)
endif()
set_target_properties(${GC_INSTALLED_TOOLS} PROPERTIES
  INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}" INSTALL_RPATH_USE_LINK_PATH ON)
install(TARGETS ${GC_INSTALLED_TOOLS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(PROGRAMS ${PROJECT_BINARY_DIR}/tools/gradcomp-launch/install/gradcomp-launch
        DESTINATION ${CMAKE_INSTALL_BINDIR})

install(TARGETS gradcomp LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_BINARY_DIR}/plugin/libnccl-net-gradcomp.so  # the symlink itself
        DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS gradcomp_api LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS gradcomp_nccl_shim LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/gradcomp/shim
        NAMELINK_SKIP)
install(FILES ${PROJECT_SOURCE_DIR}/include/gradcomp/gradcomp.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/gradcomp)

# The Python package, with _install.py telling it where the C API library is
# relative to itself (python/gradcomp/capi.py).
set(GC_PYTHON_DIR lib/python3/dist-packages)
file(RELATIVE_PATH GC_PY_TO_LIB /P/${GC_PYTHON_DIR}/gradcomp /P/${CMAKE_INSTALL_LIBDIR})
file(WRITE ${PROJECT_BINARY_DIR}/python/_install.py
  "# Written by the install (cmake/install.cmake): the C API library's directory\n"
  "# relative to this package.\nLIB_RELATIVE = \"${GC_PY_TO_LIB}\"\n")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/gradcomp DESTINATION ${GC_PYTHON_DIR}
        FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
install(FILES ${PROJECT_BINARY_DIR}/python/_install.py DESTINATION ${GC_PYTHON_DIR}/gradcomp)

# CMake package (relocatable) and pkg-config file (written at install time, so
# that its prefix is the one installed to: --prefix, or cpack's /usr).
set(GC_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/gradcomp)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/gradcompConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/gradcompConfig.cmake INSTALL_DESTINATION ${GC_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/gradcompConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/gradcompConfig.cmake
        ${PROJECT_BINARY_DIR}/cmake/gradcompConfigVersion.cmake DESTINATION ${GC_CMAKE_DIR})
install(CODE "
  set(GC_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  set(CMAKE_INSTALL_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
  set(CMAKE_INSTALL_INCLUDEDIR \"${CMAKE_INSTALL_INCLUDEDIR}\")
  set(CMAKE_INSTALL_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
  set(PROJECT_VERSION \"${PROJECT_VERSION}\")
  configure_file(\"${PROJECT_SOURCE_DIR}/cmake/gradcomp.pc.in\"
                 \"${PROJECT_BINARY_DIR}/cmake/pc/gradcomp.pc\" @ONLY)
  file(INSTALL \"${PROJECT_BINARY_DIR}/cmake/pc/gradcomp.pc\"
       DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig\")
")

# Man pages from --help (not in sanitizer builds, whose tools would run under
# the sanitizer at build time).
if(NOT GRADCOMP_SANITIZE)
  set(GC_MAN_SUMMARY_gradcomp-bench "allreduce benchmark of every gradcomp algorithm (nccl-tests flags)")
  set(GC_MAN_SUMMARY_gradcomp-params "the GRADCOMP_* parameters: list, check, document")
  set(GC_MAN_SUMMARY_gradcomp-run "run N local ranks of a command (an mpirun for one machine)")
  set(GC_MAN_SUMMARY_gradcomp-sim "gradcomp's algorithms over a simulated network, up to thousands of ranks")
  set(GC_MAN_SUMMARY_gradcomp-train "data-parallel Fashion-MNIST training over gradcomp")
  set(GC_MAN_SUMMARY_gradcomp-kbench "throughput of gradcomp's CUDA kernels")
  set(GC_MAN_SUMMARY_gradcomp-launch "run a job with gradcomp's NCCL interposer and summarize it")
  set(pages "")
  foreach(tool ${GC_INSTALLED_TOOLS} gradcomp-launch)
    set(stage "")
    if(tool STREQUAL "gradcomp-launch")
      # The installed copy, beside the build's gradcomp-params, so that the
      # page shows the installed defaults.
      set(bin ${PROJECT_BINARY_DIR}/man/stage/bin)
      set(exe ${bin}/gradcomp-launch)
      set(deps gradcomp-launch gradcomp-params ${PROJECT_SOURCE_DIR}/tools/gradcomp-launch/gradcomp-launch.py.in)
      set(stage COMMAND ${CMAKE_COMMAND} -E make_directory ${bin}
                COMMAND ${CMAKE_COMMAND} -E copy ${PROJECT_BINARY_DIR}/tools/gradcomp-launch/install/gradcomp-launch ${bin}
                COMMAND ${CMAKE_COMMAND} -E create_symlink $<TARGET_FILE:gradcomp-params> ${bin}/gradcomp-params)
    else()
      set(exe $<TARGET_FILE:${tool}>)
      set(deps ${tool})
    endif()
    set(page ${PROJECT_BINARY_DIR}/man/${tool}.1)
    add_custom_command(OUTPUT ${page} ${stage}
      COMMAND ${CMAKE_COMMAND} -DTOOL=${exe} -DNAME=${tool} "-DSUMMARY=${GC_MAN_SUMMARY_${tool}}"
              -DVERSION=${PROJECT_VERSION} -DOUT=${page} -P ${PROJECT_SOURCE_DIR}/cmake/help2man.cmake
      DEPENDS ${deps} ${PROJECT_SOURCE_DIR}/cmake/help2man.cmake VERBATIM)
    list(APPEND pages ${page})
  endforeach()
  add_custom_target(gradcomp_man ALL DEPENDS ${pages})
  install(FILES ${pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
endif()

install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/docs/usage.md
        ${PROJECT_SOURCE_DIR}/docs/configuration.md ${PROJECT_SOURCE_DIR}/docs/design.md
        ${PROJECT_SOURCE_DIR}/docs/reliability.md ${PROJECT_SOURCE_DIR}/docs/gradcomp.conf.example
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
