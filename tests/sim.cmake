# gradcomp-sim's tests link the simulator library.
if(TARGET test_sim)
  target_link_libraries(test_sim PRIVATE gradcomp_sim_core)
endif()
