#!/usr/bin/env bash
# Installs LibTorch 2.x for the second build (`make test-torch2`, CMake preset torch2): the pinned
# PyPI wheels of deploy/torch2-requirements.txt (PyTorch, a CUDA 13.2 build, and NVIDIA's CUDA
# wheels with nvcc and the CUDA headers) into a virtual environment, and beside it a CUDA toolkit
# directory in the usual layout made of symlinks into the wheels (deploy/cuda-toolkit-view.sh).
# Then, into the same environment, deploy/hf-requirements.txt: transformers and lm-eval, which
# the Hugging Face export's tests and the worker's harness jobs run on that PyTorch
# (docs/huggingface.md). Prints nothing else on success but where things are. Idempotent: a second
# run costs two file comparisons; a changed hf-requirements.txt alone reinstalls only its part.
#
#   deploy/install-torch2.sh [DIR]     DIR defaults to .cache/torch2 in the checkout
#
# Afterwards: DIR/venv/bin/python (torch 2.x, for the eager reference), DIR/cuda (the toolkit),
# DIR/prefix (one line: torch.utils.cmake_prefix_path, for -DCMAKE_PREFIX_PATH).
# Needs Debian's python3-venv (deploy/install-deps.sh --test installs it) and PyPI.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/.cache/torch2}
requirements=$root/deploy/torch2-requirements.txt
hf_requirements=$root/deploy/hf-requirements.txt
venv=$dir/venv
stamp=$venv/.cart-requirements
hf_stamp=$venv/.cart-hf-requirements

# transformers, lm-eval and what they need, on top of an installed PyTorch.
install_hf() {
  echo "install-torch2: pip install -r deploy/hf-requirements.txt into $venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --require-hashes \
    -r "$hf_requirements"
  "$venv/bin/python" -c 'import transformers, lm_eval, sentencepiece' \
    || { echo "install-torch2: transformers / lm-eval did not install" >&2; exit 1; }
  cp "$hf_requirements" "$hf_stamp"
  echo "install-torch2: transformers $("$venv/bin/python" -c \
    'import transformers; print(transformers.__version__)' 2>/dev/null), lm-eval \
$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("lm_eval"))' 2>/dev/null)"
}

if [ -f "$stamp" ] && cmp -s "$stamp" "$requirements" && [ -x "$dir/cuda/bin/nvcc" ]; then
  if [ -f "$hf_stamp" ] && cmp -s "$hf_stamp" "$hf_requirements"; then
    echo "install-torch2: $dir up to date"
  else
    install_hf
  fi
  exit 0
fi

# Debian's own interpreter: the python3 first on PATH may be another one (pyenv, conda).
python=/usr/bin/python3
if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
  echo "install-torch2: $python cannot make a virtual environment: install python3-venv" >&2
  echo "install-torch2: (deploy/install-deps.sh --test does)" >&2
  exit 1
fi

rm -rf "$venv" "$dir/cuda"
mkdir -p "$dir"
"$python" -m venv "$venv"
echo "install-torch2: pip install -r deploy/torch2-requirements.txt into $venv (about 3 GB)"
# --no-deps: the file lists every package (hash-checked); nothing is resolved from the index.
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --require-hashes \
  -r "$requirements"

site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
wheel_cuda=$site/nvidia/cu13

# The toolkit view: bin/, include/ and lib/ as CMake and nvcc expect them.
cuda=$dir/cuda
"$root/deploy/cuda-toolkit-view.sh" "$wheel_cuda" "$cuda"

"$venv/bin/python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' > "$dir/prefix"
cp "$requirements" "$stamp"
install_hf
echo "install-torch2: torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)' \
  2>/dev/null), nvcc $("$cuda/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
echo "install-torch2: CMAKE_PREFIX_PATH=$(cat "$dir/prefix") CUDAToolkit_ROOT=$cuda"
