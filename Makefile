# hearth: the Makefile wraps CMake + Ninja.
#   make        install missing dependencies, build build/hearth
#   make run    build, then run the default model
#   make test   build, run every test (unit + end-to-end)
#   make asan   build with ASan+UBSan (clang) and run every test under it
#   make bench  build, run the benchmarks in bench/ (incl. hearth vs llama.cpp)
#   make install PREFIX=DIR  bin/hearth, lib/libhearth.{so,a}, include/hearth.h,
#               lib/pkgconfig/hearth.pc, share/hearth/models/hearth-demo
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
CMAKE_FLAGS ?=
PREFIX ?= /usr/local

.PHONY: all deps build run test asan fuzz bench install clean

all: build

deps:
	@tools/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@ninja -C $(BUILD) --quiet

run: build
	@bash tools/run-default.sh $(BUILD)/hearth

test: build
	@ctest --test-dir $(BUILD) --output-on-failure -j2

asan: deps
	@CC=clang cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DHEARTH_SANITIZE=ON -DHEARTH_CUDA=OFF >/dev/null
	@ninja -C $(ASAN_BUILD) --quiet
	@ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir $(ASAN_BUILD) --output-on-failure -j2

fuzz: deps
	@CC=clang cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DHEARTH_FUZZ=ON -DHEARTH_CUDA=OFF >/dev/null
	@ninja -C $(FUZZ_BUILD) --quiet fuzzers
	@bash tools/fuzz-smoke.sh $(FUZZ_BUILD)

bench: build
	@bash bench/run.sh $(BUILD)/hearth
	@bash bench/llamacpp.sh $(BUILD)/hearth

install: build
	@cmake --install $(BUILD) --prefix $(PREFIX) >/dev/null
	@echo "installed under $(PREFIX)"

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
