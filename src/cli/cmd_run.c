/* `pith run`: load a model, encode the prompt, generate through the engine (one request) and stream the
 * text; -f (run_batch.c) and --chat (chat.c) drive the same engine with many requests. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/chat.h"
#include "cli/cli.h"
#include "cli/images.h"
#include "cli/progress.h"
#include "cli/run_batch.h"
#include "pith/assets.h"
#include "pith/dist.h"
#include "pith/engine.h"
#include "pith/model.h"
#include "pith/sampler.h"
#include "pith/tokenizer.h"

typedef struct run_opts {
    const char *model;
    const char *tokenizer;
    const char *prompt;
    const char *prompt_file;   /* --file-prompt */
    char *prompt_buf;          /* its contents */
    bool prompt_given;
    const char *logits_out;
    const char *chat_template;
    bool chat;
    const char *mmproj;        /* --mmproj: the vision projector */
    const char *images[CLI_MAX_IMAGES]; /* --image, in order */
    int n_images;
    int image_max_tokens;      /* --image-max-tokens (0: the processor's budget) */
    int n_predict;
    int n_threads;
    const char *device;
    const char *gpu_layers;    /* -ngl */
    int n_cpu_moe;             /* --n-cpu-moe; -1: --cpu-moe */
    int tp, pp;                /* --tp, --pp */
    bool no_ep;                /* --no-ep */
    bool ignore_eos;
    bool seed_given;
    pith_sampling_params sp;
    const char *breakers[64];  /* --dry-sequence-breaker, in order (the first one clears the defaults) */
    int n_breakers;
    bool breakers_given;
    run_batch_opts batch;   /* -f: many prompts through the engine (run_batch.h) */
} run_opts;

static void run_usage(FILE *out) {
    fprintf(out,
            "usage: pith run [-m MODEL] [options]\n"
            "\n"
            "Generates text from a prompt and streams it (not the prompt) to stdout; a timing line goes to\n"
            "stderr.\n"
            "\n"
            "  -m, --model PATH        GGUF file, Hugging Face directory or llama2.c .bin (default:\n"
            "                          $PITH_DEFAULT_MODEL, else pith-default.gguf next to the binary\n"
            "                          or in ../share/pith)\n"
            "      --tokenizer PATH    tokenizer file (llama2.c tokenizer.bin or GGUF); needed for llama2.c\n"
            "                          checkpoints, optional otherwise\n"
            "  -p, --prompt TEXT       prompt (default \"\": the BOS token alone); with --chat, the\n"
            "                          system prompt\n"
            "      --file-prompt FILE  read the prompt from FILE, newlines and all (llama.cpp's -f; here\n"
            "                          -f is the batch file of one prompt per line)\n"
            "      --chat              interactive chat: each line of stdin is a user turn, rendered with\n"
            "                          the model's chat template (ChatML when it has none)\n"
            "      --mmproj FILE       the model's vision projector (llama.cpp's mmproj GGUF, or a Hugging\n"
            "                          Face directory with the vision tower: Gemma 3, Qwen3.5); a model\n"
            "                          directory with its vision tower needs none\n"
            "      --image FILE        a JPEG, PNG or WebP image for the prompt (repeatable, up to 16);\n"
            "                          the prompt's image markers (Gemma 3: <start_of_image>; Qwen3.5:\n"
            "                          <|vision_start|><|image_pad|><|vision_end|>) place them, else they come\n"
            "                          first (docs/multimodal.md); in --chat, a line \"/image FILE\"\n"
            "                          attaches one to the next message\n"
            "      --image-max-tokens N  each image's tokens at most, for models whose images take any size\n"
            "                          (Qwen3.5, Qwen3-VL): larger ones are resized to fit (default %d;\n"
            "                          0: the model's processor's own budget, Qwen3-VL's up to 16384)\n"
            "      --chat-template FILE   a Jinja chat template to use instead of the model's\n"
            "  -n, --n-predict N       tokens to generate (default 256; stops earlier at EOS); -1: until\n"
            "                          EOS or the context is full\n"
            "  -t, --threads N         worker threads (default: all online CPUs)\n"
            "  -dev, --device DEV      where the model runs: cpu, vulkan (the first usable Vulkan device)\n"
            "                          or vulkan:N ('pith devices' lists them; default: $PITH_DEVICE, else cpu)\n"
            "  -ngl, --gpu-layers N    with a device: the last N layers on it, the rest on the CPU (0: the CPU\n"
            "                          alone; auto, the default: as many as its memory holds)\n"
            "      --cpu-moe           with a device: every MoE layer's experts on the CPU\n"
            "      --n-cpu-moe N       with a device: the experts of the first N layers on the CPU\n"
            "%s"
            "      --temp T            temperature, 0 = greedy (default 0.8)\n"
            "      --top-k K           keep the K most likely tokens, 0 or -1 = off (default 40)\n"
            "      --top-p P           nucleus sampling, 1 = off (default 0.95)\n"
            "      --min-p P           drop tokens below P * p(best), 0 = off (default 0.05)\n"
            "      --repeat-penalty R  repetition penalty over prompt and output, 1 = off (default 1)\n"
            "      --presence-penalty F   OpenAI-style presence penalty (default 0)\n"
            "      --frequency-penalty F  OpenAI-style frequency penalty (default 0)\n"
            "      --dry-multiplier M  DRY: penalise a token that would extend a sequence repeated from\n"
            "                          earlier by M * base^(length - allowed length); 0 = off (default 0)\n"
            "      --dry-base B        DRY exponent base, >= 1 (default 1.75)\n"
            "      --dry-allowed-length N  DRY: repeats up to N tokens are free (default 2)\n"
            "      --dry-penalty-last-n N  DRY looks at the last N tokens; -1 = the whole context,\n"
            "                          0 = off (default -1)\n"
            "      --dry-sequence-breaker S  a string repeats do not reach back across; repeatable, the\n"
            "                          first one replaces the defaults (\\n : \" *); \"none\" = no breakers.\n"
            "                          Taken as is: a newline is $'\\n' in bash\n"
            "      --xtc-probability P XTC: with probability P drop every token above the threshold but\n"
            "                          the least likely of them; 0 = off (default 0)\n"
            "      --xtc-threshold T   XTC threshold; above 0.5 = off (default 0.1)\n"
            "      --typical P         locally typical sampling, 1 = off (default 1)\n"
            "      --top-nsigma N      keep tokens with logit >= max - N * stddev of the logits;\n"
            "                          <= 0 = off (default -1)\n"
            "                          Order: penalties, DRY, then (unless --temp 0: greedy) top-n-sigma,\n"
            "                          top-k, temperature, typical, top-p, min-p, XTC, the draw\n"
            "  -s, --seed S            random seed, -1 = from the clock (the default); same seed, same\n"
            "                          text\n"
            "      --ignore-eos        do not stop at EOS: generate exactly -n tokens\n"
            "      --logits-out FILE   write, for each generated token, the logits row it was chosen\n"
            "                          from: little-endian float32 [n_generated, n_vocab]\n"
            "  -h, --help              show this help\n"
            "\n"
            "Ctrl-C stops generation: what was generated so far and the timing line are still printed\n"
            "(with -f, the results already finished; with --chat, the reply so far, and the chat ends);\n"
            "a second Ctrl-C exits at once. Exit status 130.\n"
            "Long options that take a value also take the form --option=value.\n"
            "\n", PITH_VISION_DEFAULT_MAX_TOKENS, cli_tp_help(false));
    run_batch_usage(out);
}

/* Returns 0 to continue, 1 for --help, -1 on a usage error (message printed). */
static int parse_run_args(int argc, char **argv, run_opts *o) {
    memset(o, 0, sizeof *o);
    o->prompt = "";
    o->n_predict = 256;
    o->sp = pith_sampling_defaults();
    o->image_max_tokens = PITH_VISION_DEFAULT_MAX_TOKENS;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v;
        long long iv;
        double fv;
#define VALUE() do { if (!(v = cli_value("run", argc, argv, &i))) return -1; } while (0)
        int tp_rc = cli_tp_arg("run", argc, argv, &i, &o->tp, &o->pp, &o->no_ep);
        if (tp_rc < 0) return -1;
        if (tp_rc > 0) {
            continue;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            return 1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            VALUE(); o->model = v;
        } else if (!strcmp(a, "--tokenizer")) {
            VALUE(); o->tokenizer = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            VALUE(); o->prompt = v;
            o->prompt_given = true;
        } else if (!strcmp(a, "--file-prompt")) {
            VALUE(); o->prompt_file = v;
        } else if (!strcmp(a, "--chat")) {
            o->chat = true;
        } else if (!strcmp(a, "--chat-template")) {
            VALUE(); o->chat_template = v;
        } else if (!strcmp(a, "--mmproj")) {
            VALUE(); o->mmproj = v;
        } else if (!strcmp(a, "--image")) {
            VALUE();
            if (o->n_images == CLI_MAX_IMAGES) {
                fprintf(stderr, "pith run: at most %d --image\n", CLI_MAX_IMAGES);
                return -1;
            }
            o->images[o->n_images++] = v;
        } else if (!strcmp(a, "--image-max-tokens")) {
            VALUE(); if (!cli_parse_int("run", a, v, 0, 1 << 20, &iv)) return -1;
            o->image_max_tokens = (int)iv;
        } else if (!strcmp(a, "--logits-out")) {
            VALUE(); o->logits_out = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            VALUE(); if (!cli_parse_int("run", a, v, -1, 1 << 24, &iv)) return -1;
            o->n_predict = (int)iv;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            VALUE(); if (!cli_parse_int("run", a, v, 1, 1024, &iv)) return -1;
            o->n_threads = (int)iv;
        } else if (!strcmp(a, "-ngl") || !strcmp(a, "--gpu-layers") || !strcmp(a, "--n-gpu-layers")) {
            VALUE(); if (!cli_parse_gpu_layers("run", a, v)) return -1;
            o->gpu_layers = v;
        } else if (!strcmp(a, "--cpu-moe")) {
            o->n_cpu_moe = -1;
        } else if (!strcmp(a, "--n-cpu-moe") || !strcmp(a, "-ncmoe")) {
            VALUE(); if (!cli_parse_int("run", a, v, 0, 100000, &iv)) return -1;
            o->n_cpu_moe = (int)iv;
        } else if (!strcmp(a, "-dev") || !strcmp(a, "--device")) {
            VALUE(); if (!cli_parse_device("run", a, v)) return -1;
            o->device = v;
        } else if (!strcmp(a, "--temp")) {
            VALUE(); if (!cli_parse_float("run", a, v, 0, 100, &fv)) return -1;
            o->sp.temperature = (float)fv;
        } else if (!strcmp(a, "--top-k")) {
            VALUE(); if (!cli_parse_int("run", a, v, -1, 1 << 30, &iv)) return -1;
            o->sp.top_k = iv < 0 ? 0 : (int)iv;
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
        } else if (!strcmp(a, "--dry-multiplier")) {
            VALUE(); if (!cli_parse_float("run", a, v, 0, 100, &fv)) return -1;
            o->sp.dry_multiplier = (float)fv;
        } else if (!strcmp(a, "--dry-base")) {
            VALUE(); if (!cli_parse_float("run", a, v, 1, 100, &fv)) return -1;
            o->sp.dry_base = (float)fv;
        } else if (!strcmp(a, "--dry-allowed-length")) {
            VALUE(); if (!cli_parse_int("run", a, v, 0, 1 << 30, &iv)) return -1;
            o->sp.dry_allowed_length = (int)iv;
        } else if (!strcmp(a, "--dry-penalty-last-n")) {
            VALUE(); if (!cli_parse_int("run", a, v, -1, 1 << 30, &iv)) return -1;
            o->sp.dry_penalty_last_n = (int)iv;
        } else if (!strcmp(a, "--dry-sequence-breaker")) {
            VALUE();
            o->breakers_given = true;
            if (!strcmp(v, "none")) {
                o->n_breakers = 0;
            } else if (!v[0] || o->n_breakers == (int)(sizeof o->breakers / sizeof *o->breakers)) {
                fprintf(stderr, "pith run: %s: %s\n", a, v[0] ? "too many breakers" : "an empty breaker");
                return -1;
            } else {
                o->breakers[o->n_breakers++] = v;
            }
        } else if (!strcmp(a, "--xtc-probability")) {
            VALUE(); if (!cli_parse_float("run", a, v, 0, 1, &fv)) return -1;
            o->sp.xtc_probability = (float)fv;
        } else if (!strcmp(a, "--xtc-threshold")) {
            VALUE(); if (!cli_parse_float("run", a, v, 0, 1, &fv)) return -1;
            o->sp.xtc_threshold = (float)fv;
        } else if (!strcmp(a, "--typical")) {
            VALUE(); if (!cli_parse_float("run", a, v, 1e-9, 1, &fv)) return -1;
            o->sp.typical_p = (float)fv;
        } else if (!strcmp(a, "--top-nsigma")) {
            VALUE(); if (!cli_parse_float("run", a, v, -1, 100, &fv)) return -1;
            o->sp.top_n_sigma = (float)fv;
        } else if (!strcmp(a, "-s") || !strcmp(a, "--seed")) {
            VALUE(); if (!cli_parse_int("run", a, v, -1, INT64_MAX, &iv)) return -1;
            o->sp.seed = (uint64_t)iv;
            o->seed_given = iv >= 0;
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
    pith_err err;
    if (o->breakers_given && pith_sampling_set_dry_breakers(&o->sp, o->breakers, o->n_breakers, &err)) {
        fprintf(stderr, "pith run: --dry-sequence-breaker: %s\n", err.msg);
        return -1;
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

/* What the callback of the one request sees and does: streams text to stdout, writes logits rows. */
typedef struct run_stream {
    pith_engine *e;
    FILE *logits_file;
    size_t n_vocab;
    int limit;               /* tokens to show: -n (the engine runs one more for -n 0, see generate) */
    int n_tokens;            /* token events so far */
    double t_first, t_final;
    bool done, write_failed, out_failed;
    pith_finish_reason why;
    pith_usage usage;
    char error[256];
} run_stream;

static void on_run_token(const pith_token_event *ev, void *user) {
    run_stream *s = user;
    double t = now_s();
    if (!ev->final) {
        if (s->n_tokens++ == 0) s->t_first = t;
        if (s->n_tokens > s->limit) return;
        if (s->logits_file && !s->write_failed &&
            (!ev->logits || fwrite(ev->logits, sizeof *ev->logits, s->n_vocab, s->logits_file) != s->n_vocab)) {
            s->write_failed = true;
            pith_engine_cancel(s->e, ev->request_id);
        }
    } else {
        s->t_final = t;
        s->done = true;
        s->why = ev->finish_reason;
        s->usage = ev->usage;
        snprintf(s->error, sizeof s->error, "%s", ev->error);
        if (s->limit == 0) return; /* -n 0: nothing generated, nothing to release */
    }
    if (ev->text_len > 0 && !s->out_failed &&
        (fwrite(ev->text, 1, ev->text_len, stdout) != ev->text_len || fflush(stdout))) {
        s->out_failed = true; /* stdout is gone (a full disk, a closed pipe): stop generating */
        if (!ev->final) pith_engine_cancel(s->e, ev->request_id);
    }
}

/* One prompt through an engine made with the command's engine options: submit, run until the final
 * event (Ctrl-C cancels it), stream the text as it comes. */
static int generate(const run_opts *o, pith_model *m, pith_tokenizer *tok, pith_err *err) {
    int32_t *ids = NULL;
    int n_prompt = 0;
    int flags = PITH_TOK_ADD_BOS | PITH_TOK_PARSE_SPECIAL;
    cli_images ci = {0};
    if (o->n_images > 0) {
        if (cli_images_open(&ci, o->mmproj, o->images, o->n_images, o->n_threads, o->image_max_tokens, err)) return -1;
        if (cli_images_prompt(&ci, tok, o->prompt, &ids, &n_prompt, err)) {
            cli_images_free(&ci);
            return -1;
        }
    } else if (pith_tokenizer_encode(tok, o->prompt, strlen(o->prompt), flags, &ids, &n_prompt, err)) {
        return -1;
    }
    if (n_prompt == 0) {
        free(ids);
        return pith_errf(err, "the prompt encodes to no tokens and the tokenizer has no BOS token");
    }
    pith_engine_options eo = o->batch.engine;
    if (ci.n > 0) eo.encoder = &ci.enc;
    if (eo.max_num_seqs == 0) eo.max_num_seqs = 1; /* one sequence: a pool for one, unless told otherwise */
    run_stream s = {.limit = o->n_predict < 0 ? INT_MAX : o->n_predict};
    int rc = -1;
    if (pith_engine_create(m, tok, &eo, &s.e, err)) goto done;
    s.n_vocab = (size_t)pith_engine_n_vocab(s.e);
    if (o->logits_out && !(s.logits_file = fopen(o->logits_out, "wb"))) {
        pith_errf(err, "cannot write %s", o->logits_out);
        goto done;
    }
    pith_request q = {
        .prompt = ids, .n_prompt = n_prompt, .sampling = o->sp,
        /* -n 0 still runs the prompt (and times it) and drops the one token the engine then samples:
         * max_tokens 0 would mean "up to the length limit". */
        .max_tokens = o->n_predict > 0 ? o->n_predict : o->n_predict < 0 ? 0 : 1,
        .ignore_eos = o->ignore_eos, .return_logits = s.logits_file != NULL,
        .on_token = on_run_token, .user = &s, .media = ci.media, .n_media = ci.n,
    };
    double t0 = now_s();
    if (pith_engine_submit(s.e, &q, NULL, err)) goto done;
    pith_err run_err = {{0}};
    bool interrupted = false;
    int run_rc = pith_engine_run_until(s.e, cli_run_check, &interrupted, &run_err);
    if (!s.out_failed && (fputc('\n', stdout) == EOF || fflush(stdout))) s.out_failed = true;
    if (s.out_failed) {
        pith_errf(err, "writing the output failed (stdout)");
        goto done;
    }
    if (s.write_failed) {
        pith_errf(err, "writing %s failed", o->logits_out);
        goto done;
    }
    if (!s.done || s.why == PITH_FINISH_ERROR || (s.why == PITH_FINISH_CANCELLED && !interrupted) || run_rc) {
        pith_errf(err, "the model failed: %s", s.error[0] ? s.error : run_rc ? run_err.msg : "no final event");
        goto done;
    }
    int n_gen = o->n_predict != 0 ? s.usage.completion_tokens : 0;
    if (interrupted) {
        n_gen = s.n_tokens < s.limit ? s.n_tokens : s.limit;
        fprintf(stderr, "pith run: interrupted after %d tokens\n", n_gen);
    } else if (s.why == PITH_FINISH_LENGTH && (n_gen < o->n_predict || o->n_predict < 0)) {
        if (o->n_predict < 0)
            fprintf(stderr, "pith run: stopped after %d tokens: the context is full", n_gen);
        else
            fprintf(stderr, "pith run: stopped after %d of %d tokens: the context is full", n_gen, o->n_predict);
        fprintf(stderr, " (%d tokens, prompt and output; see -c/--max-seq-len, --kv-blocks, --kv-mem)\n",
                pith_engine_max_seq_len(s.e));
    }
    double t_prompt = (s.n_tokens > 0 ? s.t_first : s.t_final) - t0;
    double t_gen = n_gen > 0 ? s.t_final - s.t_first : 0;
    fprintf(stderr, "pith: prompt %d tokens in %.3f s (%.1f tok/s), generated %d tokens in %.3f s (%.1f tok/s)\n",
            n_prompt, t_prompt, n_prompt / (t_prompt > 0 ? t_prompt : 1e-9), n_gen, t_gen,
            n_gen / (t_gen > 0 ? t_gen : 1e-9));
    rc = interrupted ? 130 : 0;
done:
    pith_engine_free(s.e);
    cli_images_free(&ci);
    if (s.logits_file && fclose(s.logits_file) && rc == 0) rc = pith_errf(err, "writing %s failed", o->logits_out);
    free(ids);
    return rc;
}

int pith_cmd_run(int argc, char **argv) {
    run_opts o;
    int pr = parse_run_args(argc, argv, &o);
    o.batch.engine.draft_threads = o.n_threads; /* a draft model runs with the target's threads */
    o.batch.engine.draft_device = o.device;     /* and on its device */
    if (pr == 1) {
        run_usage(stdout);
        return 0;
    }
    if (pr < 0) return PITH_EXIT_USAGE;
    if (!o.model && !(o.model = cli_default_model())) {
        cli_no_default_model("run");
        return PITH_EXIT_USAGE;
    }

    if (o.chat && (o.batch.prompts_path || o.logits_out)) {
        fprintf(stderr, "pith run: --chat cannot be combined with -f or --logits-out\n");
        return PITH_EXIT_USAGE;
    }
    if (o.n_images > 0 && (o.chat || o.batch.prompts_path || o.tp > 1 || o.pp > 1)) {
        fprintf(stderr, "pith run: --image is for a single prompt (-p), in one process (in --chat: /image FILE)\n");
        return PITH_EXIT_USAGE;
    }
    if (o.n_images > 0 || o.chat) o.mmproj = cli_images_projector(o.mmproj, o.model);
    if (o.mmproj && o.n_images == 0 && !o.chat) {
        fprintf(stderr, "pith run: --mmproj without --image (or --chat's /image): nothing to encode\n");
        return PITH_EXIT_USAGE;
    }
    if (o.batch.prompts_path && o.logits_out) {
        fprintf(stderr, "pith run: --logits-out is for a single prompt, not -f\n");
        return PITH_EXIT_USAGE;
    }
    if (o.batch.prompts_path && (o.prompt_given || o.prompt_file)) {
        fprintf(stderr, "pith run: -p and --file-prompt give one prompt, -f a file of prompts: use one of them\n");
        return PITH_EXIT_USAGE;
    }
    if (o.prompt_given && o.prompt_file) {
        fprintf(stderr, "pith run: -p and --file-prompt both give the prompt: use one of them\n");
        return PITH_EXIT_USAGE;
    }
    if (o.batch.jsonl && !o.batch.prompts_path) {
        fprintf(stderr, "pith run: --jsonl needs -f (batch mode)\n");
        return PITH_EXIT_USAGE;
    }

    pith_comm *comm;
    if (!cli_dist_begin("run", o.tp, o.pp, &comm)) return 1;
    pith_err err = {{0}};
    if (o.prompt_file) {
        size_t len;
        if (cli_read_file(o.prompt_file, &o.prompt_buf, &len, &err)) {
            fprintf(stderr, "pith run: %s\n", err.msg);
            return cli_dist_end(comm, 1);
        }
        if (strlen(o.prompt_buf) != len) {
            fprintf(stderr, "pith run: %s holds a NUL byte\n", o.prompt_file);
            free(o.prompt_buf);
            return cli_dist_end(comm, 1);
        }
        o.prompt = o.prompt_buf;
    }
    pith_assets a;
    cli_progress bar;
    cli_progress_start(&bar, "loading model");
    pith_assets_options ao = {
        .model_path = o.model, .tokenizer_path = o.tokenizer, .chat_template_path = o.chat_template,
        .n_threads = o.n_threads, .device = o.device, .gpu_layers = o.gpu_layers, .n_cpu_moe = o.n_cpu_moe,
        .mtp = o.batch.engine.spec_type == PITH_SPEC_MTP, .progress = cli_progress_update,
        .progress_user = &bar, .comm = comm, .tp = o.tp, .pp = o.pp, .no_ep = o.no_ep,
    };
    if (pith_comm_rank(comm) != 0) {
        cli_progress_end(&bar);
        free(o.prompt_buf);
        pith_model_options mo = {.n_threads = ao.n_threads, .device = ao.device, .gpu_layers = ao.gpu_layers,
                                 .n_cpu_moe = ao.n_cpu_moe, .mtp = ao.mtp, .comm = comm, .tp = o.tp,
                                 .pp = o.pp, .no_ep = o.no_ep};
        return cli_dist_worker("run", comm, o.model, &mo);
    }
    int load_rc = pith_assets_load(&ao, &a, &err);
    cli_progress_end(&bar);
    if (load_rc) {
        fprintf(stderr, "pith run: %s\n", err.msg);
        free(o.prompt_buf);
        return cli_dist_end(comm, 1);
    }
    if (a.model->placement[0]) fprintf(stderr, "pith run: offload: %s\n", a.model->placement);
    if (a.model->experts[0]) fprintf(stderr, "pith run: experts %s\n", a.model->experts);
    cli_sigint_install();
    int rc = 0;
    if (o.chat) {
        cli_chat_opts co = {
            .system_prompt = o.prompt, .bos_text = a.bos_text, .eos_text = a.eos_text, .sampling = o.sp,
            .n_predict = o.n_predict, .engine = o.batch.engine, .interactive = isatty(STDIN_FILENO),
            .mmproj = o.mmproj, .n_threads = o.n_threads, .image_max_tokens = o.image_max_tokens,
        };
        rc = cli_chat(a.model, a.tok, a.chat, &co, stdin, stdout, &err);
    } else if (o.batch.prompts_path) {
        rc = pith_run_batch(a.model, a.tok, &o.batch, &o.sp, o.n_predict, o.ignore_eos, stdout, &err);
    } else {
        rc = generate(&o, a.model, a.tok, &err);
    }
    if (rc && rc != 130) fprintf(stderr, "pith run: %s\n", err.msg);
    pith_assets_free(&a);
    free(o.prompt_buf);
    return cli_dist_end(comm, rc == 130 ? 130 : rc ? 1 : 0);
}
