# test_bench_cli runs the gradcomp-bench executable (and docs_fresh runs
# gradcomp-params): build them with the tests.
if(TARGET test_bench_cli)
  add_dependencies(test_bench_cli gradcomp-bench)
endif()
