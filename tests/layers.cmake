add_test(NAME layering COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/check_layers.sh ${PROJECT_SOURCE_DIR})
