# Kiln's two entry points on a fresh Debian 12 machine:
#   make demo   install deps, build, compile + run the built-in sample
#   make test   install deps, build (Release and ASan+UBSan), run every test
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)

.PHONY: demo test build build-asan bench clean

build:
	scripts/install_deps.sh build
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	scripts/demo.sh $(BUILD)

# Sanitizer build: -O1 with line tables keeps compile time reasonable on 2 cores;
# only the targets the unit-labelled tests need.
build-asan:
	scripts/install_deps.sh test
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" \
	  -DKILN_SANITIZE=ON -DKILN_CONFORMANCE=OFF -DKILN_MODEL_TESTS=OFF
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target kiln_unit_tests kiln args_refresh_add

test:
	scripts/install_deps.sh test
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j $(JOBS)
	$(MAKE) build-asan
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS) -L unit

bench: build
	scripts/install_deps.sh bench
	scripts/install_ort.sh
	/usr/bin/python3 bench/run_bench.py --kiln $(BUILD)/kiln --work $(BUILD)/bench

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
