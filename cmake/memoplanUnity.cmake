# A file that includes LibTorch's headers spends most of its 5-30 s compiling them, a test file a
# few seconds on GoogleTest's: the targets made of such files (torch_ext/, apps/, the gtest
# programs) compile their files in batches of 8, one translation unit per batch (CMake's unity
# build), in a third to a fifth of the CPU time (cold CI: docs/INSTALL.md). The files of one batch
# share a translation unit, so the file-local names (anonymous namespaces) of one target's files
# must differ; a file with options of its own is left out of the batch (CMake does so).
# OFF: one translation unit per file.
option(MEMOPLAN_UNITY_BUILD "Compile the LibTorch-side targets and the tests in batches" ON)
function(memoplan_unity_build)
  if(MEMOPLAN_UNITY_BUILD)
    set_target_properties(${ARGN} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
endfunction()
