#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser of untrusted input (tests/fuzz/fuzz_*.c) with libFuzzer.
#
#   scripts/fuzz.sh [TARGET...]       (default: every target)
#
# Builds the library with clang -fsanitize=fuzzer-no-link,address,undefined in build-fuzz, links one
# binary per target, replays each target's seed corpus (tests/fuzz/corpus/TARGET), then fuzzes each for
# FUZZ_SECONDS (default 30; 0 replays only). New inputs go to build-fuzz/corpus/TARGET, never into the
# source tree. A crash, leak, sanitizer report or timeout fails the script, and the input that caused it
# is copied into tests/fuzz/corpus/TARGET/ (as crash-..., leak-..., timeout-...) so it is replayed from
# then on: fix the bug, keep the input. tests/fuzz/TARGET.dict, where present, is the target's libFuzzer
# dictionary. FUZZ_JOBS (default: the number of CPUs) targets run at once.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
FUZZ_JOBS=${FUZZ_JOBS:-$(nproc)}
CC=${FUZZ_CC:-clang}
out=build-fuzz
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1"

if ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { (void)d; (void)n; return 0; }' |
     "$CC" -x c -fsanitize=fuzzer -o /dev/null - 2>/dev/null; then
    echo "fuzz: $CC cannot link -fsanitize=fuzzer (Debian: apt-get install clang libclang-rt-14-dev)" >&2
    exit 1
fi

echo "== fuzz: building the library and targets in $out"
CC="$CC" cmake -S . -B "$out" -DCMAKE_BUILD_TYPE=Fuzz -DCMAKE_C_FLAGS_FUZZ="$san -fsanitize=fuzzer-no-link" >/dev/null
cmake --build "$out" --target pith_internal -j "$(nproc)" >/dev/null
libs=$(pkg-config --libs libcjson libpcre2-8 libmicrohttpd)
# A library built with the Vulkan backend needs the loader.
ar t "$out/libpith_internal.a" | grep -q '^vk_device' && libs="$libs $(pkg-config --libs vulkan)"
# The optional libraries CMake builds with when it finds them: the image decoders (src/image/), libcurl
# (the server's image URLs, src/server/media.c) and ZMQ (KV-cache events).
for pc in libjpeg libpng libwebp libwebpdemux libcurl libzmq; do
    if pkg-config --exists "$pc"; then libs="$libs $(pkg-config --libs "$pc")"; fi
done
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for f in tests/fuzz/fuzz_*.c; do targets+=("$(basename "$f" .c | sed 's/^fuzz_//')"); done
fi
build_failed=0
cpids=()
for t in "${targets[@]}"; do
    [ -f "tests/fuzz/fuzz_$t.c" ] || { echo "fuzz: no target tests/fuzz/fuzz_$t.c" >&2; exit 1; }
    extra=()
    # The HTTP target calls the route handlers directly, with the HTTP layer stubbed.
    [ "$t" = http ] && extra=(src/server/completions.c src/server/chat_completions.c src/server/tokenize.c src/server/responses.c
                               src/server/messages.c src/server/apply_template.c src/server/infill.c src/server/render.c)
    "$CC" -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror $san -fsanitize=fuzzer -DFUZZ_SOURCE_DIR="\"$root\"" \
        -Iinclude -Isrc $(pkg-config --cflags libcjson) -o "$out/fuzz_$t" "tests/fuzz/fuzz_$t.c" "${extra[@]}" \
        "$out/libpith_internal.a" $libs -lpthread -lm & cpids+=($!)
    if [ ${#cpids[@]} -ge "$(nproc)" ]; then wait "${cpids[0]}" || build_failed=1; cpids=("${cpids[@]:1}"); fi
done
for p in "${cpids[@]}"; do wait "$p" || build_failed=1; done
[ $build_failed -eq 0 ] || { echo "fuzz: building the targets failed" >&2; exit 1; }

export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1
# Bounded inputs and memory keep every run quick; -timeout catches hangs.
opts=(-rss_limit_mb=2048 -timeout=10 -max_len=65536 -print_final_stats=0)

run_one() {
    local t=$1 seeds=tests/fuzz/corpus/$1 work=$out/corpus/$1 log=$out/fuzz_$1.log artifacts=$out/artifacts/$1/
    mkdir -p "$seeds" "$work" "$artifacts"
    rm -f "$artifacts"*
    local status=0
    # Replay: every seed (and every input a previous run saved) once.
    local files=()
    mapfile -t files < <(find "$seeds" -type f | sort)
    : >"$log"
    if [ ${#files[@]} -gt 0 ] && ! "$out/fuzz_$t" "${opts[@]}" -artifact_prefix="$artifacts" "${files[@]}" >"$log" 2>&1; then
        status=1
    fi
    local dict=()
    [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
    if [ $status -eq 0 ] && [ "$FUZZ_SECONDS" -gt 0 ]; then
        "$out/fuzz_$t" "${opts[@]}" "${dict[@]}" -artifact_prefix="$artifacts" -max_total_time="$FUZZ_SECONDS" \
            "$work" "$seeds" >>"$log" 2>&1 || status=1
    fi
    if [ $status -ne 0 ]; then
        for a in "$artifacts"*; do
            [ -f "$a" ] && cp "$a" "$seeds/" && echo "fuzz $t: saved $seeds/$(basename "$a")"
        done
        grep -E "ERROR: |SUMMARY: |runtime error" "$log" | head -5
        echo "fuzz $t: FAILED (log: $log)"
        return 1
    fi
    echo "fuzz $t: ok ($(grep -Eo '#[0-9]+' "$log" | tail -1 | tr -d '#') runs, $(find "$work" -type f | wc -l) corpus inputs)"
}

echo "== fuzz: replaying tests/fuzz/corpus, then ${FUZZ_SECONDS} s per target"
start=$(date +%s)
failed=0
pids=()
for t in "${targets[@]}"; do
    run_one "$t" & pids+=($!)
    if [ ${#pids[@]} -ge "$FUZZ_JOBS" ]; then wait "${pids[0]}" || failed=1; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p" || failed=1; done
echo "== fuzz: done in $(( $(date +%s) - start )) s"
exit $failed
