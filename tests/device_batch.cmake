# The GPU batch's parts that run without a GPU (tests/device_batch_test.sh):
# the dry run of tools/device/gpu_batch.sh (prepares and checks what travels
# to the GPU machine; needs apt-get download the first time), the NCCL driver
# and gradcomp-refcheck against the test-double NCCL (host memory, through the
# interposer), and the PyTorch example on gloo. The last two skip (77) only
# where PyTorch cannot be imported.
# Not in sanitizer builds: the driver tests LD_PRELOAD libgradcomp.so into
# Python, which carries no sanitizer runtime (the interposer and the checker
# run sanitized in test_nccl_interposer and test_bench_cli).
# docs/results/gpu.md is tools/device/results_table.py's output from the
# committed run its first line names (Python's standard library only).
add_test(NAME gpu_results_table COMMAND python3 tools/device/results_table.py --check docs/results/gpu.md
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
if(GRADCOMP_SANITIZE)
  return()
endif()
set(GC_DEVICE_TEST bash ${CMAKE_CURRENT_SOURCE_DIR}/device_batch_test.sh)
add_test(NAME device_batch_dry_run COMMAND ${GC_DEVICE_TEST} dry-run ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
set_tests_properties(device_batch_dry_run PROPERTIES TIMEOUT 600)
add_test(NAME device_batch_stacks_on_hang COMMAND ${GC_DEVICE_TEST} stacks ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
set_tests_properties(device_batch_stacks_on_hang PROPERTIES TIMEOUT 120)
add_test(NAME device_batch_passthrough COMMAND ${GC_DEVICE_TEST} passthrough ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
add_test(NAME device_batch_compressed
         COMMAND ${GC_DEVICE_TEST} compressed ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR} oktopk qsgd sign wagma)
add_test(NAME device_batch_interleave
         COMMAND ${GC_DEVICE_TEST} interleave ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
add_test(NAME device_batch_jax_cpu COMMAND ${GC_DEVICE_TEST} jax ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
add_test(NAME pytorch_example_gloo COMMAND ${GC_DEVICE_TEST} example ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
# Part g (FSDP2): the script byte-compiles and, on a PyTorch without FSDP2,
# exits 3 naming what is missing (skipped, 77, where torch cannot be
# imported); its verdict on synthetic stats files (standard library only).
add_test(NAME pytorch_example_fsdp
         COMMAND ${GC_DEVICE_TEST} fsdp-example ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
add_test(NAME device_batch_fsdp_check
         COMMAND ${GC_DEVICE_TEST} fsdp-check ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
set_tests_properties(device_batch_passthrough device_batch_compressed device_batch_interleave
                     device_batch_jax_cpu pytorch_example_gloo pytorch_example_fsdp
                     PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
set_tests_properties(device_batch_fsdp_check PROPERTIES TIMEOUT 60)
# torch.distributed.run --standalone (PyTorch 1.13) listens on the fixed port
# 29400, and gloo and the c10d store take free ports when they start: alone
# on the machine, no other test's port can race it (it failed once in a
# -j2 run here, next to device_batch_compressed; 7 runs alone passed).
set_tests_properties(pytorch_example_gloo pytorch_example_fsdp PROPERTIES RUN_SERIAL TRUE)
