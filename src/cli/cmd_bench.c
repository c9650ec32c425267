/* `pith bench`: prompt processing and generation speed, next to what the machine can do, in the spirit
 * of llama.cpp's llama-bench.
 *
 * For each thread count: load the model, warm up (one prompt batch and one decode step fault the
 * weights in), then probe memory bandwidth and the compute peak right before and after each test and
 * relate the test to them: decode reads every weight once per token, so tg is measured against
 * bandwidth; prefill reuses each weight across the batch, so pp is measured against the int8 (quantized
 * weights) or FMA (float weights) peak, each timed with the instructions the model's kernels run for its
 * main weight type (AVX-512 VNNI vpdpbusd for packed Q4_0 and Q4_K on such a machine, maddubs for Q4_K on AVX2, zmm FMA
 * for packed F16 on the AVX-512 table, ymm FMA for F32...). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/info.h"
#include "cli/bench_image.h"
#include "cli/bench_spec.h"
#include "cli/cli.h"
#include "cli/progress.h"
#include "pith/bench.h"
#include "pith/dist.h"
#include "pith/model.h"

#define MAX_THREAD_COUNTS 16
#define MAX_DEPTHS 16
#define BW_PASSES 10
#define PEAK_REPS 5

typedef struct bench_opts {
    const char *model;
    const char *device;   /* --device; NULL: PITH_DEVICE, else the CPU */
    const char *gpu_layers; /* -ngl */
    int n_cpu_moe;          /* --n-cpu-moe; -1: --cpu-moe */
    int tp, pp;             /* --tp, --pp: ranks (tp x pp), each with threads[0] threads */
    bool no_ep;             /* --no-ep */
    struct pith_comm *comm; /* the MPI job's, with --tp */
    int threads[MAX_THREAD_COUNTS];
    int n_thread_counts;
    int depths[MAX_DEPTHS];
    int n_depths;
    int n_prompt, n_gen, reps, batch;
    long long bw_mib;
    pith_kv_type kv_type;
    bool json, warmup;
    /* the speculative mode (bench_spec.h) */
    pith_spec_type spec_type;
    const char *draft_model, *prompts_file;
    int spec_max_draft;
    bool reps_given, n_gen_given;
    /* the image mode (bench_image.h) */
    const char *mmproj, *image;
} bench_opts;

static void bench_usage(FILE *out) {
    fprintf(out,
            "usage: pith bench [-m MODEL] [options]\n"
            "       pith bench [-m MODEL] --spec-type ngram|draft|mtp [-md DRAFT] -f PROMPTS [options]\n"
            "\n"
            "Measures, through the engine that `pith run` and `pith serve` use, prompt processing (pp: one\n"
            "request of -p random prompt tokens, computed in steps of up to -b tokens) and text generation\n"
            "(tg: -n tokens decoded one step each after a BOS, greedy) in tokens per second, mean and\n"
            "standard deviation over -r repetitions after a warm-up. Around each test it\n"
            "measures the machine's memory read bandwidth and compute peak with the same threads, and\n"
            "reports the ratio: for tg, weight bytes read per second over bandwidth; for pp, operations\n"
            "per second (2 x matmul parameters x tokens) over the int8 peak (quantized weights) or the\n"
            "FP32 FMA peak (float weights), each timed with the instructions the kernels run for the\n"
            "model's main weight type (e.g. vpdpbusd for Q4_0/Q8_0 where the CPU has VNNI, zmm FMA\n"
            "for F16/BF16 where it has AVX-512). For a mixture of experts the bytes and parameters are\n"
            "the active ones: the dense weights plus the routed share (experts used / experts) of the\n"
            "expert tensors. For a model with recurrent state (hybrids) tg's bytes add the state each\n"
            "token reads and writes (twice the state a sequence holds).\n"
            "\n"
            "  -m, --model PATH        model (default: the installed default model)\n"
            "  -t, --threads LIST      thread counts, comma-separated, e.g. 1,2 (default: online CPUs)\n"
            "  -dev, --device DEV      cpu, vulkan or vulkan:N (default: $PITH_DEVICE, else cpu). On a Vulkan\n"
            "                          device the probes run there: bandwidth is a copy between two device\n"
            "                          buffers (bytes read + written), the pp peak the device's FP32 FMA rate\n"
            "  -ngl, --gpu-layers N    with a device: the last N layers on it, the rest on the CPU (0: the CPU\n"
            "                          alone; auto, the default: as many as its memory holds)\n"
            "      --cpu-moe           with a device: every MoE layer's experts on the CPU\n"
            "      --n-cpu-moe N       with a device: the experts of the first N layers on the CPU\n"
            "%s"
            "                          (one -t: threads per rank; the probes run with tp x threads\n"
            "                          threads, the ranks' share of this machine)\n"
            "  -p, --n-prompt N        prompt tokens for pp; 0 skips pp (default 512)\n"
            "  -n, --n-gen N           generated tokens for tg; 0 skips tg (default 128)\n"
            "  -r, --repetitions N     timed repetitions of each test (default 5)\n"
            "  -b, --batch-size N      tokens per engine step (forward pass) in pp (default 512)\n"
            "  -d, --n-depth LIST      tokens already in the cache before each test, comma-separated, e.g.\n"
            "                          0,4096 (default 0): the prefix is computed once, untimed, and the\n"
            "                          prefix cache serves it to every repetition, so pp and tg attend to\n"
            "                          that many more positions (llama-bench's --n-depth)\n"
"      --kv-type T         K/V cache type: f16 (the model's, default), bf16, q8_0 or f32\n"
            "      --bw-mib N          MiB read by the bandwidth probe (default: the weight bytes a generated\n"
            "                          token reads, at least 256, so the probe streams what decoding\n"
            "                          streams; keep it far above the last-level cache)\n"
            "      --no-warmup         skip the warm-up\n"
            "\n"
            "Speculative mode: runs each prompt of -f (one per line) alone, greedy, -n tokens with EOS ignored,\n"
            "without and with speculative decoding, alternating, -r times each (default 1 here); checks the\n"
            "tokens are identical, and prints decode tokens/s both ways, the speed-up, drafted and accepted\n"
            "tokens, the acceptance and the target's forward passes per generated token, per prompt and in\n"
            "total, with the bandwidth probe before and after:\n"
            "      --spec-type ngram|draft|mtp  prompt lookup, a draft model (-md), or the MTP head\n"
            "  -md, --draft-model PATH   the draft model (same vocabulary as -m; implies --spec-type draft)\n"
            "  -f, --file PATH         the prompts, one per line\n"
            "      --spec-max-draft N  tokens per draft (default 8, at most 16)\n"
            "\n"
            "Image mode: with --mmproj, the encoder time of one image and the text model's prefill of a prompt\n"
            "of one image's tokens (BOS, the image, 8 text tokens; the rows from the encoder cache), -r times\n"
            "each, with their share of the compute peak (FP32 FMA for the encoder; the model's weights' peak\n"
            "for the prefill), measured with the same threads just before (CPU only):\n"
            "      --mmproj FILE       the model's vision projector (llama.cpp's mmproj GGUF, or a Hugging\n"
            "                          Face directory with the vision tower: Gemma 3, Qwen3.5)\n"
            "      --image FILE        the image to encode (default: a 640x480 synthetic gradient)\n"
            "\n"            "      --json              one JSON object per test (one per line) instead of the table\n"
            "  -h, --help              show this help\n"
            "\n"
            "PITH_FORCE_SCALAR=1 selects the portable kernels, for the model and the probes alike;\n"
            "PITH_KERNELS=avx2|avx2-vnni|avx512-vnni|scalar selects that kernel table where the\n"
            "processor has it.\n"
            "PITH_MOE_NAIVE=expert (or 1) computes a mixture of experts expert by expert over its gathered\n"
            "rows, PITH_MOE_NAIVE=token token by token (each token's experts as matrix-vector products): the\n"
            "baselines of the grouped expert products.\n"
            "PITH_MOE_EXPERTS=mapped|repacked|auto: a mixture of experts' experts kept in the file's mapping\n"
            "or repacked at load (auto, the default: mapped when they exceed half of MemAvailable); the\n"
            "header's \"experts held\" line says which.\n", cli_tp_help(false));
}

/* A comma-separated list of at most max integers in lo..hi for option opt (what: "thread counts"). */
static bool parse_list(const char *opt, const char *what, const char *s, long long lo, long long hi, int max,
                       int *out, int *n) {
    *n = 0;
    char buf[256];
    if (strlen(s) >= sizeof buf) {
        fprintf(stderr, "pith bench: %s: list too long\n", opt);
        return false;
    }
    strcpy(buf, s);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == max) {
            fprintf(stderr, "pith bench: %s: at most %d %s\n", opt, max, what);
            return false;
        }
        long long v;
        if (!cli_parse_int("bench", opt, tok, lo, hi, &v)) return false;
        out[(*n)++] = (int)v;
    }
    if (*n == 0 || s[strlen(s) - 1] == ',' || s[0] == ',' || strstr(s, ",,")) {
        fprintf(stderr, "pith bench: %s: '%s' is not a comma-separated list of %s\n", opt, s, what);
        return false;
    }
    return true;
}

/* Returns 0 to continue, 1 for --help, -1 on a usage error (message printed). */
static int parse_bench_args(int argc, char **argv, bench_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_prompt = 512;
    o->n_gen = 128;
    o->reps = 5;
    o->batch = 512;
    o->bw_mib = 0; /* the model's size, see probe_mib */
    o->warmup = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v;
        long long iv;
#define VALUE() do { if (!(v = cli_value("bench", argc, argv, &i))) return -1; } while (0)
        int tp_rc = cli_tp_arg("bench", argc, argv, &i, &o->tp, &o->pp, &o->no_ep);
        if (tp_rc < 0) return -1;
        if (tp_rc > 0) {
            continue;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            return 1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            VALUE(); o->model = v;
        } else if (!strcmp(a, "-ngl") || !strcmp(a, "--gpu-layers") || !strcmp(a, "--n-gpu-layers")) {
            VALUE(); if (!cli_parse_gpu_layers("bench", a, v)) return -1;
            o->gpu_layers = v;
        } else if (!strcmp(a, "--cpu-moe")) {
            o->n_cpu_moe = -1;
        } else if (!strcmp(a, "--n-cpu-moe") || !strcmp(a, "-ncmoe")) {
            VALUE(); if (!cli_parse_int("bench", a, v, 0, 100000, &iv)) return -1;
            o->n_cpu_moe = (int)iv;
        } else if (!strcmp(a, "-dev") || !strcmp(a, "--device")) {
            VALUE(); if (!cli_parse_device("bench", a, v)) return -1;
            o->device = v;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            VALUE();
            if (!parse_list("-t", "thread counts", v, 1, 1024, MAX_THREAD_COUNTS, o->threads, &o->n_thread_counts))
                return -1;
        } else if (!strcmp(a, "-d") || !strcmp(a, "--n-depth")) {
            VALUE();
            if (!parse_list("-d", "depths", v, 0, 1 << 24, MAX_DEPTHS, o->depths, &o->n_depths)) return -1;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) {
            VALUE(); if (!cli_parse_int("bench", a, v, 0, 1 << 20, &iv)) return -1;
            o->n_prompt = (int)iv;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) {
            VALUE(); if (!cli_parse_int("bench", a, v, 0, 1 << 20, &iv)) return -1;
            o->n_gen = (int)iv;
            o->n_gen_given = true;
        } else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) {
            VALUE(); if (!cli_parse_int("bench", a, v, 1, 1000, &iv)) return -1;
            o->reps = (int)iv;
            o->reps_given = true;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
            VALUE(); if (!cli_parse_int("bench", a, v, 1, 1 << 20, &iv)) return -1;
            o->batch = (int)iv;
        } else if (!strcmp(a, "--bw-mib")) {
            VALUE(); if (!cli_parse_int("bench", a, v, 1, 1 << 16, &iv)) return -1;
            o->bw_mib = iv;
        } else if (!strcmp(a, "--kv-type")) {
            VALUE();
            int t = pith_kv_type_parse(v);
            if (t < 0) {
                fprintf(stderr, "pith bench: --kv-type: '%s' is not one of f16, bf16, q8_0, f32\n", v);
                return -1;
            }
            o->kv_type = (pith_kv_type)t;
        } else if (!strcmp(a, "--spec-type")) {
            VALUE();
            if (!strcmp(v, "ngram")) o->spec_type = PITH_SPEC_NGRAM;
            else if (!strcmp(v, "draft")) o->spec_type = PITH_SPEC_DRAFT;
            else if (!strcmp(v, "mtp")) o->spec_type = PITH_SPEC_MTP;
            else if (!strcmp(v, "off")) o->spec_type = PITH_SPEC_OFF;
            else {
                fprintf(stderr, "pith bench: --spec-type must be ngram, draft, mtp or off, not '%s'\n", v);
                return -1;
            }
        } else if (!strcmp(a, "-md") || !strcmp(a, "--draft-model")) {
            VALUE(); o->draft_model = v;
            if (o->spec_type == PITH_SPEC_OFF) o->spec_type = PITH_SPEC_DRAFT;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            VALUE(); o->prompts_file = v;
        } else if (!strcmp(a, "--spec-max-draft")) {
            VALUE(); if (!cli_parse_int("bench", a, v, 1, 16, &iv)) return -1;
            o->spec_max_draft = (int)iv;
        } else if (!strcmp(a, "--mmproj")) {
            VALUE(); o->mmproj = v;
        } else if (!strcmp(a, "--image")) {
            VALUE(); o->image = v;
        } else if (!strcmp(a, "--no-warmup")) {
            o->warmup = false;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else {
            fprintf(stderr, "pith bench: unknown option '%s' (try 'pith bench --help')\n", a);
            return -1;
        }
#undef VALUE
    }
    if (o->image && !o->mmproj) {
        fprintf(stderr, "pith bench: --image needs --mmproj (the image mode)\n");
        return -1;
    }
    if (o->mmproj && (o->spec_type != PITH_SPEC_OFF || o->prompts_file || o->tp > 1 || o->pp > 1)) {
        fprintf(stderr, "pith bench: the image mode (--mmproj) runs alone: no --spec-type, -f, --tp or --pp\n");
        return -1;
    }
    if (o->spec_type != PITH_SPEC_OFF || o->prompts_file) {
        if (o->spec_type == PITH_SPEC_OFF || !o->prompts_file) {
            fprintf(stderr, "pith bench: the speculative mode needs both --spec-type ngram|draft|mtp and -f PROMPTS\n");
            return -1;
        }
        if (o->spec_type == PITH_SPEC_DRAFT && !o->draft_model) {
            fprintf(stderr, "pith bench: --spec-type draft needs --draft-model PATH\n");
            return -1;
        }
        if (o->n_gen_given && o->n_gen < 2) {
            fprintf(stderr, "pith bench: the speculative mode needs -n of at least 2\n");
            return -1;
        }
        if (!o->reps_given) o->reps = 1;
    }
    if (o->n_prompt == 0 && o->n_gen == 0) {
        fprintf(stderr, "pith bench: -p 0 and -n 0 leave nothing to measure\n");
        return -1;
    }
    if (o->n_depths == 0) o->n_depths = 1; /* depth 0 */
    if (o->n_thread_counts == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o->threads[0] = n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
        o->n_thread_counts = 1;
    }
    return 0;
}

/* One finished test, everything the table and the JSON show. */
typedef struct test_result {
    const char *kind;        /* "pp" or "tg" */
    int n_tokens;
    int depth;               /* tokens in the cache before the test */
    int threads;
    pith_bench_stats tps;    /* tokens per second over the repetitions */
    const double *samples;
    int n_samples;
    double bw_before, bw_after; /* bytes per second */
    double achieved;         /* pp: operations per second; tg: weight bytes per second */
    double peak;             /* pp: operations per second of the relevant peak; tg: bandwidth */
    const char *ratio_kind;  /* "bandwidth", "int8_peak" or "fma_peak" */
    const char *peak_isa;    /* pp: the instructions the peak was timed with */
    double cpu_share;        /* CPU time / (wall time x threads) over the repetitions */
    /* --tp: rank 0's collectives per token of the test, and what the link probe predicts for them */
    bool tp;
    double tp_collectives, tp_bytes, tp_seconds, tp_predicted;
} test_result;

typedef struct bench_ctx {
    const bench_opts *o;
    const char *isa;
    const char *peak_isa; /* the instructions of the pp peak for this model */
    pith_hparams hp;
    pith_bench_weights w;
    long long probe_mib; /* what the bandwidth probe reads */
    uint64_t state_bytes; /* recurrent state per sequence (the RECURRENT groups together), 0 if none */
    char experts[160];   /* the model's experts line (pith_model.experts) */
    bool header_done;
    bool on_device;          /* a Vulkan device: its probes (pith_backend_device_probe) replace the CPU's */
    char device_name[256];   /* on_device: the device the probe ran on */
    pith_dist_probe links;   /* --tp: the links between the ranks, measured after loading */
    char tp_notes[2048];     /* --tp: a line per test, printed after the table */
} bench_ctx;

/* The device's copy reads and writes at most 1 GiB: enough to stream at full bandwidth, and two such
 * buffers beside the model still fit where the model does. */
static long long device_probe_mib(const bench_ctx *c) { return c->probe_mib < 1024 ? c->probe_mib : 1024; }

/* The limits a test divides by, measured now: memory bandwidth (bytes/s) and, when peak is not NULL, the
 * compute peak (operations/s) for this model's weights. On a device both come from one device probe. */
static int measure_limits(bench_ctx *c, pith_probe *probe, double *bw, double *peak, pith_err *err) {
    if (c->on_device) {
        double gbs, gflops;
        if (pith_backend_device_probe(c->o->device, (size_t)device_probe_mib(c) << 20, &gbs, &gflops, c->device_name,
                                      sizeof c->device_name, err))
            return -1;
        *bw = gbs * 1e9;
        if (peak) *peak = gflops * 1e9;
        return 0;
    }
    if (pith_probe_bandwidth(probe, BW_PASSES, bw, err)) return -1;
    if (!peak) return 0;
    return c->w.quantized ? pith_probe_int8_peak(probe, c->w.type, PEAK_REPS, peak, err)
                          : pith_probe_fma_peak(probe, c->w.type, PEAK_REPS, peak, err);
}

/* On a shared host, reading memory can be faster over short runs than over long ones (on the 2-vCPU
 * test machine, in its fast state, a plain 2-thread read loop averaged 74-89 GB/s over 128 MiB and 62-66
 * over 1200 MiB: docs/performance.md), so by default the probe reads as many bytes as one generated
 * token does: the ratio then compares decoding with streaming the same amount of memory. */
static long long probe_mib(const bench_opts *o, const pith_bench_weights *w) {
    if (o->bw_mib > 0) return o->bw_mib;
    long long mib = (long long)((w->size_bytes + (1u << 20) - 1) >> 20);
    return mib < 256 ? 256 : mib;
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    /* A directory given with a trailing slash: show the whole path rather than nothing. */
    return s && s[1] ? s + 1 : path;
}

static void print_header(bench_ctx *c) {
    const pith_hparams *hp = &c->hp;
    const pith_bench_weights *w = &c->w;
    printf("model: %s (%s)\n", c->o->model, hp->arch);
    printf("shape: dim %d, layers %d, heads %d, kv heads %d, head dim %d, ffn %d, vocab %d\n", hp->dim,
           hp->n_layers, hp->n_heads, hp->n_kv_heads, hp->head_dim, hp->ffn_dim, hp->n_vocab);
    printf("weights: %s; %.1f MiB read per generated token; %.1f M layer matmul parameters + %.1f M output\n",
           w->format, (double)w->size_bytes / (1 << 20), (double)w->layer_params / 1e6,
           (double)w->output_params / 1e6);
    if (w->expert_bytes)
        printf("experts: %d of %d per token: active bytes %.1f MiB of %.1f MiB (routed experts + dense weights)\n",
               hp->n_experts_used, hp->n_experts, (double)w->size_bytes / (1 << 20),
               (double)w->total_bytes / (1 << 20));
    if (c->experts[0]) printf("experts held: %s\n", c->experts);
    if (c->state_bytes)
        printf("recurrent state: %.2f MiB per sequence, read and written by every generated token (tg counts "
               "those 2 x %.2f MiB beside the weights)\n",
               (double)c->state_bytes / (1 << 20), (double)c->state_bytes / (1 << 20));
    if (c->on_device)
        printf("device: %s (%s); probes on the device, before/after each test: bandwidth = a copy of %lld MiB "
               "between two buffers (bytes read + written), pp ratio against its FP32 FMA peak (weights are "
               "dequantized to float there)\n",
               pith_backend_device_or_env(c->o->device), c->device_name, device_probe_mib(c));
    else
        printf("probes: kernels %s; bandwidth = best of %d passes over %lld MiB, measured before/after each test; "
               "pp ratio against the %s peak of %s\n",
               c->isa, BW_PASSES, c->probe_mib, w->quantized ? "int8" : "FP32 FMA", c->peak_isa);
    printf("kv cache: %s\n", c->o->kv_type ? pith_kv_type_name(c->o->kv_type) : "f16");
    printf("cpu: CPU time / (wall time x threads) during the test; below 100%% other work shared the cores\n\n");
    printf("| model | format | size MiB | threads | test | t/s | bandwidth GB/s (before/after) | achieved | ratio | cpu |\n");
    printf("|---|---|---:|---:|---|---:|---:|---|---:|---:|\n");
    fflush(stdout);
}

static void print_row(bench_ctx *c, const test_result *r) {
    char achieved[96];
    if (!strcmp(r->kind, "tg"))
        snprintf(achieved, sizeof achieved, c->state_bytes ? "%.1f GB/s weights + state" : "%.1f GB/s weights",
                 r->achieved / 1e9);
    else
        snprintf(achieved, sizeof achieved, "%.0f of %.0f GOP/s %s", r->achieved / 1e9, r->peak / 1e9,
                 !strcmp(r->ratio_kind, "int8_peak") ? "int8" : "FMA");
    char test[48];
    if (r->depth) snprintf(test, sizeof test, "%s%d @ d%d", r->kind, r->n_tokens, r->depth);
    else snprintf(test, sizeof test, "%s%d", r->kind, r->n_tokens);
    char threads[64];
    if (c->o->pp > 1) snprintf(threads, sizeof threads, "pp %d x tp %d x %d", c->o->pp, c->o->tp > 1 ? c->o->tp : 1, r->threads);
    else if (c->o->tp > 1) snprintf(threads, sizeof threads, "tp %d x %d", c->o->tp, r->threads);
    else snprintf(threads, sizeof threads, "%d", r->threads);
    printf("| %s | %s | %.1f | %s | %s | %.2f ± %.2f | %.1f (%.1f/%.1f) | %s | %.2f | %.0f%% |\n",
           base_name(c->o->model), c->w.format, (double)c->w.size_bytes / (1 << 20), threads, test, r->tps.mean, r->tps.stddev, 0.5 * (r->bw_before + r->bw_after) / 1e9,
           r->bw_before / 1e9, r->bw_after / 1e9, achieved, r->achieved / r->peak, 100 * r->cpu_share);
    fflush(stdout);
}

static int print_json(bench_ctx *c, const test_result *r) {
    const bench_opts *o = c->o;
    char test[32];
    snprintf(test, sizeof test, "%s%d", r->kind, r->n_tokens);
    cJSON *j = cJSON_CreateObject();
    if (!j) return -1;
    cJSON_AddStringToObject(j, "model", o->model);
    cJSON_AddStringToObject(j, "arch", c->hp.arch);
    cJSON_AddStringToObject(j, "format", c->w.format);
    cJSON_AddNumberToObject(j, "size_bytes", (double)c->w.size_bytes);
    if (c->state_bytes) cJSON_AddNumberToObject(j, "state_bytes", (double)c->state_bytes);
    if (c->w.expert_bytes) {
        cJSON_AddNumberToObject(j, "active_bytes", (double)c->w.size_bytes);
        cJSON_AddNumberToObject(j, "total_bytes", (double)c->w.total_bytes);
        cJSON_AddNumberToObject(j, "n_experts", c->hp.n_experts);
        cJSON_AddNumberToObject(j, "n_experts_used", c->hp.n_experts_used);
    }
    cJSON_AddNumberToObject(j, "layer_params", (double)c->w.layer_params);
    cJSON_AddNumberToObject(j, "output_params", (double)c->w.output_params);
    cJSON_AddNumberToObject(j, "dim", c->hp.dim);
    cJSON_AddNumberToObject(j, "n_layers", c->hp.n_layers);
    cJSON_AddNumberToObject(j, "n_heads", c->hp.n_heads);
    cJSON_AddNumberToObject(j, "n_kv_heads", c->hp.n_kv_heads);
    cJSON_AddNumberToObject(j, "head_dim", c->hp.head_dim);
    cJSON_AddNumberToObject(j, "ffn_dim", c->hp.ffn_dim);
    cJSON_AddNumberToObject(j, "n_vocab", c->hp.n_vocab);
    cJSON_AddNumberToObject(j, "threads", r->threads);
    if (o->tp > 1) cJSON_AddNumberToObject(j, "tp", o->tp);
    if (o->pp > 1) cJSON_AddNumberToObject(j, "pp", o->pp);
    cJSON_AddStringToObject(j, "test", test);
    cJSON_AddNumberToObject(j, "n_tokens", r->n_tokens);
    cJSON_AddNumberToObject(j, "depth", r->depth);
    cJSON_AddStringToObject(j, "kv_type", o->kv_type ? pith_kv_type_name(o->kv_type) : "f16");
    if (!strcmp(r->kind, "pp")) cJSON_AddNumberToObject(j, "n_batch", o->batch);
    cJSON_AddNumberToObject(j, "repetitions", r->n_samples);
    cJSON_AddNumberToObject(j, "tokens_per_s", r->tps.mean);
    cJSON_AddNumberToObject(j, "stddev", r->tps.stddev);
    cJSON_AddNumberToObject(j, "median_tokens_per_s", r->tps.median);
    cJSON_AddItemToObject(j, "samples_ts", cJSON_CreateDoubleArray(r->samples, r->n_samples));
    cJSON_AddNumberToObject(j, "bandwidth_gbs", 0.5 * (r->bw_before + r->bw_after) / 1e9);
    cJSON_AddNumberToObject(j, "bandwidth_probe_mib", (double)(c->on_device ? device_probe_mib(c) : c->probe_mib));
    if (c->on_device) {
        cJSON_AddStringToObject(j, "device", pith_backend_device_or_env(o->device));
        cJSON_AddStringToObject(j, "device_name", c->device_name);
    }
    cJSON_AddNumberToObject(j, "bandwidth_before_gbs", r->bw_before / 1e9);
    cJSON_AddNumberToObject(j, "bandwidth_after_gbs", r->bw_after / 1e9);
    if (!strcmp(r->kind, "tg")) {
        cJSON_AddNumberToObject(j, "achieved_gbs", r->achieved / 1e9);
    } else {
        cJSON_AddNumberToObject(j, "achieved_gops", r->achieved / 1e9);
        cJSON_AddNumberToObject(j, "peak_gops", r->peak / 1e9);
        cJSON_AddStringToObject(j, "peak_isa", r->peak_isa);
    }
    cJSON_AddStringToObject(j, "ratio_kind", r->ratio_kind);
    cJSON_AddNumberToObject(j, "ratio", r->achieved / r->peak);
    cJSON_AddNumberToObject(j, "cpu_share", r->cpu_share);
    if (r->tp) {
        cJSON_AddNumberToObject(j, "tp_collectives_per_token", r->tp_collectives);
        cJSON_AddNumberToObject(j, "tp_bytes_per_token", r->tp_bytes);
        cJSON_AddNumberToObject(j, "tp_comm_seconds_per_token", r->tp_seconds);
        cJSON_AddNumberToObject(j, "tp_predicted_seconds_per_token", r->tp_predicted);
        cJSON_AddNumberToObject(j, "tp_link_latency_s", c->links.latency_s);
        cJSON_AddNumberToObject(j, "tp_link_bytes_per_s", c->links.allreduce_bytes_per_s);
    }
    cJSON_AddStringToObject(j, "probe_isa", c->isa);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s) return -1;
    puts(s);
    fflush(stdout);
    free(s);
    return 0;
}

static int report(bench_ctx *c, const test_result *r, pith_err *err) {
    if (c->o->json) {
        if (print_json(c, r)) return pith_errf(err, "out of memory writing JSON");
        return ferror(stdout) ? pith_errf(err, "writing the output failed (stdout)") : 0;
    }
    if (!c->header_done) {
        print_header(c);
        c->header_done = true;
    }
    print_row(c, r);
    if (r->tp) {
        size_t len = strlen(c->tp_notes);
        snprintf(c->tp_notes + len, sizeof c->tp_notes - len,
                 "- %s%d: %.0f collectives and %.1f KiB per token, %.0f us per token in them (%.1f%% of the "
                 "token's time); the links predict %.0f us\n", r->kind, r->n_tokens, r->tp_collectives,
                 r->tp_bytes / 1024, r->tp_seconds * 1e6, 100 * r->tp_seconds * r->tps.mean, r->tp_predicted * 1e6);
    }
    return ferror(stdout) ? pith_errf(err, "writing the output failed (stdout)") : 0;
}

/* --tp: the test's collectives per token (stats before and after its repetitions of `tokens` tokens). */
static void tp_costs(const bench_ctx *c, const pith_dist_stats *a, const pith_dist_stats *b, double tokens,
                     test_result *r) {
    r->tp = true;
    r->tp_collectives = (double)(b->collectives - a->collectives) / tokens;
    r->tp_bytes = (double)(b->bytes - a->bytes) / tokens;
    r->tp_seconds = (b->seconds - a->seconds) / tokens;
    r->tp_predicted = r->tp_collectives * c->links.latency_s + r->tp_bytes / c->links.allreduce_bytes_per_s;
}

/* Runs `reps` timed repetitions of one test; samples[i] is tokens per second. */
static int run_reps(pith_bench_runner *run, const bench_opts *o, bool pp, int threads, double *samples,
                    double *cpu_share, pith_err *err) {
    double wall0 = pith_bench_now(), cpu0 = pith_bench_cpu_seconds();
    for (int i = 0; i < o->reps; i++) {
        double sec;
        int rc = pp ? pith_bench_pp(run, o->n_prompt, &sec, err) : pith_bench_tg(run, o->n_gen, &sec, err);
        if (rc) return -1;
        samples[i] = (pp ? o->n_prompt : o->n_gen) / (sec > 0 ? sec : 1e-9);
    }
    double wall = pith_bench_now() - wall0;
    *cpu_share = (pith_bench_cpu_seconds() - cpu0) / ((wall > 0 ? wall : 1e-9) * threads);
    return 0;
}

/* The tests of one thread count at one depth, on a loaded model and probe. */
static int bench_depth(bench_ctx *c, pith_model *m, pith_probe *probe, int threads, int depth, double *samples,
                       pith_err *err) {
    const bench_opts *o = c->o;
    int rc = -1;
    pith_bench_runner *run = NULL;
    if (depth) fprintf(stderr, "pith bench: filling the cache to depth %d\n", depth);
    if (pith_bench_runner_new(m, o->n_prompt, o->batch, o->n_gen, depth, o->kv_type, 0x5eed + (uint64_t)threads, &run,
                              err))
        goto done;
    if (o->warmup) {
        fprintf(stderr, "pith bench: warming up\n");
        double sec;
        if (o->n_prompt && pith_bench_pp(run, o->n_prompt < o->batch ? o->n_prompt : o->batch, &sec, err)) goto done;
        if (o->n_gen && pith_bench_tg(run, 1, &sec, err)) goto done;
    }

    double bw, peak0;
    if (measure_limits(c, probe, &bw, o->n_prompt ? &peak0 : NULL, err)) goto done;
    if (o->n_prompt) {
        fprintf(stderr, "pith bench: pp%d x %d\n", o->n_prompt, o->reps);
        double peak1, bw1;
        double share;
        pith_dist_stats s0, s1;
        bool tp = pith_dist_get_stats(m, &s0);
        if (run_reps(run, o, true, threads, samples, &share, err)) goto done;
        pith_dist_get_stats(m, &s1);
        if (measure_limits(c, probe, &bw1, &peak1, err)) goto done;
        test_result r = {.kind = "pp", .n_tokens = o->n_prompt, .depth = depth, .threads = threads,
                         .samples = samples, .n_samples = o->reps, .bw_before = bw, .bw_after = bw1,
                         .peak = 0.5 * (peak0 + peak1),
                         .ratio_kind = c->w.quantized && !c->on_device ? "int8_peak" : "fma_peak",
                         .peak_isa = c->peak_isa,
                         .cpu_share = share};
        pith_bench_stats_of(samples, o->reps, &r.tps);
        if (tp) tp_costs(c, &s0, &s1, (double)o->reps * o->n_prompt, &r);
        /* Every token runs every layer matmul; the output matrix runs once, for the last prompt token
         * (the engine asks for no other logits row, whatever the number of steps). Attention is not
         * counted, at any depth. */
        double ops_per_prompt = 2.0 * ((double)c->w.layer_params * o->n_prompt + (double)c->w.output_params);
        r.achieved = ops_per_prompt * r.tps.mean / o->n_prompt;
        if (report(c, &r, err)) goto done;
        bw = bw1;
    }
    if (o->n_gen) {
        fprintf(stderr, "pith bench: tg%d x %d\n", o->n_gen, o->reps);
        double bw1, share;
        pith_dist_stats s0, s1;
        bool tp = pith_dist_get_stats(m, &s0);
        if (run_reps(run, o, false, threads, samples, &share, err)) goto done;
        pith_dist_get_stats(m, &s1);
        if (measure_limits(c, probe, &bw1, NULL, err)) goto done;
        test_result r = {.kind = "tg", .n_tokens = o->n_gen, .depth = depth, .threads = threads,
                         .samples = samples, .n_samples = o->reps, .bw_before = bw, .bw_after = bw1,
                         .peak = 0.5 * (bw + bw1), .ratio_kind = "bandwidth", .cpu_share = share};
        pith_bench_stats_of(samples, o->reps, &r.tps);
        if (tp) tp_costs(c, &s0, &s1, (double)o->reps * o->n_gen, &r);
        /* weight bytes, and a recurrent model's state (read and written once per token: the memory it
         * declares per sequence); the K/V a token reads at depth is not counted */
        r.achieved = ((double)c->w.size_bytes + 2.0 * (double)c->state_bytes) * r.tps.mean;
        if (report(c, &r, err)) goto done;
    }
    rc = 0;
done:
    pith_bench_runner_free(run);
    return rc;
}

/* Returns 0, -1 on a runtime failure or -2 when the options do not suit the model (err says which). */
static int bench_threads(bench_ctx *c, int threads, bool force_scalar, pith_err *err) {
    const bench_opts *o = c->o;
    int rc = -1;
    pith_model *m = NULL;
    pith_probe *probe = NULL;
    double *samples = calloc((size_t)o->reps, sizeof *samples);
    if (!samples) return pith_errf(err, "out of memory");
    fprintf(stderr, "pith bench: %d thread%s: loading %s\n", threads, threads == 1 ? "" : "s", o->model);
    cli_progress bar;
    cli_progress_start(&bar, "loading model");
    pith_model_options mo = {.n_threads = threads, .device = o->device, .progress = cli_progress_update,
                             .progress_user = &bar, .gpu_layers = o->gpu_layers, .n_cpu_moe = o->n_cpu_moe,
                             .comm = o->comm, .tp = o->tp, .pp = o->pp,
                             .no_ep = o->no_ep};
    int load_rc = pith_model_load(o->model, &mo, &m, err);
    cli_progress_end(&bar);
    if (load_rc) goto done;
    if (m->placement[0]) fprintf(stderr, "pith bench: offload: %s\n", m->placement);
    if ((o->tp > 1 || o->pp > 1) && pith_dist_probe_links(m, &c->links, err)) goto done;
    c->hp = m->hp;
    snprintf(c->experts, sizeof c->experts, "%s", m->experts);
    if (pith_bench_weights_of(m, &c->w, err)) goto done;
    c->probe_mib = probe_mib(o, &c->w);
    c->state_bytes = 0;
    for (int g = 0; g < m->mem.n_groups; g++)
        if (m->mem.groups[g].kind == PITH_MEM_RECURRENT) c->state_bytes += m->mem.groups[g].state_bytes;
    int need = pith_bench_positions(o->n_prompt, o->n_gen), max_depth = 0;
    for (int i = 0; i < o->n_depths; i++) max_depth = o->depths[i] > max_depth ? o->depths[i] : max_depth;
    if ((long long)need + max_depth > m->hp.ctx_len) {
        pith_errf(err, "-p %d / -n %d need %d positions (pp: the prompt and the token it samples; tg: a BOS, "
                  "the decoded tokens and the last one sampled)%s but the model's context is %d",
                  o->n_prompt, o->n_gen, need + max_depth, max_depth ? ", with -d's depth," : "", m->hp.ctx_len);
        rc = -2;
        goto done;
    }
    int vk_index;
    if (pith_backend_parse_device(pith_backend_device_or_env(o->device), &vk_index, &c->on_device, err)) goto done;
    if (c->on_device) {
        c->isa = "vulkan";
        c->peak_isa = "vulkan fp32 fma";
    } else {
        /* under --tp the ranks on this machine use tp x threads cores: the limits are those cores' */
        int probe_threads = threads * (o->tp > 1 ? o->tp : 1) * (o->pp > 1 ? o->pp : 1);
        if (pith_probe_new(probe_threads, (size_t)c->probe_mib << 20, force_scalar, &probe, err)) goto done;
        c->isa = pith_probe_isa(probe);
        c->peak_isa = c->w.quantized ? pith_probe_int8_isa(probe, c->w.type) : pith_probe_fma_isa(probe, c->w.type);
    }
    for (int i = 0; i < o->n_depths; i++)
        if (bench_depth(c, m, probe, threads, o->depths[i], samples, err)) goto done;
    if (c->tp_notes[0] && !o->json)
        printf("\ntensor parallelism over %d ranks (rank 0's collectives, waiting for the others included; "
               "the links measured after loading: %.1f us per allreduce of 4 bytes, %.2f GB/s of payload in "
               "allreduces of 1 MiB; predicted = collectives x latency + bytes / rate; the probes ran on rank 0, "
               "whose cores are its own only where mpirun binds each rank to its cores, its default: "
               "--bind-to none lets them measure the job's):\n%s",
               (o->tp > 1 ? o->tp : 1) * (o->pp > 1 ? o->pp : 1), c->links.latency_s * 1e6, c->links.allreduce_bytes_per_s / 1e9, c->tp_notes);
    rc = 0;
done:
    pith_probe_free(probe);
    pith_model_free(m);
    free(samples);
    return rc;
}

int pith_cmd_bench(int argc, char **argv) {
    bench_opts o;
    int pr = parse_bench_args(argc, argv, &o);
    if (pr == 1) {
        bench_usage(stdout);
        return 0;
    }
    if (pr < 0) return PITH_EXIT_USAGE;
    if (!o.model && !(o.model = cli_default_model())) {
        cli_no_default_model("bench");
        return PITH_EXIT_USAGE;
    }
    bool force_scalar = pith_backend_force_scalar();
    bench_ctx c = {.o = &o};
    pith_err err = {{0}};
    if (o.tp > 1 || o.pp > 1) {
        if (o.spec_type != PITH_SPEC_OFF || o.n_thread_counts != 1) {
            fprintf(stderr, "pith bench: --tp and --pp take one thread count (-t: threads per rank) and no --spec-type\n");
            return PITH_EXIT_USAGE;
        }
        if (!cli_dist_begin("bench", o.tp, o.pp, &o.comm)) return 1;
        if (pith_comm_rank(o.comm) != 0) {
            pith_model_options mo = {.n_threads = o.threads[0], .device = o.device, .gpu_layers = o.gpu_layers,
                                     .n_cpu_moe = o.n_cpu_moe, .comm = o.comm, .tp = o.tp, .pp = o.pp, .no_ep = o.no_ep};
            return cli_dist_worker("bench", o.comm, o.model, &mo);
        }
        int rc = bench_threads(&c, o.threads[0], force_scalar, &err);
        if (rc) fprintf(stderr, "pith bench: %s\n", err.msg);
        return cli_dist_end(o.comm, rc == -2 ? PITH_EXIT_USAGE : rc ? 1 : 0);
    }
    if (o.mmproj) {
        if (strcmp(pith_backend_device_or_env(o.device), "cpu")) {
            fprintf(stderr, "pith bench: the image mode runs on the CPU (the vision ops are CPU-only so far); leave out "
                            "--device and PITH_DEVICE\n");
            return PITH_EXIT_USAGE;
        }
        bench_image_opts io = {.model = o.model, .mmproj = o.mmproj, .image = o.image, .threads = o.threads,
                               .n_thread_counts = o.n_thread_counts, .reps = o.reps, .json = o.json,
                               .warmup = o.warmup, .force_scalar = force_scalar};
        int rc = cli_bench_image(&io, &err);
        if (rc) fprintf(stderr, "pith bench: %s\n", err.msg);
        return rc ? 1 : 0;
    }
    if (o.spec_type != PITH_SPEC_OFF) {
        if (strcmp(pith_backend_device_or_env(o.device), "cpu")) {
            fprintf(stderr, "pith bench: --spec-type is measured on the CPU only (its ratios divide by the CPU's "
                            "probes); leave out --device and PITH_DEVICE\n");
            return PITH_EXIT_USAGE;
        }
        bench_spec_opts so = {.model = o.model, .draft_model = o.draft_model, .prompts_file = o.prompts_file,
                              .spec_type = o.spec_type, .threads = o.threads, .n_thread_counts = o.n_thread_counts,
                              .n_gen = o.n_gen, .reps = o.reps, .spec_max_draft = o.spec_max_draft,
                              .bw_mib = o.bw_mib, .kv_type = o.kv_type, .json = o.json, .warmup = o.warmup,
                              .force_scalar = force_scalar};
        int rc = cli_bench_spec(&so, &err);
        if (rc) fprintf(stderr, "pith bench: %s\n", err.msg);
        return rc == -2 ? PITH_EXIT_USAGE : rc ? 1 : 0;
    }
    for (int i = 0; i < o.n_thread_counts; i++) {
        int rc = bench_threads(&c, o.threads[i], force_scalar, &err);
        if (rc) {
            fprintf(stderr, "pith bench: %s\n", err.msg);
            return rc == -2 ? PITH_EXIT_USAGE : 1;
        }
    }
    return 0;
}
