# More of gradcomp.torch in CI, label pytorch (ctest -L pytorch), beside
# tests/pytorch.cmake; skipped (77) where torch cannot be imported; not in
# sanitizer builds (Python carries no sanitizer runtime).
#   pytorch_models       gradcomp-launch -- torchrun, 2 ranks: the accuracy
#                        matrix's ViT and char LM (examples/pytorch/
#                        accuracy_matrix.py, made small) 6 AdamW steps each
#                        through the hook with qsgd 4 bit (the configuration)
#                        and oktopk (algo=): ranks bit-equal, buckets compressed
#                        per the stats files, the launcher's summary of them
#                        (tests/pytorch_models_test.py; about 40 s on 2 busy
#                        cores, most of it importing torch in 4 processes)
#   pytorch_hook_input   bad input: GradcompState settings that differ across
#                        ranks, float64/int64 buckets, a group without a store
#                        (tests/pytorch_hook_input_test.py; about 14 s)
if(GRADCOMP_SANITIZE)
  return()
endif()
add_test(NAME pytorch_models
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/pytorch_models_test.py ${PROJECT_BINARY_DIR})
add_test(NAME pytorch_hook_input
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/pytorch_hook_input_test.py ${PROJECT_BINARY_DIR})
set_tests_properties(pytorch_models pytorch_hook_input PROPERTIES LABELS pytorch TIMEOUT 240
                     SKIP_RETURN_CODE 77)
