# Writes OUT, a header with the git commit the source tree SRC is at and whether it has changes
# (tracked files only), when that text differs from what OUT holds: run at every build by the
# cart_git_info target, so a binary names the commit it was built from (worker/environment.h).
# A tree that is not a git checkout of its own (a release unpacked from an archive) says
# "unknown".
set(commit "unknown")
set(dirty "unknown")
execute_process(COMMAND git -C "${SRC}" rev-parse --show-toplevel
                OUTPUT_VARIABLE top OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
if(rc EQUAL 0)
  get_filename_component(top "${top}" REALPATH)
  get_filename_component(src "${SRC}" REALPATH)
  if(top STREQUAL src)
    execute_process(COMMAND git -C "${SRC}" rev-parse HEAD
                    OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    execute_process(COMMAND git -C "${SRC}" status --porcelain --untracked-files=no
                    OUTPUT_VARIABLE changes RESULT_VARIABLE rc2 ERROR_QUIET)
    if(rc2 EQUAL 0)
      if(changes STREQUAL "")
        set(dirty "false")
      else()
        set(dirty "true")
      endif()
    endif()
  endif()
endif()
set(text "#pragma once\n\n// Written by cmake/git_info.cmake at build time: the commit the sources were built from.\n\nnamespace cart {\n\ninline constexpr char kGitCommit[] = \"${commit}\";\n// \"true\" when tracked files differed from the commit, \"false\", or \"unknown\".\ninline constexpr char kGitDirty[] = \"${dirty}\";\n\n}  // namespace cart\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
