# gradcomp-sim's tests link the simulator library.
foreach(t test_sim test_sim_gpu test_sim_auto)
  if(TARGET ${t})
    target_link_libraries(${t} PRIVATE gradcomp_sim_core)
  endif()
endforeach()
