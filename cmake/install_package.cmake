# Installing flashcl so that it can be consumed from wherever it lands (cmake --install --prefix P):
#   lib/libflashcl.so* or .a, include/flashcl.h + flashcl_version.h,
#   lib/cmake/flashcl/ (find_package(flashcl CONFIG): target flashcl::flashcl, version file),
#   lib/pkgconfig/flashcl.pc (prefix derived from ${pcfiledir}, so it too follows the files).
# Included from the top-level CMakeLists.txt after src/ defined the flashcl target.
include(CMakePackageConfigHelpers)

set(FLASHCL_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/flashcl)
set(FLASHCL_PKGCONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(TARGETS flashcl EXPORT flashclTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/flashcl.h ${PROJECT_BINARY_DIR}/include/flashcl_version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# The exported target file uses paths relative to its own location, which keeps the package relocatable.
install(EXPORT flashclTargets NAMESPACE flashcl:: FILE flashclTargets.cmake DESTINATION ${FLASHCL_CMAKE_DIR})

# What the config file has to find again: OpenCL always (a public dependency); CLBlast only for a static
# library built with it (a shared libflashcl carries CLBlast as its own DT_NEEDED).
if(FLASHCL_WITH_CLBLAST AND NOT FLASHCL_SHARED)
  set(FLASHCL_CONFIG_NEEDS_CLBLAST ON)
else()
  set(FLASHCL_CONFIG_NEEDS_CLBLAST OFF)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/flashclConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/flashclConfig.cmake
                              INSTALL_DESTINATION ${FLASHCL_CMAKE_DIR})
# 0.x: a minor release may change the API, so only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/flashclConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/flashclConfig.cmake ${PROJECT_BINARY_DIR}/flashclConfigVersion.cmake
        DESTINATION ${FLASHCL_CMAKE_DIR})

# pkg-config: the prefix is the .pc file's own directory walked back to the install root, so the file
# stays right after `cmake --install --prefix` anywhere (pkg-config sets ${pcfiledir}). A static
# library lists its own dependencies for `pkg-config --static`.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  message(FATAL_ERROR "flashcl.pc needs CMAKE_INSTALL_LIBDIR and CMAKE_INSTALL_INCLUDEDIR relative to the prefix")
endif()
file(RELATIVE_PATH FLASHCL_PC_TO_PREFIX /root/${FLASHCL_PKGCONFIG_DIR} /root)
string(REGEX REPLACE "/$" "" FLASHCL_PC_TO_PREFIX "${FLASHCL_PC_TO_PREFIX}")
set(FLASHCL_PC_REQUIRES_PRIVATE "")
set(FLASHCL_PC_LIBS_PRIVATE "-lm")
set(FLASHCL_PC_CFLAGS "")
if(NOT FLASHCL_SHARED)
  set(FLASHCL_PC_CFLAGS " -DFLASHCL_STATIC_DEFINE")
  if(FLASHCL_WITH_CLBLAST)
    set(FLASHCL_PC_REQUIRES_PRIVATE "clblast")
  endif()
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/flashcl.pc.in ${PROJECT_BINARY_DIR}/flashcl.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/flashcl.pc DESTINATION ${FLASHCL_PKGCONFIG_DIR})
