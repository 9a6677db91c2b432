# The installed package: memoplanConfig.cmake (find_package(memoplan) gives memoplan::planner,
# core, runtime, pass, preload and, with LibTorch, memoplan::torch), its version file, and
# memoplan.pc for pkg-config. Both are relocatable: they find the prefix from where they lie.
# Included from the top-level CMakeLists.txt after every target exists.
include(CMakePackageConfigHelpers)

# The archives carry fmt's ABI (fmt::v9 symbols): consumers need the same major version.
find_package(fmt REQUIRED)
math(EXPR MEMOPLAN_FMT_NEXT_MAJOR "${fmt_VERSION_MAJOR} + 1")
set(MEMOPLAN_TORCH_SONAME "libmemoplan_torch.so.${PROJECT_VERSION_MAJOR}")
set(MEMOPLAN_TUNED_SONAME "libmemoplan_tuned.so.${PROJECT_VERSION_MAJOR}")

install(EXPORT memoplanTargets NAMESPACE memoplan:: FILE memoplanTargets.cmake
        DESTINATION ${MEMOPLAN_INSTALL_CMAKEDIR} COMPONENT dev)
if(TARGET memoplan_torch)
  install(EXPORT memoplanTorchTargets NAMESPACE memoplan:: FILE memoplanTorchTargets.cmake
          DESTINATION ${MEMOPLAN_INSTALL_CMAKEDIR} COMPONENT dev)
  install(EXPORT memoplanTunedTargets NAMESPACE memoplan:: FILE memoplanTunedTargets.cmake
          DESTINATION ${MEMOPLAN_INSTALL_CMAKEDIR} COMPONENT dev)
endif()

configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/memoplanConfig.cmake.in ${PROJECT_BINARY_DIR}/memoplanConfig.cmake
  INSTALL_DESTINATION ${MEMOPLAN_INSTALL_CMAKEDIR} PATH_VARS CMAKE_INSTALL_LIBDIR)
# 0.x: a minor release may break the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/memoplanConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/memoplanConfig.cmake
              ${PROJECT_BINARY_DIR}/memoplanConfigVersion.cmake
        DESTINATION ${MEMOPLAN_INSTALL_CMAKEDIR} COMPONENT dev)

# pkg-config: the static planner/core/runtime (no LibTorch: it ships no .pc). Their link-only
# dependencies go to Requires (not Requires.private, which `pkg-config --libs` drops).
file(RELATIVE_PATH MEMOPLAN_PC_TO_PREFIX "${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig"
     "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/$" "" MEMOPLAN_PC_TO_PREFIX "${MEMOPLAN_PC_TO_PREFIX}")
set(MEMOPLAN_PC_REQUIRES "fmt >= ${fmt_VERSION_MAJOR}, fmt < ${MEMOPLAN_FMT_NEXT_MAJOR}, zlib")
if(MEMOPLAN_WITH_CBC)
  string(APPEND MEMOPLAN_PC_REQUIRES ", cbc")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/memoplan.pc.in ${PROJECT_BINARY_DIR}/memoplan.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/memoplan.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT dev)
