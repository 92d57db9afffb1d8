# WALFEED_STATIC_DEPS: link gRPC, Protobuf and Abseil (and gRPC's own re2,
# c-ares, upb, gpr, address_sorting) from the static archives Debian ships beside
# the shared objects.
#
# Why: with the shared objects every walfeed process maps about 90 libraries and
# resolves about 23,000 symbol relocations before main(). Measured on the 2-vCPU
# bench machine, `walfeed-server --help` cost 24 ms of CPU, about 14 ms of it in
# the dynamic loader's symbol lookups; static, 10 ms. That is paid at every
# start of the server and of every client tool, inside the start-up-to-first-
# event budget (docs/performance.md).
#
# The switch is global, for every target (tests included), so no process ever
# holds two copies of Abseil or Protobuf (one from an archive, one from a shared
# object): their globals (descriptor pools, mutex state) must be one.

# CMake's FindProtobuf reads this before it looks for the library (on a fresh
# cache; walfeed_use_static_deps() re-points the target whatever the cache holds).
set(Protobuf_USE_STATIC_LIBS ON)

# The archive beside a shared object: /x/libfoo.so[.N...] -> /x/libfoo.a.
function(_walfeed_archive_for so_path out_var)
  string(REGEX REPLACE "\\.so(\\.[0-9.]+)?$" ".a" archive "${so_path}")
  if(archive STREQUAL so_path OR NOT EXISTS "${archive}")
    message(FATAL_ERROR "WALFEED_STATIC_DEPS: no static archive beside ${so_path}; "
                        "configure with -DWALFEED_STATIC_DEPS=OFF to link the shared objects")
  endif()
  set(${out_var} "${archive}" PARENT_SCOPE)
endfunction()

# Points every imported library target of Abseil, gRPC (and its c-ares) and
# Protobuf at its archive. Called after find_package(absl), (Protobuf), (gRPC).
function(walfeed_use_static_deps)
  get_directory_property(imported IMPORTED_TARGETS)
  set(absl_libraries "")
  foreach(target IN LISTS imported)
    if(NOT target MATCHES "^(absl|gRPC)::" AND NOT target STREQUAL "c-ares::cares"
       AND NOT target STREQUAL "protobuf::libprotobuf")
      continue()
    endif()
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "INTERFACE_LIBRARY" OR type STREQUAL "EXECUTABLE")
      continue()  # Header-only Abseil parts; protoc plugins.
    endif()
    foreach(property IMPORTED_LOCATION_NONE IMPORTED_LOCATION IMPORTED_LOCATION_RELEASE
                     IMPORTED_LOCATION_DEBUG)
      get_target_property(location ${target} ${property})
      if(location AND NOT location MATCHES "\\.a$")
        _walfeed_archive_for("${location}" archive)
        set_target_properties(${target} PROPERTIES ${property} "${archive}")
      endif()
    endforeach()
    set_target_properties(${target} PROPERTIES IMPORTED_SONAME_NONE "" IMPORTED_SONAME "")
    if(target MATCHES "^absl::")
      list(APPEND absl_libraries ${target})
    endif()
  endforeach()
  # The shared libgrpc/libgpr carry their Abseil dependencies inside; their
  # CMake targets list only what gRPC's headers use. The archives need the rest:
  # every Abseil library is offered (the linker takes only what is referenced).
  foreach(target gRPC::gpr gRPC::grpc gRPC::grpc_unsecure)
    if(TARGET ${target})
      set_property(TARGET ${target} APPEND PROPERTY INTERFACE_LINK_LIBRARIES ${absl_libraries})
    endif()
  endforeach()
  # re2 is found through pkg-config, as `-lre2`: name the archive instead.
  if(TARGET re2::re2)
    get_target_property(re2_links re2::re2 INTERFACE_LINK_LIBRARIES)
    set(static_links "")
    foreach(link IN LISTS re2_links)
      if(link STREQUAL "-lre2" OR link STREQUAL "re2")
        find_library(WALFEED_RE2_ARCHIVE NAMES libre2.a REQUIRED)
        set(link "${WALFEED_RE2_ARCHIVE}")
      endif()
      list(APPEND static_links "${link}")
    endforeach()
    set_target_properties(re2::re2 PROPERTIES INTERFACE_LINK_LIBRARIES "${static_links}")
  endif()
endfunction()

# WALFEED_STATIC_DEPS=OFF after a configure with it on: FindProtobuf's cached
# archive would sit beside gRPC's shared objects, which load the shared
# Protobuf (two copies in one process). Point the target at the shared object.
function(walfeed_use_shared_protobuf)
  foreach(property IMPORTED_LOCATION IMPORTED_LOCATION_RELEASE IMPORTED_LOCATION_DEBUG)
    get_target_property(location protobuf::libprotobuf ${property})
    if(location MATCHES "\\.a$")
      string(REGEX REPLACE "\\.a$" ".so" shared "${location}")
      if(NOT EXISTS "${shared}")
        message(FATAL_ERROR "no shared Protobuf beside ${location}: delete the build "
                            "directory's CMakeCache.txt and configure again")
      endif()
      set_target_properties(protobuf::libprotobuf PROPERTIES ${property} "${shared}")
    endif()
  endforeach()
endfunction()
