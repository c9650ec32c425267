/* Batch mode of `pith run` (see run_batch.h). */
#include "cli/run_batch.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"

typedef struct batch batch;

int run_batch_parse_arg(int argc, char **argv, int *i, run_batch_opts *o) {
    const char *a = argv[*i];
    if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
        const char *v = cli_value("run", argc, argv, i);
        if (!v) return -1;
        o->prompts_path = v;
        return 1;
    }
    if (!strcmp(a, "--jsonl")) {
        o->jsonl = true;
        return 1;
    }
    if (!strcmp(a, "--samples")) {
        const char *v = cli_value("run", argc, argv, i);
        long long n;
        if (!v || !cli_parse_int("run", a, v, 1, 1024, &n)) return -1;
        o->samples = (int)n;
        return 1;
    }
    return cli_engine_arg("run", argc, argv, i, &o->engine);
}

void run_batch_usage(FILE *out) {
    fprintf(out,
            "batch mode (all prompts at once, continuous batching):\n"
            "  -f, --file PATH           one prompt per line (not llama.cpp's -f: see --file-prompt); an\n"
            "                            empty line is not run: it is reported as an error result\n"
            "      --jsonl               one JSON object per prompt as each finishes (not in input order):\n"
            "                            index (0-based line), text, tokens, prompt_tokens, cached_tokens,\n"
            "                            finish_reason, and error for a prompt not run\n"
            "      --samples N           sample each prompt N times; the N share one prefill (the prompt\n"
            "                            is computed once); --jsonl adds \"sample\" (0-based), plain\n"
            "                            output writes N lines per prompt\n"
            "  Without --jsonl: one line per prompt (and sample) in input order, the text with\n"
            "  backslash, newline and carriage return written as \\\\, \\n and \\r.\n"
            "  Prompt i sample k draws with seed S + i * N + k, so equal lines still draw differently.\n"
            "engine (every mode: a single prompt, -f and --chat all run through the engine):\n");
    cli_engine_usage(out);
    fprintf(out, "  A single prompt runs with --max-num-seqs 1 unless told otherwise (a KV pool for one\n"
                 "  sequence); it stops early, saying so on stderr, when it reaches --max-seq-len.\n");
}

typedef struct result {
    int32_t *tokens;
    int n_tokens;
    int cap_tokens;
    char *text;
    size_t n_text;
    size_t cap_text;
    int n_prompt;
    pith_usage usage;
    pith_finish_reason why;
    char *error;
    bool done;
    bool oom;
    bool printed;
    int index;
    batch *b;
} result;

/* The batch: results, the indexes of those finished but not yet printed, and where printing stands. */
struct batch {
    result *res;
    int n_res;
    int *finished;
    int n_finished;
    FILE *out;
    const run_batch_opts *o;
    int next;          /* without --jsonl: the first result not yet printed (input order) */
    bool out_failed;   /* a write failed: the rest was cancelled */
    bool interrupted;  /* Ctrl-C or a failed write: what finishes after it is not written */
};

static void finish(result *r) {
    r->done = true;
    r->b->finished[r->b->n_finished++] = r->index;
}

static void on_token(const pith_token_event *ev, void *user) {
    result *r = (result *)user + ev->index; /* --samples: sibling k is the k-th result of its line */
    if (ev->text_len > 0) {
        if (r->n_text + ev->text_len + 1 > r->cap_text) {
            size_t cap = (r->cap_text ? r->cap_text * 2 : 256) + ev->text_len;
            char *t = realloc(r->text, cap);
            if (!t) {
                r->oom = true;
                return;
            }
            r->text = t;
            r->cap_text = cap;
        }
        memcpy(r->text + r->n_text, ev->text, ev->text_len);
        r->n_text += ev->text_len;
        r->text[r->n_text] = 0;
    }
    if (ev->final) {
        finish(r);
        r->why = ev->finish_reason;
        r->usage = ev->usage;
        if (ev->error[0]) r->error = strdup(ev->error);
        return;
    }
    if (r->n_tokens == r->cap_tokens) {
        int cap = r->cap_tokens ? r->cap_tokens * 2 : 64;
        int32_t *t = realloc(r->tokens, (size_t)cap * sizeof *t);
        if (!t) {
            r->oom = true;
            return;
        }
        r->tokens = t;
        r->cap_tokens = cap;
    }
    r->tokens[r->n_tokens++] = ev->token;
}

static void print_result(FILE *out, bool jsonl, int index, int sample, const result *r) {
    if (!jsonl) {
        for (size_t i = 0; i < r->n_text; i++) {
            char c = r->text[i];
            if (c == '\\') fputs("\\\\", out);
            else if (c == '\n') fputs("\\n", out);
            else if (c == '\r') fputs("\\r", out);
            else fputc(c, out);
        }
        fputc('\n', out);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", index);
    if (sample >= 0) cJSON_AddNumberToObject(o, "sample", sample);
    cJSON_AddStringToObject(o, "text", r->text ? r->text : "");
    cJSON *toks = cJSON_AddArrayToObject(o, "tokens");
    for (int i = 0; i < r->n_tokens; i++) cJSON_AddItemToArray(toks, cJSON_CreateNumber(r->tokens[i]));
    cJSON_AddNumberToObject(o, "prompt_tokens", r->n_prompt);
    cJSON_AddNumberToObject(o, "cached_tokens", r->usage.cached_tokens);
    cJSON_AddStringToObject(o, "finish_reason", pith_finish_reason_str(r->why));
    if (r->error) cJSON_AddStringToObject(o, "error", r->error);
    char *s = cJSON_PrintUnformatted(o);
    if (s) fprintf(out, "%s\n", s);
    cJSON_free(s);
    cJSON_Delete(o);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Prints what is ready: with --jsonl every finished result, otherwise the finished prefix in input order.
 * Returns false when writing failed. */
static bool flush_ready(batch *b) {
    const int ns = b->o->samples > 1 ? b->o->samples : 1;
    if (b->o->jsonl) {
        for (int k = 0; k < b->n_finished; k++) {
            result *r = &b->res[b->finished[k]];
            print_result(b->out, true, r->index / ns, ns > 1 ? r->index % ns : -1, r);
            r->printed = true;
        }
    } else {
        while (b->next < b->n_res && b->res[b->next].done) {
            print_result(b->out, false, b->next / ns, -1, &b->res[b->next]);
            b->res[b->next++].printed = true;
        }
    }
    b->n_finished = 0;
    return fflush(b->out) == 0 && !ferror(b->out);
}

/* The engine's check before each step (pith_engine_run_until): writes what finished since, and cancels
 * every prompt once a write fails (nobody reads the rest) or Ctrl-C comes. */
static pith_run_action before_step(void *user) {
    batch *b = user;
    if (b->interrupted) return PITH_RUN_CONTINUE; /* cancelled: nothing more is written */
    if (!flush_ready(b)) {
        b->out_failed = b->interrupted = true;
        return PITH_RUN_CANCEL;
    }
    if (cli_interrupted()) {
        b->interrupted = true;
        return PITH_RUN_CANCEL;
    }
    return PITH_RUN_CONTINUE;
}

int pith_run_batch(pith_model *m, const pith_tokenizer *tok, const run_batch_opts *o,
                   const pith_sampling_params *sp, int n_predict, bool ignore_eos, FILE *out, pith_err *err) {
    char *data = NULL;
    size_t len = 0;
    if (cli_read_file(o->prompts_path, &data, &len, err)) return -1;
    /* Split into lines in place; a final newline does not start another prompt. */
    int n_lines = 0;
    for (size_t i = 0; i < len; i++) n_lines += data[i] == '\n';
    if (len > 0 && data[len - 1] != '\n') n_lines++;
    const int ns = o->samples > 1 ? o->samples : 1, n_res = n_lines * ns;
    char **lines = calloc((size_t)n_lines + 1, sizeof *lines);
    batch b = {.res = calloc((size_t)n_res + 1, sizeof *b.res), .n_res = n_res,
               .finished = calloc((size_t)n_res + 1, sizeof *b.finished), .out = out, .o = o};
    result *res = b.res;
    pith_engine *e = NULL;
    int rc = -1;
    if (!lines || !res || !b.finished) {
        pith_errf(err, "out of memory");
        goto done;
    }
    for (int i = 0, at = 0; i < n_lines; i++) {
        lines[i] = data + at;
        char *nl = memchr(data + at, '\n', len - (size_t)at);
        size_t end = nl ? (size_t)(nl - data) : len;
        data[end] = 0;
        if (end > (size_t)at && data[end - 1] == '\r') data[end - 1] = 0;
        at = (int)end + 1;
    }
    for (int k = 0; k < n_res; k++) {
        res[k].index = k;
        res[k].b = &b;
    }
    if (pith_engine_create(m, tok, &o->engine, &e, err)) goto done;

    double t0 = now_s();
    int n_rejected = 0;
    for (int i = 0; i < n_lines; i++) {
        result *r = &res[i * ns]; /* and its other samples after it */
        if (!lines[i][0]) { /* not run: BOS alone is rarely what an empty line meant */
            for (int k = 0; k < ns; k++) {
                r[k].why = PITH_FINISH_ERROR;
                r[k].error = strdup("empty line: not run");
                finish(&r[k]);
            }
            n_rejected++;
            fprintf(stderr, "pith run: %s line %d is empty: not run (reported as an error result)\n",
                    o->prompts_path, i + 1);
            continue;
        }
        int32_t *ids;
        if (pith_tokenizer_encode(tok, lines[i], strlen(lines[i]), PITH_TOK_ADD_BOS | PITH_TOK_PARSE_SPECIAL,
                                  &ids, &r->n_prompt, err)) {
            pith_err_prefix(err, "%s line %d", o->prompts_path, i + 1);
            goto done;
        }
        pith_request q = {
            .prompt = ids, .n_prompt = r->n_prompt, .sampling = *sp, .max_tokens = n_predict < 0 ? 0 : n_predict,
            .ignore_eos = ignore_eos, .on_token = on_token, .user = r, .n = ns,
        };
        q.sampling.seed = sp->seed + (uint64_t)i * (uint64_t)ns;
        for (int k = 1; k < ns; k++) r[k].n_prompt = r->n_prompt;
        pith_err why;
        if (n_predict == 0) { /* nothing to generate: the engine's 0 would mean "no limit" */
            for (int k = 0; k < ns; k++) {
                r[k].why = PITH_FINISH_LENGTH;
                finish(&r[k]);
            }
        } else if (pith_engine_submit(e, &q, NULL, &why)) {
            for (int k = 0; k < ns; k++) {
                r[k].why = PITH_FINISH_ERROR;
                r[k].error = strdup(why.msg);
                finish(&r[k]);
            }
            n_rejected++;
        }
        free(ids);
    }
    pith_err step_err = {{0}};
    int run_rc = pith_engine_run_until(e, before_step, &b, &step_err);
    if (!b.interrupted && !flush_ready(&b)) b.out_failed = true; /* what the last step finished */
    double dt = now_s() - t0;
    if (b.out_failed) {
        pith_errf(err, "writing the output failed");
        goto done;
    }

    uint64_t generated = 0;
    int n_written = 0, n_full = 0;
    for (int i = 0; i < n_res; i++) {
        if (res[i].oom) {
            pith_errf(err, "out of memory collecting the output of line %d", i / ns + 1);
            goto done;
        }
        generated += (uint64_t)res[i].n_tokens;
        n_written += res[i].printed;
        if (res[i].why == PITH_FINISH_LENGTH && n_predict != 0 && (n_predict < 0 || res[i].n_tokens < n_predict)) {
            if (n_full++ < 8)
                fprintf(stderr, "pith run: %s line %d stopped after %d tokens: the context is full (%d tokens, "
                        "prompt and output; see -c/--max-seq-len, --kv-blocks, --kv-mem)\n", o->prompts_path, i / ns + 1,
                        res[i].n_tokens, pith_engine_max_seq_len(e));
        }
    }
    if (n_full > 8) fprintf(stderr, "pith run: %d prompts in all stopped because the context was full\n", n_full);
    if (b.interrupted)
        fprintf(stderr, "pith run: interrupted: %d of %d results written%s\n", n_written, n_res,
                o->jsonl ? "" : " (the finished ones in input order up to the first unfinished)");
    pith_engine_stats st;
    pith_engine_get_stats(e, &st);
    fprintf(stderr,
            "pith: %d prompts (%d rejected), %llu prompt tokens, %llu generated in %.3f s (%.1f tok/s); "
            "%llu steps, %llu preemptions, prefix cache %llu of %llu tokens; KV %d blocks of %d; "
            "%llu tokens computed, %llu forked samples; %llu of %llu draft tokens accepted\n",
            n_lines, n_rejected, (unsigned long long)st.prompt_tokens, (unsigned long long)generated, dt,
            (double)generated / (dt > 0 ? dt : 1e-9), (unsigned long long)st.steps,
            (unsigned long long)st.preemptions, (unsigned long long)st.prefix_cache_hits,
            (unsigned long long)st.prefix_cache_queries, st.kv_blocks_total, st.block_size,
            (unsigned long long)st.computed_tokens, (unsigned long long)st.forked_sequences,
            (unsigned long long)st.spec_accepted_tokens, (unsigned long long)st.spec_draft_tokens);
    rc = b.interrupted ? 130 : 0;
    if (run_rc) rc = pith_errf(err, "the model failed: %s", step_err.msg);
done:
    pith_engine_free(e);
    for (int i = 0; res && i < n_res; i++) {
        free(res[i].tokens);
        free(res[i].text);
        free(res[i].error);
    }
    free(res);
    free(b.finished);
    free(lines);
    free(data);
    return rc;
}
