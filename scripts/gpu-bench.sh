#!/usr/bin/env bash
# The Vulkan backend on a GPU, in one run (docs/vulkan.md): checks first, then the figures the issue
# asks for, into $OUT (the device tool's output folder) or ./gpu-bench-out.
#
#   here:   make, and the runtime packages the device may lack into .gl/ (the device README's recipe,
#           with libcjson1 libmicrohttpd12 libpcre2-8-0 added to its list)
#   device: run(command="scripts/gpu-bench.sh", timeout_s=540,
#               carry=[".gl", "build/pith", "build/test_vulkan_ops", "build/test_engine_models"])
#           (the whole build folder is past the 64 MiB a run carries)
#
# Measures, for TinyLlama- and Llama-3-8B-shaped random-weight files in Q4_0, Q8_0 and Q4_K_M
# (tools/mkmodel.py --random-blocks: real shapes, seconds to write): decode at batch 1 with replay and
# without (PITH_VK_REPLAY=0: what replay buys), pp512 and pp2048, each divided by the device's copy
# bandwidth and FMA peak measured in the same run (pith bench --device; TinyLlama's long prompt is 2047 tokens, its context being 2048); then output tokens/s of 64
# concurrent streams (pith run -f with 64 prompts). GPU_BENCH_QUICK=1: TinyLlama Q4_0 only;
# GPU_BENCH_SHAPES, GPU_BENCH_TYPES and GPU_BENCH_DEVICE (e.g. vulkan:0, lavapipe) override the lists;
# GPU_BENCH_CHECKS=0 skips the checks; PYTHON names a python3 with numpy (tools/mkmodel.py).
# Then (issue 37) Qwen3-30B-A3B- and GPT-OSS-20B-shaped files with all their layers (Q4_K_M and MXFP4
# experts) on the device whole and with --cpu-moe (experts on the CPU): decode tokens/s and pp512;
# GPU_BENCH_MOE=0 skips them, GPU_BENCH_MOE_SHAPES overrides the list ("shape:dtype" words).
set -u
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-bench-out}
mkdir -p "$out/models"
log() { echo "== $*" | tee -a "$out/summary.txt"; }
quiet() { grep -vE '^pith bench: ([0-9]+ threads?: loading|warming up|(pp|tg)[0-9]+ x [0-9]+$|filling)'; }
if [ -d .gl ]; then for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; fi
pith=build/pith
[ -x "$pith" ] || { echo "no $pith: run make here and carry build" >&2; exit 1; }
if ! "$pith" devices | grep -v 'cannot run' | grep -q '^vulkan:'; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
"$pith" devices | tee "$out/devices.txt"
nvidia-smi --query-gpu=name,memory.total,clocks.max.memory --format=csv >"$out/nvidia-smi.txt" 2>&1
dev=${GPU_BENCH_DEVICE:-$("$pith" devices | grep '^vulkan:' | grep -v 'cannot run' | grep -v llvmpipe | head -n1 | cut -d: -f1-2)}
[ -n "$dev" ] || { log "no GPU Vulkan device: $(cat "$out/devices.txt" | tr '\n' ' ')"; exit 1; }
log "device $dev"

if [ "${GPU_BENCH_CHECKS:-1}" = 1 ]; then
log "checks: test_vulkan_ops"
build/test_vulkan_ops >"$out/ops.txt" 2>&1 && tail -n1 "$out/ops.txt" | tee -a "$out/summary.txt" ||
    { log "test_vulkan_ops FAILED"; tail -n 20 "$out/ops.txt"; }
log "checks: the engine's identity tests on $dev"
PITH_DEVICE=$dev PITH_SOURCE_DIR=$PWD PITH_TEST_TMP=$out/models build/test_engine_models >"$out/engine.txt" 2>&1 &&
    tail -n1 "$out/engine.txt" | tee -a "$out/summary.txt" || { log "test_engine_models FAILED"; tail -n 20 "$out/engine.txt"; }
fi

shapes=${GPU_BENCH_SHAPES:-tinyllama llama3-8b}; types=${GPU_BENCH_TYPES:-Q4_0 Q8_0 Q4_K_M}
[ "${GPU_BENCH_QUICK:-0}" = 1 ] && shapes=tinyllama types=Q4_0
for shape in $shapes; do
    for t in $types; do
        m=$out/models/$shape-$t.gguf
        "${PYTHON:-python3}" tools/mkmodel.py --preset "$shape" --dtype "$t" --random-blocks --seed 1 --out "$m" >/dev/null ||
            { log "mkmodel $shape $t failed"; continue; }
        log "$shape $t: decode with replay, pp512, pp2048"
        # a test needs its prompt + 1 positions: TinyLlama's context is 2048
        long=2048; [ "$shape" = tinyllama ] && long=2047
        "$pith" bench -m "$m" -dev "$dev" -p 512 -n 128 -r 3 2>&1 | quiet | tee -a "$out/summary.txt"
        "$pith" bench -m "$m" -dev "$dev" -p $long -b $long -n 0 -r 2 2>&1 | quiet | grep -v '^|---' | tail -n1 |
            tee -a "$out/summary.txt"
        log "$shape $t: decode without replay (PITH_VK_REPLAY=0)"
        PITH_VK_REPLAY=0 "$pith" bench -m "$m" -dev "$dev" -p 0 -n 128 -r 3 2>&1 | quiet | grep -v '^|---' | tail -n1 |
            tee -a "$out/summary.txt"
        if [ "$t" = Q4_0 ]; then
            log "$shape $t: 64 concurrent streams (pith run -f, 64 prompts x 256 tokens)"
            for i in $(seq 64); do echo "Stream $i: the quick brown fox jumps over the lazy dog, again and again"; done \
                >"$out/prompts.txt"
            "$pith" run -m "$m" -dev "$dev" -f "$out/prompts.txt" -n 256 --ignore-eos --max-num-seqs 64 \
                --temp 0 2>&1 >/dev/null | tail -n1 | tee -a "$out/summary.txt"
        fi
        rm -f "$m"
    done
done
if [ "${GPU_BENCH_MOE:-1}" = 1 ]; then
    for sd in ${GPU_BENCH_MOE_SHAPES:-qwen3-30b-a3b:Q4_K_M gpt-oss-20b:MXFP4}; do
        shape=${sd%%:*} t=${sd#*:} m=$out/models/$shape-$t.gguf
        "${PYTHON:-python3}" tools/mkmodel.py --preset "$shape" --dtype "$t" --random-blocks --seed 1 --out "$m" >/dev/null ||
            { log "mkmodel $shape $t failed"; continue; }
        log "$shape $t ($(du -h "$m" | cut -f1)): whole on $dev, then --cpu-moe (experts on the CPU, $(nproc) cores)"
        "$pith" bench -m "$m" -dev "$dev" -p 512 -n 128 -r 2 2>&1 | quiet | tee -a "$out/summary.txt"
        "$pith" bench -m "$m" -dev "$dev" --cpu-moe -t "$(nproc)" -p 512 -n 128 -r 2 2>&1 | quiet | tee -a "$out/summary.txt"
        rm -f "$m"
    done
fi
log "done"
