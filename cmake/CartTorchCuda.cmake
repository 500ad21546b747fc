# Before find_package(Torch): when the LibTorch on the prefix path is a CUDA build, find the CUDA
# toolkit its CMake config needs and hand it over in the variables that config reads.
#
# LibTorch's Caffe2 config (public/cuda.cmake) calls FindCUDA, which wants CUDA_TOOLKIT_ROOT_DIR
# (or nvcc on PATH), then enable_language(CUDA) and find_package(CUDAToolkit); without a toolkit
# it stops with "Your installed Caffe2 version uses CUDA but I cannot find the CUDA libraries",
# which does not say what to do. A user names the toolkit in one of several ways; every one of
# them is turned into one root here, checked, and passed on to all three:
#   -DCUDAToolkit_ROOT=DIR (or the environment variable), -DCMAKE_CUDA_COMPILER=DIR/bin/nvcc,
#   CUDACXX=DIR/bin/nvcc, CUDA_HOME or CUDA_PATH, nvcc on PATH, /usr/local/cuda.
#
# LibTorch comes in two layouts: the pytorch.org zip (prefix = libtorch/, libraries in
# libtorch/lib) and the PyTorch wheel (prefix = torch.utils.cmake_prefix_path =
# site-packages/torch/share/cmake, libraries in site-packages/torch/lib); a prefix of
# site-packages/torch works too. A CUDA build is recognised by libc10_cuda.so in its lib/.

# Sets `out` to the lib/ directory of the LibTorch on CMAKE_PREFIX_PATH (the variable or the
# environment) or Torch_DIR that holds `library` (libc10.so: any LibTorch; libc10_cuda.so: a
# CUDA build), or to "" when there is none (Debian's LibTorch is found in /usr by find_package).
function(cart_find_libtorch_lib out library)
  set(prefixes ${CMAKE_PREFIX_PATH} $ENV{CMAKE_PREFIX_PATH})
  set(candidates "")
  foreach(p IN LISTS prefixes)
    list(APPEND candidates "${p}/lib" "${p}/../../lib")
  endforeach()
  foreach(t IN ITEMS "${Torch_DIR}" "$ENV{Torch_DIR}")
    if(t)
      list(APPEND candidates "${t}/../../../lib")
    endif()
  endforeach()
  set(found "")
  foreach(c IN LISTS candidates)
    if(EXISTS "${c}/${library}")
      get_filename_component(found "${c}" ABSOLUTE)
      break()
    endif()
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

# Sets `out_root` to the CUDA toolkit root the user named (see the list above) and `out_source` to
# how it was named, for the error message. `out_root` is "" when nothing names one.
function(cart_named_cuda_root out_root out_source)
  set(root "")
  set(source "")
  if(CUDAToolkit_ROOT)
    set(root "${CUDAToolkit_ROOT}")
    set(source "-DCUDAToolkit_ROOT=${CUDAToolkit_ROOT}")
  elseif(DEFINED ENV{CUDAToolkit_ROOT})
    set(root "$ENV{CUDAToolkit_ROOT}")
    set(source "CUDAToolkit_ROOT=$ENV{CUDAToolkit_ROOT} (environment)")
  elseif(CMAKE_CUDA_COMPILER)
    get_filename_component(bin "${CMAKE_CUDA_COMPILER}" DIRECTORY)
    get_filename_component(root "${bin}" DIRECTORY)
    set(source "-DCMAKE_CUDA_COMPILER=${CMAKE_CUDA_COMPILER}")
  elseif(DEFINED ENV{CUDACXX})
    get_filename_component(bin "$ENV{CUDACXX}" DIRECTORY)
    get_filename_component(root "${bin}" DIRECTORY)
    set(source "CUDACXX=$ENV{CUDACXX}")
  elseif(DEFINED ENV{CUDA_HOME})
    set(root "$ENV{CUDA_HOME}")
    set(source "CUDA_HOME=$ENV{CUDA_HOME}")
  elseif(DEFINED ENV{CUDA_PATH})
    set(root "$ENV{CUDA_PATH}")
    set(source "CUDA_PATH=$ENV{CUDA_PATH}")
  else()
    find_program(nvcc_on_path nvcc NO_CACHE)
    if(nvcc_on_path)
      get_filename_component(bin "${nvcc_on_path}" DIRECTORY)
      get_filename_component(root "${bin}" DIRECTORY)
      set(source "nvcc on PATH (${nvcc_on_path})")
    elseif(EXISTS /usr/local/cuda/bin/nvcc)
      set(root /usr/local/cuda)
      set(source "/usr/local/cuda")
    endif()
  endif()
  set(${out_root} "${root}" PARENT_SCOPE)
  set(${out_source} "${source}" PARENT_SCOPE)
endfunction()

# The whole step: does nothing for a CPU LibTorch; for a CUDA one, sets CART_TORCH_ROOT,
# CART_CUDA_ROOT and the variables LibTorch's config reads, or stops with a message that names
# the variable to fix.
macro(cart_prepare_cuda_libtorch)
  # LibTorch's config finds its own libraries with find_library(... PATHS <prefix>/lib), and
  # PATHS come after the system directories: on a machine with Debian's libtorch-dev it would
  # link /usr/lib/x86_64-linux-gnu/libc10.so (1.13) into a 2.x build. CMAKE_LIBRARY_PATH is
  # searched before the system directories.
  cart_find_libtorch_lib(CART_TORCH_LIBDIR libc10.so)
  if(CART_TORCH_LIBDIR)
    list(PREPEND CMAKE_LIBRARY_PATH "${CART_TORCH_LIBDIR}")
    # Results cached by an earlier configure against another LibTorch are looked up again.
    foreach(cached IN ITEMS c10_LIBRARY TORCH_LIBRARY C10_CUDA_LIBRARY torch_cpu_LIBRARY
                            torch_cuda_LIBRARY c10_cuda_LIBRARY)
      if(DEFINED CACHE{${cached}} AND NOT "$CACHE{${cached}}" MATCHES "^${CART_TORCH_LIBDIR}/")
        unset(${cached} CACHE)
      endif()
    endforeach()
  endif()
  cart_find_libtorch_lib(CART_TORCH_CUDA_LIBDIR libc10_cuda.so)
  if(CART_TORCH_CUDA_LIBDIR)
    get_filename_component(CART_TORCH_ROOT "${CART_TORCH_CUDA_LIBDIR}" DIRECTORY)
    cart_named_cuda_root(CART_CUDA_ROOT CART_CUDA_SOURCE)
    if(NOT CART_CUDA_ROOT)
      message(FATAL_ERROR
        "${CART_TORCH_ROOT} is a CUDA LibTorch and no CUDA toolkit was found (no nvcc on PATH, "
        "none in /usr/local/cuda). Install the toolkit of the CUDA version it was built for, or "
        "name one: -DCUDAToolkit_ROOT=DIR, -DCMAKE_CUDA_COMPILER=DIR/bin/nvcc or "
        "CUDACXX=DIR/bin/nvcc. For the PyTorch wheel, deploy/install-torch2.sh builds a toolkit "
        "from NVIDIA's PyPI wheels (docs/gpu.md).")
    endif()
    if(NOT EXISTS "${CART_CUDA_ROOT}/bin/nvcc")
      message(FATAL_ERROR
        "${CART_CUDA_SOURCE}: there is no nvcc at ${CART_CUDA_ROOT}/bin/nvcc. The CUDA LibTorch in "
        "${CART_TORCH_ROOT} needs a CUDA toolkit (bin/nvcc, include/, lib/) at configure time.")
    endif()
    get_filename_component(CART_CUDA_ROOT "${CART_CUDA_ROOT}" ABSOLUTE)
    set(CUDAToolkit_ROOT "${CART_CUDA_ROOT}")
    set(CUDA_TOOLKIT_ROOT_DIR "${CART_CUDA_ROOT}" CACHE PATH "CUDA toolkit for LibTorch's FindCUDA")
    if(NOT CMAKE_CUDA_COMPILER)
      set(CMAKE_CUDA_COMPILER "${CART_CUDA_ROOT}/bin/nvcc" CACHE FILEPATH "nvcc")
    endif()
    message(STATUS "CUDA LibTorch in ${CART_TORCH_ROOT}; CUDA toolkit ${CART_CUDA_ROOT} "
                   "(from ${CART_CUDA_SOURCE})")
  endif()
endmacro()

# Replaces every item of list `var` equal to `from` (a path: compared as a string, not a regex).
function(cart_replace_item var from to)
  set(out "")
  foreach(item IN LISTS ${var})
    if(item STREQUAL from)
      list(APPEND out "${to}")
    else()
      list(APPEND out "${item}")
    endif()
  endforeach()
  set(${var} "${out}" PARENT_SCOPE)
endfunction()

# After find_package(Torch). The pytorch.org zip and the PyTorch wheel carry headers of libraries
# LibTorch was built with: protobuf (<torch>/include/google) and fmt (<torch>/include/fmt, a newer
# major version than Debian's). LibTorch's public headers need neither, but the include directory
# comes before /usr/include, so they would shadow the system protobuf that gRPC's generated code
# is compiled against and the system fmt the project links (undefined fmt::v12 symbols at link
# time). Instead of asking the user to edit their PyTorch install, the build gets a view of
# <torch>/include without them (symlinks, in the build tree) and the Torch targets point at it.
function(cart_hide_bundled_headers)
  set(torch_include "")
  foreach(dir IN LISTS TORCH_INCLUDE_DIRS)
    if((EXISTS "${dir}/google" OR EXISTS "${dir}/fmt") AND EXISTS "${dir}/ATen")
      set(torch_include "${dir}")
    endif()
  endforeach()
  if(NOT torch_include)
    return()
  endif()
  set(view "${CMAKE_BINARY_DIR}/torch-include")
  file(REMOVE_RECURSE "${view}")
  file(MAKE_DIRECTORY "${view}")
  file(GLOB entries RELATIVE "${torch_include}" "${torch_include}/*")
  foreach(entry IN LISTS entries)
    if(NOT entry STREQUAL "google" AND NOT entry STREQUAL "fmt")
      file(CREATE_LINK "${torch_include}/${entry}" "${view}/${entry}" SYMBOLIC)
    endif()
  endforeach()
  foreach(target IN ITEMS torch torch_cpu torch_cuda c10 c10_cuda torch_library)
    if(TARGET ${target})
      get_target_property(dirs ${target} INTERFACE_INCLUDE_DIRECTORIES)
      if(dirs)
        cart_replace_item(dirs "${torch_include}" "${view}")
        set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${dirs}")
      endif()
    endif()
  endforeach()
  set(all ${TORCH_INCLUDE_DIRS})
  cart_replace_item(all "${torch_include}" "${view}")
  set(TORCH_INCLUDE_DIRS "${all}" PARENT_SCOPE)
  message(STATUS "LibTorch's bundled protobuf and fmt headers hidden: Torch includes ${view}")
endfunction()
