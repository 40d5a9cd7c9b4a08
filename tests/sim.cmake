# gradcomp-sim's tests link the simulator library; test_sim_kbench reads the
# H200 gradcomp-kbench run committed under docs/results/gpu.
foreach(t test_sim test_sim_gpu test_sim_auto test_sim_kbench)
  if(TARGET ${t})
    target_link_libraries(${t} PRIVATE gradcomp_sim_core)
  endif()
endforeach()
if(TARGET test_sim_kbench)
  set(h200 ${PROJECT_SOURCE_DIR}/docs/results/gpu/2026-11-28-h200/call1/a-kbench/kbench.json)
  target_compile_definitions(test_sim_kbench PRIVATE GC_H200_KBENCH="${h200}")
endif()
# gradcomp-kbench --check on the committed H200 run, without a GPU: exit 3 and
# the quantizer named at 0.7 of the copy; nothing fails at fraction 0.
if(TARGET gradcomp-kbench)
  set(kb $<TARGET_FILE:gradcomp-kbench>)
  set(h200 ${PROJECT_SOURCE_DIR}/docs/results/gpu/2026-11-28-h200/call1/a-kbench/kbench.json)
  add_test(NAME kbench_check_from_json COMMAND sh -c
           "out=$(\"$0\" --check 0.7 --from-json \"$1\"); rc=$?; echo \"$out\"; \
            test $rc -eq 3 && echo \"$out\" | grep -q '^check: quantize_maxmin_4b_residual' && \
            \"$0\" --check 0 --select-check 0 --from-json \"$1\" > /dev/null"
           ${kb} ${h200})
endif()
