# Kiln's entry points on a fresh Debian 12 machine:
#   make demo      install deps, build, compile + run the built-in sample
#   make test      install deps, build (Release, ASan+UBSan, TSan, and a
#                  runtime-only build without the compiler), run every
#                  test, replay the fuzz regression inputs and fuzz each
#                  target for FUZZ_SECONDS
#   make fuzz      fuzz each target for FUZZ_LONG_SECONDS (tests/fuzz/README.md)
#   make coverage  gcc --coverage build, unit + CLI + hostile tests, gcovr
#                  branch coverage report (scripts/coverage.sh; not in CI)
BUILD      ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
RT_BUILD   ?= build-rt
COV_BUILD  ?= build-cov
JOBS       ?= $(shell nproc)
CLANGXX    ?= clang++-14
CLANGCC    ?= clang-14
FUZZ_SECONDS      ?= 45
FUZZ_LONG_SECONDS ?= 600
FUZZ_JOBS         ?= 2
# The tests that exercise threads: streams, sessions, async execution and
# model lifetime, concurrent compiles, threaded weight stores and loaders,
# custom ops' stream callbacks. LoadDoesNotTouchTheArena measures resident
# memory, which TSan's shadow memory inflates.
TSAN_FILTER ?= *Device*:*Stream*:*Session*:*Async*:*Concurrent*:*Thread*:CustomOp.*:ExternalWeightsTest.*:Executor.*:-AsyncModelLifetime.LoadDoesNotTouchTheArena

.PHONY: demo test build build-asan build-tsan build-rt test-tsan fuzz coverage bench clean

build:
	scripts/install_deps.sh build
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	scripts/demo.sh $(BUILD)

# Sanitizer build (Clang): ASan + UBSan with -fno-sanitize-recover=all, and
# libFuzzer coverage instrumentation, so one build serves the unit tests and
# the fuzz targets. -O1 with line tables keeps compile time reasonable on 2
# cores; only the targets the unit-labelled tests and the fuzzers need.
build-asan:
	scripts/install_deps.sh test
	@# A build-asan configured with g++ (before the switch to Clang) cannot change compiler in place.
	@if [ -f $(ASAN_BUILD)/CMakeCache.txt ] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang' $(ASAN_BUILD)/CMakeCache.txt; then \
	  echo "build-asan: configured with another compiler, starting afresh"; rm -rf $(ASAN_BUILD); fi
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -gline-tables-only" \
	  -DCMAKE_CXX_COMPILER=$(CLANGXX) -DCMAKE_C_COMPILER=$(CLANGCC) -DKILN_SANITIZE=ON -DKILN_FUZZ=ON -DKILN_CONFORMANCE=OFF -DKILN_MODEL_TESTS=OFF
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target kiln_unit_tests kiln args_refresh_add kiln_fuzzers kiln_op_harness kiln_capi_test kiln_make_file_id_model

# Runtime only (-DKILN_BUILD_COMPILER=OFF: no protobuf or ONNX): the kiln
# binary runs, inspects and benchmarks .kiln files; tests/runtime_only.
build-rt:
	scripts/install_deps.sh build
	cmake -S . -B $(RT_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_COMPILER=OFF
	cmake --build $(RT_BUILD) -j $(JOBS) --target kiln kiln_runtime_only_test

# ThreadSanitizer build (Clang): only the unit-test binary.
build-tsan:
	scripts/install_deps.sh test
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -gline-tables-only" \
	  -DCMAKE_CXX_COMPILER=$(CLANGXX) -DCMAKE_C_COMPILER=$(CLANGCC) -DKILN_TSAN=ON -DKILN_CONFORMANCE=OFF -DKILN_MODEL_TESTS=OFF
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target kiln_unit_tests

# One OpenMP thread: Debian's libgomp is not TSan-instrumented, its barriers
# would be reported as races. tests/tsan.supp lists known races owned
# elsewhere.
test-tsan: build-tsan
	OMP_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" \
	  $(TSAN_BUILD)/tests/kiln_unit_tests '--gtest_filter=$(TSAN_FILTER)'

test:
	scripts/install_deps.sh test
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)
	$(MAKE) build-asan
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)
	@# intercept_tls_get_addr=0: Clang 14's __tls_get_addr interceptor takes a dynamic TLS
	@# block that malloc happened to place 16 bytes past a page boundary for a glibc 2.19
	@# header and hands LeakSanitizer a garbage range; its tracer then dies with SIGSEGV at
	@# exit ("Tracer caught signal 11", fixed in LLVM 17). Leak checking stays on.
	ASAN_OPTIONS=detect_leaks=1:intercept_tls_get_addr=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS) -L unit
	$(MAKE) test-tsan
	$(MAKE) build-rt
	ctest --test-dir $(RT_BUILD) --output-on-failure -j $(JOBS)
	tests/fuzz/run_fuzz.sh --build $(ASAN_BUILD) --kiln $(BUILD)/kiln --seconds $(FUZZ_SECONDS) --jobs $(FUZZ_JOBS)

fuzz: build build-asan
	tests/fuzz/run_fuzz.sh --build $(ASAN_BUILD) --kiln $(BUILD)/kiln --seconds $(FUZZ_LONG_SECONDS) --jobs $(FUZZ_JOBS)

coverage:
	scripts/coverage.sh $(COV_BUILD)

bench: build
	scripts/install_deps.sh bench
	scripts/install_ort.sh
	/usr/bin/python3 bench/run_bench.py --kiln $(BUILD)/kiln --work $(BUILD)/bench

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(COV_BUILD)
