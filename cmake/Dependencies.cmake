# All third-party dependencies come from Debian packages (scripts/install-deps).
find_package(Threads REQUIRED)
find_package(Boost 1.81 REQUIRED CONFIG)
find_package(nlohmann_json 3.11 REQUIRED)
find_package(CURL REQUIRED)
# ZMQ (cppzmq headers + libzmq, target `cppzmq`): the LMCache mode's "KV ready" notifications
# (router/kv/ receives them, pdsim sends them; issue 16).
find_package(cppzmq 4.9 REQUIRED)
find_package(PkgConfig REQUIRED)
# The /metrics registry and text format (prometheus-cpp::core only: our own server serves it).
find_package(prometheus-cpp CONFIG REQUIRED)  # Debian ships no version file
# pdrouter allocates and frees many small objects per request (coroutine frames, handlers,
# headers): tcmalloc's thread caches take ~12 % of its instructions per request off glibc's
# malloc (docs/benchmarks.md). Sanitizers bring their own allocator.
if(PDR_TCMALLOC AND NOT PDR_SANITIZE)
  pkg_check_modules(TCMALLOC REQUIRED IMPORTED_TARGET libtcmalloc_minimal)
endif()
if(PDR_WITH_UCX)
  pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx>=1.13)
endif()
if(PDR_BUILD_TESTS)
  find_package(GTest 1.12 REQUIRED)
  include(GoogleTest)
endif()

# Boost.Asio/Beast as a target with our defines; imported includes are SYSTEM so their
# warnings stay quiet.
add_library(pdr_boost INTERFACE)
target_link_libraries(pdr_boost INTERFACE Boost::headers Threads::Threads)
target_compile_definitions(pdr_boost INTERFACE BOOST_ASIO_NO_DEPRECATED)
add_library(pdr::boost ALIAS pdr_boost)
