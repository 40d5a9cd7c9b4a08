# gradcomp-train's tests: the model tests link the trainer library; the
# end-to-end test runs the gradcomp-train executable, so it must be built first.
if(TARGET test_train_model)
  target_link_libraries(test_train_model PRIVATE gradcomp_train_core)
endif()
if(TARGET test_train)
  add_dependencies(test_train gradcomp-train)
endif()
