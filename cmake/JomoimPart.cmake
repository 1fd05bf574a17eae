# jomoim_part: one library target per part of jomoim, with the part's public headers visible
# only to the targets that link it.
#
#   jomoim_part(<name> [SOURCE_DIR <dir>] [SOURCES ...] [PUBLIC ...] [PRIVATE ...] [NO_INSTALL])
#
# makes the target jomoim_<name> (alias jomoim::<name>, exported as jomoim::<name>). Its public
# headers are include/jomoim/<name>/. They are not put on the include path from include/
# (that would show every part's headers to every target): each part gets its own folder in the
# build tree, parts/<name>/jomoim/<name>, a link to include/jomoim/<name>, and that folder is the
# part's PUBLIC include directory. A target therefore sees the headers of exactly the parts it
# links, directly or through a PUBLIC link, and an include that crosses a forbidden arrow fails
# to compile (tests/layout/check_layout.py proves it on every part). The part's private headers
# are in SOURCE_DIR, its PRIVATE include directory, and are included by their bare names.
include_guard(GLOBAL)
include(GNUInstallDirs)

function(jomoim_part name)
  cmake_parse_arguments(P "NO_INSTALL" "SOURCE_DIR" "SOURCES;PUBLIC;PRIVATE" ${ARGN})
  set(target jomoim_${name})
  set(stage ${PROJECT_BINARY_DIR}/parts/${name})
  set(headers ${PROJECT_SOURCE_DIR}/include/jomoim/${name})
  if(EXISTS ${headers})
    file(MAKE_DIRECTORY ${stage}/jomoim)
    if(IS_SYMLINK ${stage}/jomoim/${name} OR EXISTS ${stage}/jomoim/${name})
      file(REMOVE ${stage}/jomoim/${name})
    endif()
    file(CREATE_LINK ${headers} ${stage}/jomoim/${name} SYMBOLIC)
  endif()
  if(P_SOURCES)
    add_library(${target} STATIC ${P_SOURCES})
    set(scope PUBLIC)
    if(P_SOURCE_DIR)
      target_include_directories(${target} PRIVATE ${P_SOURCE_DIR})
    endif()
    target_link_libraries(${target} PUBLIC ${P_PUBLIC} PRIVATE ${P_PRIVATE})
  else()
    add_library(${target} INTERFACE)
    set(scope INTERFACE)
    target_link_libraries(${target} INTERFACE ${P_PUBLIC})
  endif()
  add_library(jomoim::${name} ALIAS ${target})
  if(EXISTS ${headers})
    target_include_directories(${target} ${scope} $<BUILD_INTERFACE:${stage}>
                               $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  endif()
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  if(NOT P_NO_INSTALL)
    install(TARGETS ${target} EXPORT jomoimTargets
            ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
    if(EXISTS ${headers})
      install(DIRECTORY ${headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/jomoim)
    endif()
    set_property(GLOBAL APPEND PROPERTY JOMOIM_INSTALLED_PARTS ${name})
  endif()
endfunction()
