# jomoim_add_test(NAME SOURCES a.cpp b.cpp [LABELS l1 l2] [LIBS extra] [PROPERTIES name value ...])
# PROPERTIES are set on every discovered test (e.g. FIXTURES_REQUIRED).
# One helper registers every GoogleTest program with CTest (one CTest entry per test case).
include(GoogleTest)
find_package(GTest QUIET)
function(jomoim_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LABELS;LIBS;PROPERTIES" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  # jomoim_attention_cases: the shared table of attention cases (attention_test_util.hpp uses it).
  target_link_libraries(${name} PRIVATE jomoim::jomoim jomoim_attention_cases GTest::gtest GTest::gtest_main
                        ${ARG_LIBS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  gtest_discover_tests(${name} PROPERTIES LABELS "${ARG_LABELS}" ${ARG_PROPERTIES} DISCOVERY_TIMEOUT 60)
endfunction()
