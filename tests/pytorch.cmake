# gradcomp.torch (python/gradcomp/), the DDP communication hook, driven by
# PyTorch on gloo: 2 ranks train a tiny model through it with qsgd and
# oktopk, plus its bad-input cases (tests/pytorch_hook_test.py; about 5 s on
# 2 cores). Label pytorch (ctest -L pytorch); skipped (77) where torch cannot
# be imported. Not in sanitizer builds: Python carries no sanitizer runtime
# for libgradcomp-api.so.
if(GRADCOMP_SANITIZE)
  return()
endif()
add_test(NAME pytorch_ddp_hook
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/pytorch_hook_test.py ${PROJECT_BINARY_DIR})
set_tests_properties(pytorch_ddp_hook PROPERTIES LABELS pytorch TIMEOUT 120 SKIP_RETURN_CODE 77)
# gradcomp.adam (python/gradcomp/adam.py: 1-bit Adam's frozen variance and
# compressed momentum as a DDP hook): 2 ranks, a tiny MLP; the warm-up equals
# torch AdamW, ranks bit-equal with oktopk and sign after it, v frozen
# (tests/pytorch_adam_test.py; about 2 s).
add_test(NAME pytorch_adam_hook
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/pytorch_adam_test.py ${PROJECT_BINARY_DIR})
set_tests_properties(pytorch_adam_hook PROPERTIES LABELS pytorch TIMEOUT 120 SKIP_RETURN_CODE 77)
