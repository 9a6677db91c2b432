# Debian packages with CPack, one per install COMPONENT (the install() rules name them):
#
#   component  package               contents
#   preload    libmemoplan-preload   lib/<multiarch>/libmemoplan_preload.so (the LD_PRELOAD shim)
#   torch      libmemoplan-torch0    libmemoplan_torch.so.0 (SONAME major 0; LibTorch builds only)
#   tuned      libmemoplan-tuned0    libmemoplan_tuned.so.0, the tuned kernels (oneDNN), loaded by
#                                    plan(..., kernels = "tuned") (LibTorch builds only)
#   dev        libmemoplan-dev       every public header, the static planner/core/runtime, the
#                                    libmemoplan_torch.so and libmemoplan_tuned.so links,
#                                    memoplanConfig.cmake, memoplan.pc
#   tools      memoplan-tools        bin/memoplan and bin/memoplan-run (`memoplan run` runs the
#                                    memoplan-run beside it: one package, one directory)
#   serve      memoplan-serve        bin/memoplan-serve (LibTorch builds only)
#
# Build them from a tree configured with -DCMAKE_INSTALL_PREFIX=/usr (lib/<multiarch>, and the
# programs' RUNPATH $ORIGIN/../lib/<multiarch>), on the Debian release they are for (dpkg-shlibdeps
# reads that release's package names and versions):
#   cmake --preset debian13 -DCMAKE_INSTALL_PREFIX=/usr && cmake --build --preset debian13
#   cpack --config build-debian13/CPackConfig.cmake -B build-debian13/packages
# scripts/package.sh does exactly this in the Debian 13 root; scripts/debian13.sh package-test
# installs the result on a clean root. Included last from the top-level CMakeLists.txt: after
# every install() rule.

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME memoplan)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "memoplan maintainers <memoplan@invalid>")  # the Maintainer field
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Static memory plans for PyTorch inference")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # <package>_<version>-<release>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# The shared libraries' and programs' Depends come from dpkg-shlibdeps: the right package names and
# minimum versions for the release built on (they differ between Debian 12 and 13: libtorch1.13 /
# libtorch2.6, libfmt9 / libfmt10, the t64 renames), with no table to keep up to date.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# memoplan-run and memoplan-serve need libmemoplan_torch.so.0, which lies in another package:
# dpkg-shlibdeps finds it in the build tree; the package dependency comes from the component's.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS "${PROJECT_BINARY_DIR}/torch_ext")
# DEBIAN/shlibs and the ldconfig trigger for the shared libraries (a notice for the unversioned
# libmemoplan_preload.so, which is preloaded, never linked against).
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)

# Only these: a file installed without a component would otherwise make an "Unspecified" package.
set(CPACK_COMPONENTS_ALL preload dev tools)

set(CPACK_COMPONENT_PRELOAD_DESCRIPTION "memoplan LD_PRELOAD shim
 libmemoplan_preload.so records an inference pass's allocations and serves the following passes
 from one planned slab, under LD_PRELOAD, with no change to the program.")
set(CPACK_DEBIAN_PRELOAD_PACKAGE_NAME libmemoplan-preload)
set(CPACK_DEBIAN_PRELOAD_PACKAGE_SECTION libs)

# The archives carry fmt's ABI (fmt::v<major> symbols) and link zlib and CBC: dpkg-shlibdeps sees
# nothing in static archives, so these are written here. MEMOPLAN_FMT_NEXT_MAJOR comes from
# cmake/memoplanInstall.cmake.
set(CPACK_COMPONENT_DEV_DESCRIPTION "memoplan development files
 Headers, static libraries (planner, core, runtime), the CMake package (find_package(memoplan))
 and memoplan.pc for pkg-config.")
set(CPACK_COMPONENT_DEV_DEPENDS preload)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libmemoplan-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(_memoplan_dev_depends
    "libfmt-dev (>= ${fmt_VERSION_MAJOR}), libfmt-dev (<< ${MEMOPLAN_FMT_NEXT_MAJOR}), zlib1g-dev")
if(MEMOPLAN_WITH_CBC)
  string(APPEND _memoplan_dev_depends ", coinor-libcbc-dev")
endif()
string(APPEND _memoplan_dev_depends ", pkgconf | pkg-config")
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${_memoplan_dev_depends}")
# A stripped install (CPACK_STRIP_FILES, cmake --install --strip) strips programs and shared
# libraries only; the archives' debug sections (50 MB of the 51 in RelWithDebInfo) go here. Their
# symbols stay: consumers link against them.
install(CODE "
  if(CMAKE_INSTALL_DO_STRIP)
    foreach(archive planner core runtime)
      execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-debug
        \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/libmemoplan_\${archive}.a\"
        COMMAND_ERROR_IS_FATAL ANY)
    endforeach()
  endif()" COMPONENT dev)

set(CPACK_COMPONENT_TOOLS_DESCRIPTION "memoplan command-line tools
 memoplan plans, validates, compares and draws allocation traces; `memoplan run` runs a
 TorchScript model unplanned and planned and compares them.")
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME memoplan-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SUGGESTS libmemoplan-preload)

set(_memoplan_torch_package libmemoplan-torch${PROJECT_VERSION_MAJOR})
if(TARGET memoplan_torch)
  list(APPEND CPACK_COMPONENTS_ALL torch)
  set(CPACK_COMPONENT_TORCH_DESCRIPTION "memoplan LibTorch extension
 libmemoplan_torch.so plans a TorchScript module's tensors into one slab per inference thread.")
  set(CPACK_DEBIAN_TORCH_PACKAGE_NAME ${_memoplan_torch_package})
  set(CPACK_DEBIAN_TORCH_PACKAGE_SECTION libs)
  set(CPACK_DEBIAN_DEV_PACKAGE_SUGGESTS "${_memoplan_torch_package}, libtorch-dev")
  # The tuned kernels: their own package. `memoplan run --kernels tuned` loads it, so memoplan-tools
  # depends on it (dlopen is invisible to dpkg-shlibdeps); memoplan-serve has no tuned option yet.
  list(APPEND CPACK_COMPONENTS_ALL tuned)
  set(CPACK_COMPONENT_TUNED_DESCRIPTION "memoplan tuned kernels for the LibTorch extension
 libmemoplan_tuned.so replaces hot operators of planned TorchScript graphs with memoplan's GEMM
 and oneDNN primitives where they measure faster; libmemoplan_torch.so loads it on demand.")
  set(CPACK_DEBIAN_TUNED_PACKAGE_NAME libmemoplan-tuned${PROJECT_VERSION_MAJOR})
  set(CPACK_DEBIAN_TUNED_PACKAGE_SECTION libs)
  set(CPACK_COMPONENT_TUNED_DEPENDS torch)
  set(CPACK_COMPONENT_TOOLS_DEPENDS torch tuned)
endif()
if(TARGET memoplan-serve)
  list(APPEND CPACK_COMPONENTS_ALL serve)
  set(CPACK_COMPONENT_SERVE_DESCRIPTION "memoplan inference server (KServe v2)
 memoplan-serve serves a TorchScript model over KServe's v2 HTTP protocol, each worker's tensors
 planned by memoplan.")
  set(CPACK_DEBIAN_SERVE_PACKAGE_NAME memoplan-serve)
  set(CPACK_DEBIAN_SERVE_PACKAGE_SECTION net)
  set(CPACK_COMPONENT_SERVE_DEPENDS torch)
endif()

# The layout in the packages is the configured one (lib/<multiarch> only under /usr): refuse to
# package a tree configured for another prefix rather than ship lib/ and a RUNPATH that misses it.
set(CPACK_MEMOPLAN_CONFIGURED_PREFIX "${CMAKE_INSTALL_PREFIX}")
file(WRITE ${PROJECT_BINARY_DIR}/memoplanCPackChecks.cmake [=[
if(CPACK_GENERATOR STREQUAL "DEB" AND NOT CPACK_MEMOPLAN_CONFIGURED_PREFIX STREQUAL "/usr")
  message(FATAL_ERROR "memoplan: the Debian packages need a tree configured with "
          "-DCMAKE_INSTALL_PREFIX=/usr (this one: ${CPACK_MEMOPLAN_CONFIGURED_PREFIX})")
endif()
]=])
set(CPACK_PROJECT_CONFIG_FILE ${PROJECT_BINARY_DIR}/memoplanCPackChecks.cmake)

include(CPack)
