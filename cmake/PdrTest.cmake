# pdr_scaled_timeout(out seconds): a test's timeout, given as its release bound. Sanitized builds
# run the same tests several times slower (ASan about 3x, more on a loaded machine:
# integration_lmcache_sim took 95 s of its 150 under ASan in one local CI run and timed out in
# the next), so the bound doubles under ASan and triples under TSan. For every test, also those
# registered with add_test directly.
function(pdr_scaled_timeout out seconds)
  if(PDR_SANITIZE MATCHES "thread")
    math(EXPR seconds "${seconds} * 3")
  elseif(PDR_SANITIZE)
    math(EXPR seconds "${seconds} * 2")
  endif()
  set(${out} ${seconds} PARENT_SCOPE)
endfunction()

# pdr_add_test(name LABEL unit|integration|e2e|ucx SOURCES ... DEPS ... [TIMEOUT s])
# Builds one gtest executable and registers it as a single ctest test with a label and a
# timeout (one process per executable keeps ctest start-up cheap on 2 cores).
function(pdr_add_test name)
  cmake_parse_arguments(ARG "" "LABEL;TIMEOUT" "SOURCES;DEPS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  pdr_scaled_timeout(ARG_TIMEOUT ${ARG_TIMEOUT})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main pdr::warnings)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  add_test(NAME ${name} COMMAND ${name} --gtest_color=no)
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABEL}" TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "PDR_BUILD_DIR=${PROJECT_BINARY_DIR};PDR_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()

# Adds every immediate subfolder of the current folder that has a CMakeLists.txt.
function(pdr_add_subfolders)
  file(GLOB children LIST_DIRECTORIES true RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/*)
  list(SORT children)
  foreach(child ${children})
    if(IS_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/${child} AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${child}/CMakeLists.txt)
      add_subdirectory(${child})
    endif()
  endforeach()
endfunction()
