# Thin wrapper over CMake so that the README's two commands work on a fresh Debian 12 machine.
BUILD ?= build
JOBS ?= $(shell nproc)
CTEST_ARGS ?=

.PHONY: all deps test-deps configure build apps test test-default demo study proof format format-check bench fuzz thread-safety clean torch2-deps build-torch2 test-torch2 gpu-check gpu-bundle image image-test

# What `make demo`, `make study` and `make proof` run: the three programs (and the SentencePiece
# plugin cart_data loads), not the tests and benchmarks.
APPS = cart cart-worker cartd

all: build

deps:
	@./deploy/install-deps.sh

# Packages only the tests use (a real Slurm for deploy_test), kept off a researcher's box, the
# Python client's pinned environment (deploy/install-python.sh: its tests build cartlab's wheel),
# and the real text and GPT-2 files the tokenizer tests read (deploy/fetch-corpora.sh).
test-deps:
	@./deploy/install-deps.sh --test
	@./deploy/install-python.sh
	@./deploy/fetch-corpora.sh var/corpora

$(BUILD)/build.ninja: | deps
	cmake --preset default -B $(BUILD)

configure: $(BUILD)/build.ninja

build: deps configure
	cmake --build $(BUILD) -j $(JOBS)

apps: deps configure
	cmake --build $(BUILD) -j $(JOBS) --target $(APPS)

# Both builds' tests: Debian's LibTorch 1.13 (CPU), then LibTorch 2.x from PyPI's PyTorch wheel
# with its CUDA paths compiled and linked (docs/gpu.md).
test: test-default test-torch2

# The default build's tests need the torch2 environment too: transformers and lm-eval load what
# `cart export --format hf` writes (tests/hf), on that PyTorch.
test-default: test-deps torch2-deps build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# The second build: PyTorch 2.x and NVIDIA's CUDA wheels from PyPI, pinned by
# deploy/torch2-requirements.txt, in .cache/torch2 (deploy/install-torch2.sh); every target but
# the benchmarks, and every test.
TORCH2_BUILD ?= build-torch2
torch2-deps: test-deps
	@./deploy/install-torch2.sh

$(TORCH2_BUILD)/build.ninja: | torch2-deps
	cmake --preset torch2 -B $(TORCH2_BUILD) -DCMAKE_PREFIX_PATH=$$(cat .cache/torch2/prefix)

build-torch2: torch2-deps $(TORCH2_BUILD)/build.ninja
	cmake --build $(TORCH2_BUILD) -j $(JOBS)

test-torch2: build-torch2
	cd $(TORCH2_BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# On a CUDA box with PyTorch: build against its LibTorch, run the GPU tests, measure tokens/s,
# MFU and peak memory at the paper's shapes (deploy/gpu-check.sh; docs/gpu.md). PYTHON names the
# interpreter whose torch to use; GPU_CHECK_ARGS passes more (--peak-tflops X, --device cuda:1).
PYTHON ?= python3
GPU_CHECK_ARGS ?=
gpu-check:
	./deploy/gpu-check.sh --python $(PYTHON) $(GPU_CHECK_ARGS)

# On Debian 12 with its mirrors: the C++ libraries besides LibTorch as one tarball for a GPU node
# without internet (gpu-bundle/cart-gpu-bundle.tar.xz, at most 50 MiB; deploy/gpu-bundle.sh).
gpu-bundle:
	./deploy/gpu-bundle.sh

# OCI images from a Debian root made here (deploy/image.sh; docs/operations.md): cartd's and a CPU
# worker's, built from the default build's programs (the CUDA worker's: deploy/image.sh
# build-torch2 worker-cuda). Not part of `make test` (a cold build costs minutes of apt-get, and
# the pods need ports 7070 and 8080): image-test runs the images (cartd's container serves, the
# worker's trains a sweep) and the Kubernetes manifests with podman kube play.
image: apps
	@./deploy/install-deps.sh --images
	./deploy/image.sh $(BUILD)

image-test: apps
	@./deploy/install-deps.sh --images
	@# The CUDA worker's image when the torch2 build is configured: its programs brought up to date.
	if [ -f $(TORCH2_BUILD)/build.ninja ]; then \
	  cmake --build $(TORCH2_BUILD) -j $(JOBS) --target cart-worker cart cart-torch cartd cart_sentencepiece && \
	  ./tests/images/image_test.sh $(BUILD) $(TORCH2_BUILD); \
	else ./tests/images/image_test.sh $(BUILD); fi
	./tests/images/k8s_test.sh $(BUILD)

demo: apps
	./deploy/demo.sh $(BUILD)

study: apps
	./deploy/study.sh $(BUILD)

proof: apps
	./deploy/proof.sh $(BUILD)

bench: build
	./deploy/bench.sh $(BUILD)

# libFuzzer on every parser a stranger can reach (tests/fuzz), FUZZ_SECONDS each, in its own clang
# build; prints executions and findings per target and fails when any target found something.
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
fuzz: deps
	@./deploy/install-deps.sh --fuzz
	./tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# Clang's thread-safety analysis (ABSL_GUARDED_BY) over every source with an absl::Mutex; GCC,
# which builds the project, ignores the annotations.
thread-safety: configure
	@./deploy/install-deps.sh --fuzz
	./tests/thread_safety/run.py $(BUILD)

format-check: configure
	cmake --build $(BUILD) --target format-check

format: configure
	cmake --build $(BUILD) --target format

clean:
	rm -rf $(BUILD) $(TORCH2_BUILD)
