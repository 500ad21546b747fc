# Thin wrapper over CMake so that the README's two commands work on a fresh Debian 12 machine.
BUILD ?= build
JOBS ?= $(shell nproc)
CTEST_ARGS ?=

.PHONY: all deps test-deps configure build apps test demo study proof format format-check bench fuzz thread-safety clean

# What `make demo`, `make study` and `make proof` run: the three programs (and the SentencePiece
# plugin cart_data loads), not the tests and benchmarks.
APPS = cart cart-worker cartd

all: build

deps:
	@./deploy/install-deps.sh

# Packages only the tests use (a real Slurm for deploy_test), kept off a researcher's box.
test-deps:
	@./deploy/install-deps.sh --test

$(BUILD)/build.ninja: | deps
	cmake --preset default -B $(BUILD)

configure: $(BUILD)/build.ninja

build: deps configure
	cmake --build $(BUILD) -j $(JOBS)

apps: deps configure
	cmake --build $(BUILD) -j $(JOBS) --target $(APPS)

test: test-deps build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

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
	rm -rf $(BUILD)
