# gradcomp-sim's tests link the simulator library.
foreach(t test_sim test_sim_gpu)
  if(TARGET ${t})
    target_link_libraries(${t} PRIVATE gradcomp_sim_core)
  endif()
endforeach()
