# Debian package: `cpack -G DEB` in the build directory packages what
# cmake/install.cmake installs, under /usr. Depends comes from the binaries
# themselves (dpkg-shlibdeps: UCX, FFTW, OpenBLAS, zlib, the C++ runtime, ...)
# plus python3 for gradcomp-launch; tests/deb_check.sh checks that every
# library the installed files need belongs to a package named in Depends.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME gradcomp)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "gradcomp developers <gradcomp-dev@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "compressed allreduce for NCCL jobs (LD_PRELOAD interposer over UCX)")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
  "libgradcomp.so intercepts ncclAllReduce (LD_PRELOAD) and runs compressed\ncollectives (top-k sparsification, quantization, sign, FFT, WAGMA) over UCX,\npassing every other call to NCCL; also an NCCL net plugin and a forwarding\nlibnccl.so.2. Tools: gradcomp-launch (enable it per job and summarize what\ncompression did), gradcomp-bench, gradcomp-params, gradcomp-run,\ngradcomp-train, gradcomp-sim. Admin defaults: /etc/gradcomp.conf\n(example in /usr/share/doc/gradcomp).")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "python3")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3-matplotlib")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "openmpi-bin, dataset-fashion-mnist")
# Stripped and gzip-compressed: a small package built in seconds.
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_COMPRESSION_TYPE gzip)
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/packages)
include(CPack)
