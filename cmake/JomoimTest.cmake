# jomoim_add_test(NAME SOURCES a.cpp b.cpp [LABELS l1 l2] [LIBS extra] [PROPERTIES name value ...])
# PROPERTIES are set on every CTest entry of the program (e.g. FIXTURES_REQUIRED).
# One helper registers every GoogleTest program with CTest, in one of two ways:
#   JOMOIM_TEST_SHARDS=0 (the default): one CTest entry per test case (gtest_discover_tests),
#     so a failure names its case and `ctest -R` picks single cases;
#   JOMOIM_TEST_SHARDS=N: N entries per program, each running every N-th case through
#     GoogleTest's own sharding (GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX). The asan preset uses
#     this: there a process start costs about 0.3 s, which one entry per case paid 1,600 times.
include(GoogleTest)
find_package(GTest QUIET)
set(JOMOIM_TEST_SHARDS 0 CACHE STRING "0: one CTest entry per GoogleTest case; N: N shards per test program")
if(NOT JOMOIM_TEST_SHARDS MATCHES "^[0-9]+$")
  message(FATAL_ERROR "JOMOIM_TEST_SHARDS must be a whole number (0 or a shard count), got '${JOMOIM_TEST_SHARDS}'")
endif()

# jomoim_register_gtest(TARGET [LABELS l1 l2] [PROPERTIES name value ...]): the CTest entries of
# a GoogleTest program that is already built by add_executable.
function(jomoim_register_gtest name)
  cmake_parse_arguments(ARG "" "" "LABELS;PROPERTIES" ${ARGN})
  if(JOMOIM_TEST_SHARDS EQUAL 0)
    gtest_discover_tests(${name} PROPERTIES LABELS "${ARG_LABELS}" ${ARG_PROPERTIES} DISCOVERY_TIMEOUT 60)
    return()
  endif()
  math(EXPR last "${JOMOIM_TEST_SHARDS} - 1")
  foreach(i RANGE ${last})
    set(test ${name}.shard${i}of${JOMOIM_TEST_SHARDS})
    add_test(NAME ${test} COMMAND ${name})
    set_tests_properties(${test} PROPERTIES LABELS "${ARG_LABELS}" ${ARG_PROPERTIES})
    # ENVIRONMENT_MODIFICATION, not ENVIRONMENT: PROPERTIES may set ENVIRONMENT themselves.
    set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT_MODIFICATION
                 "GTEST_TOTAL_SHARDS=set:${JOMOIM_TEST_SHARDS}" "GTEST_SHARD_INDEX=set:${i}")
  endforeach()
endfunction()

function(jomoim_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LABELS;LIBS;PROPERTIES" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  # jomoim_attention_cases: the shared table of attention cases (attention_test_util.hpp uses it).
  target_link_libraries(${name} PRIVATE jomoim::jomoim jomoim_attention_cases GTest::gtest GTest::gtest_main
                        ${ARG_LIBS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  jomoim_register_gtest(${name} LABELS ${ARG_LABELS} PROPERTIES ${ARG_PROPERTIES})
endfunction()
