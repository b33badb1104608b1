add_library(pdr_warnings INTERFACE)
target_compile_options(pdr_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Woverloaded-virtual>
  $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra>)
# GCC 12 reports Asio's coroutine frame allocator (operator new/delete with a size) as a
# mismatched pair at -O2 (a false positive on awaitable_frame_base); keep the rest fatal.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(pdr_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wno-mismatched-new-delete>)
endif()
if(PDR_WERROR)
  target_compile_options(pdr_warnings INTERFACE -Werror)
endif()
if(PDR_SANITIZE)
  target_compile_options(pdr_warnings INTERFACE -fsanitize=${PDR_SANITIZE} -fno-omit-frame-pointer)
  target_link_options(pdr_warnings INTERFACE -fsanitize=${PDR_SANITIZE})
endif()
add_library(pdr::warnings ALIAS pdr_warnings)

# pdr_library(name SOURCES ... DEPS ...): one folder, one library target, alias pdr::name.
function(pdr_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(pdr_${name} STATIC ${ARG_SOURCES})
  add_library(pdr::${name} ALIAS pdr_${name})
  target_include_directories(pdr_${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_compile_features(pdr_${name} PUBLIC cxx_std_20)
  target_link_libraries(pdr_${name} PUBLIC ${ARG_DEPS} PRIVATE pdr::warnings ${ARG_PRIVATE_DEPS})
endfunction()
