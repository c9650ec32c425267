/* `pith run`: load a model, encode the prompt, generate with one sequence and stream the text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/chat.h"
#include "cli/cli.h"
#include "cli/run_batch.h"
#include "pith/assets.h"
#include "pith/model.h"
#include "pith/sampler.h"
#include "pith/tokenizer.h"

typedef struct run_opts {
    const char *model;
    const char *tokenizer;
    const char *prompt;
    const char *logits_out;
    const char *chat_template;
    bool chat;
    int n_predict;
    int n_threads;
    bool ignore_eos;
    bool seed_given;
    pith_sampling_params sp;
    run_batch_opts batch;   /* -f: many prompts through the engine (run_batch.h) */
} run_opts;

static void run_usage(FILE *out) {
    fprintf(out,
            "usage: pith run [-m MODEL] [options]\n"
            "\n"
            "Generates text from a prompt and streams it (not the prompt) to stdout; a timing line goes to\n"
            "stderr.\n"
            "\n"
            "  -m, --model PATH        GGUF file, Hugging Face directory or llama2.c .bin (default: the\n"
            "                          model installed next to the binary, pith-default.gguf, or\n"
            "                          $PITH_DEFAULT_MODEL)\n"
            "      --tokenizer PATH    tokenizer file (llama2.c tokenizer.bin or GGUF); needed for llama2.c\n"
            "                          checkpoints, optional otherwise\n"
            "  -p, --prompt TEXT       prompt (default \"\": the BOS token alone); with --chat, the\n"
            "                          system prompt\n"
            "      --chat              interactive chat: each line of stdin is a user turn, rendered with\n"
            "                          the model's chat template (ChatML when it has none)\n"
            "      --chat-template FILE   a Jinja chat template to use instead of the model's\n"
            "  -n, --n-predict N       tokens to generate (default 256; stops earlier at EOS)\n"
            "  -t, --threads N         worker threads (default: all online CPUs)\n"
            "      --temp T            temperature, 0 = greedy (default 0.8)\n"
            "      --top-k K           keep the K most likely tokens, 0 = off (default 40)\n"
            "      --top-p P           nucleus sampling, 1 = off (default 0.95)\n"
            "      --min-p P           drop tokens below P * p(best), 0 = off (default 0.05)\n"
            "      --repeat-penalty R  repetition penalty over prompt and output, 1 = off (default 1)\n"
            "      --presence-penalty F   OpenAI-style presence penalty (default 0)\n"
            "      --frequency-penalty F  OpenAI-style frequency penalty (default 0)\n"
            "  -s, --seed S            random seed (default: from the clock); same seed, same text\n"
            "      --ignore-eos        do not stop at EOS: generate exactly -n tokens\n"
            "      --logits-out FILE   write, for each generated token, the logits row it was chosen\n"
            "                          from: little-endian float32 [n_generated, n_vocab]\n"
            "  -h, --help              show this help\n"
            "\n");
    run_batch_usage(out);
}

/* Returns 0 to continue, 1 for --help, -1 on a usage error (message printed). */
static int parse_run_args(int argc, char **argv, run_opts *o) {
    memset(o, 0, sizeof *o);
    o->prompt = "";
    o->n_predict = 256;
    o->sp = pith_sampling_defaults();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v;
        long long iv;
        double fv;
#define VALUE() do { if (!(v = cli_value("run", argc, argv, &i))) return -1; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            return 1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            VALUE(); o->model = v;
        } else if (!strcmp(a, "--tokenizer")) {
            VALUE(); o->tokenizer = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            VALUE(); o->prompt = v;
        } else if (!strcmp(a, "--chat")) {
            o->chat = true;
        } else if (!strcmp(a, "--chat-template")) {
            VALUE(); o->chat_template = v;
        } else if (!strcmp(a, "--logits-out")) {
            VALUE(); o->logits_out = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            VALUE(); if (!cli_parse_int("run", a, v, 0, 1 << 24, &iv)) return -1;
            o->n_predict = (int)iv;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            VALUE(); if (!cli_parse_int("run", a, v, 1, 1024, &iv)) return -1;
            o->n_threads = (int)iv;
        } else if (!strcmp(a, "--temp")) {
            VALUE(); if (!cli_parse_float("run", a, v, 0, 100, &fv)) return -1;
            o->sp.temperature = (float)fv;
        } else if (!strcmp(a, "--top-k")) {
            VALUE(); if (!cli_parse_int("run", a, v, 0, 1 << 30, &iv)) return -1;
            o->sp.top_k = (int)iv;
        } else if (!strcmp(a, "--top-p")) {
            VALUE(); if (!cli_parse_float("run", a, v, 1e-9, 1, &fv)) return -1;
            o->sp.top_p = (float)fv;
        } else if (!strcmp(a, "--min-p")) {
            VALUE(); if (!cli_parse_float("run", a, v, 0, 1, &fv)) return -1;
            o->sp.min_p = (float)fv;
        } else if (!strcmp(a, "--repeat-penalty")) {
            VALUE(); if (!cli_parse_float("run", a, v, 1e-6, 100, &fv)) return -1;
            o->sp.repetition_penalty = (float)fv;
        } else if (!strcmp(a, "--presence-penalty")) {
            VALUE(); if (!cli_parse_float("run", a, v, -2, 2, &fv)) return -1;
            o->sp.presence_penalty = (float)fv;
        } else if (!strcmp(a, "--frequency-penalty")) {
            VALUE(); if (!cli_parse_float("run", a, v, -2, 2, &fv)) return -1;
            o->sp.frequency_penalty = (float)fv;
        } else if (!strcmp(a, "-s") || !strcmp(a, "--seed")) {
            VALUE(); if (!cli_parse_int("run", a, v, 0, INT64_MAX, &iv)) return -1;
            o->sp.seed = (uint64_t)iv;
            o->seed_given = true;
        } else if (!strcmp(a, "--ignore-eos")) {
            o->ignore_eos = true;
        } else {
            int r = run_batch_parse_arg(argc, argv, &i, &o->batch);
            if (r < 0) return -1;
            if (r == 0) {
                fprintf(stderr, "pith run: unknown option '%s' (try 'pith run --help')\n", a);
                return -1;
            }
        }
#undef VALUE
    }
    if (!o->seed_given) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        o->sp.seed = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    }
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct generation {
    pith_model *model;
    bool mem;
    int32_t *block_table;
    int max_blocks;
} generation;

/* Runs tokens [0, n) of `ids` (positions start..start+n-1) as one batch; logits of the last row. */
static int forward_span(generation *g, const int32_t *ids, int start, int n, float *logits, pith_err *err) {
    int32_t *pos = malloc((size_t)n * sizeof *pos);
    int32_t *seq = calloc((size_t)n, sizeof *seq);
    int32_t *slots = malloc((size_t)n * sizeof *slots);
    uint8_t *want = calloc((size_t)n, 1);
    int rc = -1;
    if (!pos || !seq || !slots || !want) {
        pith_errf(err, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        pos[i] = start + i;
        slots[i] = start + i; /* block table is the identity: slot == position */
    }
    want[n - 1] = 1;
    pith_batch_mem bm[PITH_MAX_MEM_GROUPS];
    for (int k = 0; k < PITH_MAX_MEM_GROUPS; k++)
        bm[k] = (pith_batch_mem){.slots = slots, .block_tables = g->block_table, .max_blocks = g->max_blocks, .state_slots = seq};
    pith_batch b = {
        .n_tokens = n, .tokens = ids, .positions = pos, .seq = seq, .want_logits = want, .n_seqs = 1,
        .n_groups = g->model->mem.n_groups, .mem = bm,
    };
    rc = pith_model_forward(g->model, &b, logits, err);
done:
    free(pos);
    free(seq);
    free(slots);
    free(want);
    return rc;
}

static int generate(const run_opts *o, pith_model *m, pith_tokenizer *tok, pith_err *err) {
    int rc = -1;
    int32_t *ids = NULL;
    int n_prompt = 0;
    FILE *logits_file = NULL;
    float *logits = NULL;
    pith_sampler *sampler = NULL;
    generation g = {.model = m};

    int flags = PITH_TOK_ADD_BOS | PITH_TOK_PARSE_SPECIAL;
    int32_t *prompt_ids;
    if (pith_tokenizer_encode(tok, o->prompt, strlen(o->prompt), flags, &prompt_ids, &n_prompt, err)) return -1;
    if (n_prompt == 0) {
        free(prompt_ids);
        pith_errf(err, "the prompt encodes to no tokens and the tokenizer has no BOS token");
        return -1;
    }
    const int n_ctx = m->hp.ctx_len;
    if (n_prompt >= n_ctx) {
        pith_errf(err, "the prompt is %d tokens; the model's context is %d", n_prompt, n_ctx);
        free(prompt_ids);
        return -1;
    }
    int n_total = n_prompt + o->n_predict;
    if (n_total > n_ctx) n_total = n_ctx;
    ids = realloc(prompt_ids, (size_t)(n_total + 1) * sizeof *ids);
    if (!ids) {
        free(prompt_ids);
        return pith_errf(err, "out of memory");
    }

    const int block_size = 16;
    g.max_blocks = (n_total + block_size - 1) / block_size;
    g.block_table = malloc((size_t)g.max_blocks * sizeof *g.block_table);
    logits = malloc((size_t)m->hp.n_vocab * sizeof *logits);
    if (!g.block_table || !logits) {
        pith_errf(err, "out of memory");
        goto done;
    }
    for (int i = 0; i < g.max_blocks; i++) g.block_table[i] = i;
    pith_dtype kv_type = o->batch.engine.kv_f32 ? PITH_F32 : PITH_F16;
    pith_mem_layout lay = {.block_size = block_size, .n_groups = m->mem.n_groups};
    for (int k = 0; k < lay.n_groups; k++) lay.n_blocks[k] = g.max_blocks, lay.type[k] = kv_type;
    pith_model_limits lim = {.max_batch_tokens = n_total, .max_num_seqs = 1, .max_seq_len = n_total, .max_logits = 1};
    if (pith_model_prepare(m, &lim, err) || pith_model_mem_alloc(m, &lay, err)) goto done;
    g.mem = true;
    if (pith_sampler_new(&o->sp, m->hp.n_vocab, &sampler, err)) goto done;
    if (o->logits_out && !(logits_file = fopen(o->logits_out, "wb"))) {
        pith_errf(err, "cannot write %s", o->logits_out);
        goto done;
    }

    double t0 = now_s();
    if (forward_span(&g, ids, 0, n_prompt, logits, err)) goto done;
    double t_prompt = now_s() - t0;

    pith_detok detok;
    pith_detok_init(&detok, tok, false);
    pith_detok_skip(&detok, ids, n_prompt);
    char text[1024];
    int n_gen = 0;
    double t1 = now_s();
    for (int pos = n_prompt; n_gen < o->n_predict && pos < n_total; n_gen++, pos++) {
        if (logits_file && fwrite(logits, sizeof *logits, (size_t)m->hp.n_vocab, logits_file) != (size_t)m->hp.n_vocab) {
            pith_errf(err, "writing %s failed", o->logits_out);
            goto done;
        }
        int32_t next = pith_sampler_sample(sampler, logits, ids, pos);
        ids[pos] = next;
        if (!o->ignore_eos && pith_tokenizer_is_eog(tok, next)) {
            n_gen++;
            break;
        }
        size_t len = pith_detok_push(&detok, next, text, sizeof text);
        fwrite(text, 1, len, stdout);
        fflush(stdout);
        if (n_gen + 1 < o->n_predict && pos + 1 < n_total && forward_span(&g, &ids[pos], pos, 1, logits, err))
            goto done;
    }
    size_t len = pith_detok_flush(&detok, text, sizeof text);
    fwrite(text, 1, len, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    double t_gen = now_s() - t1;
    fprintf(stderr, "pith: prompt %d tokens in %.3f s (%.1f tok/s), generated %d tokens in %.3f s (%.1f tok/s)\n",
            n_prompt, t_prompt, n_prompt / (t_prompt > 0 ? t_prompt : 1e-9), n_gen, t_gen,
            n_gen / (t_gen > 0 ? t_gen : 1e-9));
    rc = 0;
done:
    if (logits_file && fclose(logits_file) && rc == 0) rc = pith_errf(err, "writing %s failed", o->logits_out);
    pith_sampler_free(sampler);
    if (g.mem) pith_model_mem_free(m);
    free(g.block_table);
    free(logits);
    free(ids);
    return rc;
}

int pith_cmd_run(int argc, char **argv) {
    run_opts o;
    int pr = parse_run_args(argc, argv, &o);
    if (pr == 1) {
        run_usage(stdout);
        return 0;
    }
    if (pr < 0) return PITH_EXIT_USAGE;
    if (!o.model && !(o.model = cli_default_model())) {
        fprintf(stderr, "pith run: no model given (-m) and no default model installed next to the binary\n");
        return PITH_EXIT_USAGE;
    }

    if (o.chat && (o.batch.prompts_path || o.logits_out)) {
        fprintf(stderr, "pith run: --chat cannot be combined with -f or --logits-out\n");
        return PITH_EXIT_USAGE;
    }

    pith_err err = {{0}};
    pith_assets a;
    pith_assets_options ao = {
        .model_path = o.model, .tokenizer_path = o.tokenizer, .chat_template_path = o.chat_template,
        .n_threads = o.n_threads,
    };
    if (pith_assets_load(&ao, &a, &err)) {
        fprintf(stderr, "pith run: %s\n", err.msg);
        return 1;
    }
    int rc = 0;
    if (o.chat) {
        cli_chat_opts co = {
            .system_prompt = o.prompt, .bos_text = a.bos_text, .eos_text = a.eos_text, .sampling = o.sp,
            .n_predict = o.n_predict, .engine = o.batch.engine, .interactive = isatty(STDIN_FILENO),
        };
        rc = cli_chat(a.model, a.tok, a.chat, &co, stdin, stdout, &err);
    } else if (o.batch.prompts_path) {
        rc = pith_run_batch(a.model, a.tok, &o.batch, &o.sp, o.n_predict, o.ignore_eos, stdout, &err);
    } else {
        rc = generate(&o, a.model, a.tok, &err);
    }
    if (rc) fprintf(stderr, "pith run: %s\n", err.msg);
    pith_assets_free(&a);
    return rc ? 1 : 0;
}
