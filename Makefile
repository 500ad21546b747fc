# Thin wrapper over CMake so that the README's two commands work on a fresh Debian 12 machine.
BUILD ?= build
JOBS ?= $(shell nproc)
CTEST_ARGS ?=

.PHONY: all deps configure build test demo study proof format format-check bench clean

all: build

deps:
	@./deploy/install-deps.sh

$(BUILD)/build.ninja: | deps
	cmake --preset default -B $(BUILD)

configure: $(BUILD)/build.ninja

build: deps configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

demo: build
	./deploy/demo.sh $(BUILD)

study: build
	./deploy/study.sh $(BUILD)

proof: build
	./deploy/proof.sh $(BUILD)

bench: build
	./deploy/bench.sh $(BUILD)

format-check: configure
	cmake --build $(BUILD) --target format-check

format: configure
	cmake --build $(BUILD) --target format

clean:
	rm -rf $(BUILD)
