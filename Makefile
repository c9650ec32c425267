# Thin wrapper over CMake. `make` builds build/pith, build/libpith.a (the installed library: the public
# API only) and build/libpith_internal.a (every function, for the tests and tools).
JOBS ?= $(shell nproc)
CMAKE ?= cmake
CC ?= cc
PREFIX ?= /usr/local
# ctest, then the skipped tests and why ("skipped: NAME: reason", from ctest's JUnit file); ctest's
# exit status is kept.
CTEST_SKIPS = rm -f Testing/skips-junit.xml; ctest --output-junit Testing/skips-junit.xml --output-on-failure -j $(JOBS) $(CTEST_ARGS); rc=$$?; \
	python3 ../scripts/ctest-skips.py Testing/skips-junit.xml || true; exit $$rc

.PHONY: all test install asan asan-test clang clean
all:
	$(CMAKE) -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
	$(CMAKE) --build build -j $(JOBS)

test: all
	cd build && $(CTEST_SKIPS)

# Installs bin/pith, share/pith/pith-default.gguf, lib/libpith.a, include/pith/*.h and
# lib/pkgconfig/pith.pc under PREFIX.
install: all
	$(CMAKE) --install build --prefix "$(PREFIX)"

asan:
	$(CMAKE) -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DPITH_SANITIZE=ON >/dev/null
	$(CMAKE) --build build-asan -j $(JOBS)

asan-test: asan
	cd build-asan && export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 && \
		$(CTEST_SKIPS)

clang:
	CC=clang $(CMAKE) -S . -B build-clang -DCMAKE_BUILD_TYPE=Release >/dev/null
	$(CMAKE) --build build-clang -j $(JOBS)

clean:
	rm -rf build build-asan build-clang
