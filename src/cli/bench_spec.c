/* `pith bench`'s speculative mode (bench_spec.h). Each prompt runs in a fresh engine (no prefix cache
 * carried from one run to the next) at batch 1, greedy; the decode speed is timed from the first token
 * event to the last, so the prompt's prefill, the same in both modes, is left out. */
#include "cli/bench_spec.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/progress.h"
#include "pith/assets.h"
#include "pith/bench.h"

#define BW_PASSES 10

typedef struct run_out {
    int32_t *toks;
    int n, cap;
    double t_first, t_last;
} run_out;

static void on_token(const pith_token_event *ev, void *user) {
    run_out *r = user;
    if (ev->final || r->n >= r->cap) return;
    double t = pith_bench_now();
    if (r->n == 0) r->t_first = t;
    r->t_last = t;
    r->toks[r->n++] = ev->token;
}

/* One greedy run of the prompt in a fresh engine; fills out and the engine's stats. */
static int run_once(pith_model *m, const pith_tokenizer *tok, const pith_engine_options *eo, const int32_t *prompt,
                    int n_prompt, int n_gen, run_out *out, pith_engine_stats *st, pith_err *err) {
    pith_engine *e = NULL;
    if (pith_engine_create(m, tok, eo, &e, err)) return -1;
    out->n = 0;
    pith_request r = {.prompt = prompt, .n_prompt = n_prompt, .sampling = pith_sampling_defaults(), .max_tokens = n_gen,
                      .ignore_eos = true, .on_token = on_token, .user = out};
    r.sampling.temperature = 0;
    int rc = pith_engine_submit(e, &r, NULL, err);
    if (!rc) rc = pith_engine_run(e, err);
    pith_engine_get_stats(e, st);
    pith_engine_free(e);
    if (!rc && out->n != n_gen)
        rc = pith_errf(err, "a run generated %d tokens, not %d", out->n, n_gen);
    return rc;
}

typedef struct prompt_result {
    int n_prompt;
    double tps[2];           /* decode tokens per second: [0] plain, [1] speculative (mean over reps) */
    double stddev[2];
    double cpu[2];           /* CPU time / (wall x threads) */
    double passes[2];        /* forward passes of the target per generated token (prefill included) */
    uint64_t drafted, accepted;
} prompt_result;

typedef struct spec_ctx {
    const bench_spec_opts *o;
    pith_hparams hp, dhp;
    pith_bench_weights w, dw;
    long long probe_mib;
    const char *isa;
    float mtp_cost;   /* PITH_SPEC_MTP: a draft step's weight bytes over a decode step's */
} spec_ctx;

static const char *spec_name(pith_spec_type t) {
    return t == PITH_SPEC_DRAFT ? "draft model" : t == PITH_SPEC_MTP ? "the model's MTP head" : "ngram (prompt lookup)";
}

static void print_header(const spec_ctx *c, int threads, double bw0, double bw1) {
    const bench_spec_opts *o = c->o;
    printf("model: %s (%s)\n", o->model, c->hp.arch);
    printf("shape: dim %d, layers %d, heads %d, kv heads %d, head dim %d, ffn %d, vocab %d\n", c->hp.dim,
           c->hp.n_layers, c->hp.n_heads, c->hp.n_kv_heads, c->hp.head_dim, c->hp.ffn_dim, c->hp.n_vocab);
    printf("weights: %s; %.1f MiB read per generated token\n", c->w.format, (double)c->w.size_bytes / (1 << 20));
    if (o->spec_type == PITH_SPEC_DRAFT)
        printf("draft model: %s (%s): dim %d, layers %d, heads %d, ffn %d; %s, %.1f MiB per token\n", o->draft_model,
               c->dhp.arch, c->dhp.dim, c->dhp.n_layers, c->dhp.n_heads, c->dhp.ffn_dim, c->dw.format,
               (double)c->dw.size_bytes / (1 << 20));
    if (o->spec_type == PITH_SPEC_MTP)
        printf("MTP head: a draft step reads %.2f of a decode step's weight bytes (drafting backs off under %.0f %% "
               "acceptance)\n", c->mtp_cost, 100.0 * pith_spec_backoff_rate(c->mtp_cost));
    printf("speculation: %s, up to %d draft tokens; batch 1, greedy, %d generated tokens per prompt, EOS ignored, "
           "%d repetition%s each way, alternating\n", spec_name(o->spec_type),
           o->spec_max_draft ? o->spec_max_draft : 8, o->n_gen, o->reps, o->reps == 1 ? "" : "s");
    printf("probes: kernels %s; bandwidth = best of %d passes over %lld MiB: %.1f GB/s before, %.1f after; "
           "ratio = weight bytes x t/s / bandwidth (speculation can pass 1)\n", c->isa, BW_PASSES, c->probe_mib,
           bw0 / 1e9, bw1 / 1e9);
    printf("threads: %d; kv cache: %s; t/s: decode tokens per second (prefill left out), mean over the repetitions; "
           "passes/tok: target forward passes per generated token; cpu: CPU time / (wall time x threads)\n\n", threads,
           o->kv_type ? pith_kv_type_name(o->kv_type) : "f16");
    printf("| prompt | tokens | t/s plain | t/s spec | speed-up | drafted | accepted | acceptance | passes/tok plain | "
           "passes/tok spec | ratio plain | ratio spec | cpu plain | cpu spec |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
}

static void print_row(const spec_ctx *c, const char *name, int n_prompt, const prompt_result *r, double bw) {
    double acc = r->drafted ? (double)r->accepted / (double)r->drafted : 0;
    double bytes = (double)c->w.size_bytes;
    printf("| %s | %d | %.2f ± %.2f | %.2f ± %.2f | %.2fx | %llu | %llu | %.1f %% | %.2f | %.2f | %.2f | %.2f | %.0f%% | "
           "%.0f%% |\n", name, n_prompt, r->tps[0], r->stddev[0], r->tps[1], r->stddev[1], r->tps[1] / r->tps[0],
           (unsigned long long)r->drafted, (unsigned long long)r->accepted, 100 * acc, r->passes[0], r->passes[1],
           bytes * r->tps[0] / bw, bytes * r->tps[1] / bw, 100 * r->cpu[0], 100 * r->cpu[1]);
    fflush(stdout);
}

static int print_json(const spec_ctx *c, const char *test, int index, int threads, const prompt_result *r, double bw0,
                      double bw1) {
    const bench_spec_opts *o = c->o;
    double bw = 0.5 * (bw0 + bw1);
    cJSON *j = cJSON_CreateObject();
    if (!j) return -1;
    cJSON_AddStringToObject(j, "model", o->model);
    cJSON_AddStringToObject(j, "arch", c->hp.arch);
    cJSON_AddStringToObject(j, "format", c->w.format);
    cJSON_AddNumberToObject(j, "size_bytes", (double)c->w.size_bytes);
    cJSON_AddNumberToObject(j, "dim", c->hp.dim);
    cJSON_AddNumberToObject(j, "n_layers", c->hp.n_layers);
    cJSON_AddNumberToObject(j, "n_vocab", c->hp.n_vocab);
    cJSON_AddStringToObject(j, "spec_type", o->spec_type == PITH_SPEC_DRAFT ? "draft" : o->spec_type == PITH_SPEC_MTP ? "mtp" : "ngram");
    if (o->spec_type == PITH_SPEC_MTP) cJSON_AddNumberToObject(j, "mtp_cost", c->mtp_cost);
    if (o->spec_type == PITH_SPEC_DRAFT) {
        cJSON_AddStringToObject(j, "draft_model", o->draft_model);
        cJSON_AddStringToObject(j, "draft_arch", c->dhp.arch);
        cJSON_AddStringToObject(j, "draft_format", c->dw.format);
        cJSON_AddNumberToObject(j, "draft_size_bytes", (double)c->dw.size_bytes);
    }
    cJSON_AddNumberToObject(j, "spec_max_draft", o->spec_max_draft ? o->spec_max_draft : 8);
    cJSON_AddNumberToObject(j, "threads", threads);
    cJSON_AddStringToObject(j, "test", test);
    if (index >= 0) cJSON_AddNumberToObject(j, "prompt_index", index);
    cJSON_AddNumberToObject(j, "n_prompt", r->n_prompt);
    cJSON_AddNumberToObject(j, "n_gen", o->n_gen);
    cJSON_AddNumberToObject(j, "repetitions", o->reps);
    cJSON_AddStringToObject(j, "kv_type", o->kv_type ? pith_kv_type_name(o->kv_type) : "f16");
    cJSON_AddNumberToObject(j, "tokens_per_s", r->tps[0]);
    cJSON_AddNumberToObject(j, "stddev", r->stddev[0]);
    cJSON_AddNumberToObject(j, "spec_tokens_per_s", r->tps[1]);
    cJSON_AddNumberToObject(j, "spec_stddev", r->stddev[1]);
    cJSON_AddNumberToObject(j, "speedup", r->tps[1] / r->tps[0]);
    cJSON_AddNumberToObject(j, "draft_tokens", (double)r->drafted);
    cJSON_AddNumberToObject(j, "accepted_tokens", (double)r->accepted);
    cJSON_AddNumberToObject(j, "acceptance", r->drafted ? (double)r->accepted / (double)r->drafted : 0);
    cJSON_AddNumberToObject(j, "passes_per_token", r->passes[0]);
    cJSON_AddNumberToObject(j, "spec_passes_per_token", r->passes[1]);
    cJSON_AddBoolToObject(j, "identical", true);
    cJSON_AddNumberToObject(j, "bandwidth_gbs", bw / 1e9);
    cJSON_AddNumberToObject(j, "bandwidth_before_gbs", bw0 / 1e9);
    cJSON_AddNumberToObject(j, "bandwidth_after_gbs", bw1 / 1e9);
    cJSON_AddNumberToObject(j, "bandwidth_probe_mib", (double)c->probe_mib);
    cJSON_AddStringToObject(j, "ratio_kind", "bandwidth");
    cJSON_AddNumberToObject(j, "ratio", (double)c->w.size_bytes * r->tps[0] / bw);
    cJSON_AddNumberToObject(j, "spec_ratio", (double)c->w.size_bytes * r->tps[1] / bw);
    cJSON_AddNumberToObject(j, "cpu_share", r->cpu[0]);
    cJSON_AddNumberToObject(j, "spec_cpu_share", r->cpu[1]);
    cJSON_AddStringToObject(j, "probe_isa", c->isa);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s) return -1;
    puts(s);
    fflush(stdout);
    free(s);
    return 0;
}

/* The prompts: one per non-empty line, tokenized. */
static int read_prompts(const char *path, const pith_tokenizer *tok, int32_t ***ids, int **lens, int *n,
                        pith_err *err) {
    char *data;
    size_t len;
    if (cli_read_file(path, &data, &len, err)) return -1;
    *ids = NULL;
    *lens = NULL;
    *n = 0;
    int rc = 0, cap = 0;
    for (char *line = data; line < data + len && !rc;) {
        char *end = memchr(line, '\n', (size_t)(data + len - line));
        size_t l = end ? (size_t)(end - line) : (size_t)(data + len - line);
        if (l > 0 && line[l - 1] == '\r') l--;
        if (l > 0) {
            if (*n == cap) {
                cap = cap ? 2 * cap : 8;
                int32_t **ni = realloc(*ids, (size_t)cap * sizeof *ni);
                if (ni) *ids = ni;
                int *nl = realloc(*lens, (size_t)cap * sizeof *nl);
                if (nl) *lens = nl;
                if (!ni || !nl) {
                    rc = pith_errf(err, "out of memory");
                    break;
                }
            }
            rc = pith_tokenizer_encode(tok, line, l, PITH_TOK_ADD_BOS, &(*ids)[*n], &(*lens)[*n], err);
            if (!rc) (*n)++;
        }
        line = end ? end + 1 : data + len;
    }
    free(data);
    if (!rc && *n == 0) rc = pith_errf(err, "%s holds no prompt (one per line)", path);
    return rc;
}

/* Reps alternating runs of one prompt each way; checks the tokens. */
static int bench_prompt(pith_model *m, const pith_tokenizer *tok, pith_engine_options eo[2], const int32_t *prompt,
                        int n_prompt, int index, int threads, const bench_spec_opts *o, prompt_result *r, pith_err *err) {
    run_out out[2] = {{0}};
    double *samples = calloc((size_t)(2 * o->reps), sizeof *samples), wall[2] = {0}, cpu[2] = {0}, steps[2] = {0};
    for (int k = 0; k < 2; k++) out[k].toks = malloc((size_t)o->n_gen * sizeof *out[k].toks), out[k].cap = o->n_gen;
    int rc = samples && out[0].toks && out[1].toks ? 0 : pith_errf(err, "out of memory");
    memset(r, 0, sizeof *r);
    r->n_prompt = n_prompt;
    for (int rep = 0; rep < o->reps && !rc; rep++) {
        for (int k = 0; k < 2 && !rc; k++) {
            pith_engine_stats st;
            double w0 = pith_bench_now(), c0 = pith_bench_cpu_seconds();
            rc = run_once(m, tok, &eo[k], prompt, n_prompt, o->n_gen, &out[k], &st, err);
            if (rc) break;
            wall[k] += pith_bench_now() - w0;
            cpu[k] += pith_bench_cpu_seconds() - c0;
            double sec = out[k].t_last - out[k].t_first;
            samples[k * o->reps + rep] = (o->n_gen - 1) / (sec > 0 ? sec : 1e-9);
            steps[k] += (double)st.steps;
            if (k == 1) r->drafted += st.spec_draft_tokens, r->accepted += st.spec_accepted_tokens;
        }
        if (rc) break;
        for (int i = 0; i < o->n_gen; i++) {
            if (out[0].toks[i] != out[1].toks[i]) {
                rc = pith_errf(err, "prompt %d: speculative decoding changed the output at generated token %d (%d, not "
                               "%d): a bug", index + 1, i, (int)out[1].toks[i], (int)out[0].toks[i]);
                break;
            }
        }
    }
    if (!rc) {
        for (int k = 0; k < 2; k++) {
            pith_bench_stats s;
            pith_bench_stats_of(&samples[k * o->reps], o->reps, &s);
            r->tps[k] = s.mean;
            r->stddev[k] = s.stddev;
            r->cpu[k] = cpu[k] / ((wall[k] > 0 ? wall[k] : 1e-9) * threads);
            r->passes[k] = steps[k] / ((double)o->reps * o->n_gen);
        }
        r->drafted /= (uint64_t)o->reps;
        r->accepted /= (uint64_t)o->reps;
    }
    free(samples);
    free(out[0].toks);
    free(out[1].toks);
    return rc;
}

static int bench_threads(spec_ctx *c, int threads, pith_err *err) {
    const bench_spec_opts *o = c->o;
    pith_assets a = {0};
    pith_model *draft = NULL;
    pith_probe *probe = NULL;
    int32_t **ids = NULL;
    int *lens = NULL, n = 0, rc = -1;
    prompt_result *res = NULL;
    fprintf(stderr, "pith bench: %d thread%s: loading %s\n", threads, threads == 1 ? "" : "s", o->model);
    cli_progress bar;
    cli_progress_start(&bar, "loading model");
    pith_assets_options ao = {.model_path = o->model, .n_threads = threads, .mtp = o->spec_type == PITH_SPEC_MTP,
                              .progress = cli_progress_update, .progress_user = &bar};
    int load_rc = pith_assets_load(&ao, &a, err);
    cli_progress_end(&bar);
    if (load_rc) goto done;
    c->hp = a.model->hp;
    c->mtp_cost = a.model->mtp_cost;
    if (pith_bench_weights_of(a.model, &c->w, err)) goto done;
    if (o->spec_type == PITH_SPEC_DRAFT) {
        pith_model_options mo = {.n_threads = threads};
        if (pith_model_load(o->draft_model, &mo, &draft, err)) {
            pith_err_prefix(err, "the draft model");
            goto done;
        }
        c->dhp = draft->hp;
        if (pith_bench_weights_of(draft, &c->dw, err)) goto done;
    }
    if (read_prompts(o->prompts_file, a.tok, &ids, &lens, &n, err)) goto done;
    for (int i = 0; i < n; i++) {
        if ((long long)lens[i] + o->n_gen + 1 > a.model->hp.ctx_len) {
            pith_errf(err, "prompt %d is %d tokens: with -n %d it needs more than the model's context of %d", i + 1,
                      lens[i], o->n_gen, a.model->hp.ctx_len);
            rc = -2;
            goto done;
        }
    }
    c->probe_mib = o->bw_mib > 0 ? o->bw_mib : (long long)((c->w.size_bytes + (1u << 20) - 1) >> 20);
    if (o->bw_mib <= 0 && c->probe_mib < 256) c->probe_mib = 256;
    if (pith_probe_new(threads, (size_t)c->probe_mib << 20, o->force_scalar, &probe, err)) goto done;
    c->isa = pith_probe_isa(probe);
    pith_engine_options eo[2] = {{.max_num_seqs = 1, .kv_type = o->kv_type}, {0}};
    eo[1] = eo[0];
    eo[1].spec_type = o->spec_type;
    eo[1].spec_max_draft = o->spec_max_draft;
    eo[1].draft_model = draft;
    if (o->warmup) { /* faults the weights in, both models */
        fprintf(stderr, "pith bench: warming up\n");
        prompt_result w;
        bench_spec_opts wo = *o;
        wo.reps = 1;
        wo.n_gen = o->n_gen < 8 ? o->n_gen : 8;
        if (bench_prompt(a.model, a.tok, eo, ids[0], lens[0], 0, threads, &wo, &w, err)) goto done;
    }
    double bw0, bw1;
    if (pith_probe_bandwidth(probe, BW_PASSES, &bw0, err)) goto done;
    res = calloc((size_t)n, sizeof *res);
    if (!res) {
        pith_errf(err, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        fprintf(stderr, "pith bench: prompt %d of %d (%d tokens) x %d each way\n", i + 1, n, lens[i], o->reps);
        if (bench_prompt(a.model, a.tok, eo, ids[i], lens[i], i, threads, o, &res[i], err)) goto done;
    }
    if (pith_probe_bandwidth(probe, BW_PASSES, &bw1, err)) goto done;
    /* the total: tokens over time summed over prompts, i.e. the harmonic mean of the rates */
    prompt_result tot = {0};
    double sec[2] = {0};
    for (int i = 0; i < n; i++) {
        tot.n_prompt += res[i].n_prompt;
        tot.drafted += res[i].drafted;
        tot.accepted += res[i].accepted;
        for (int k = 0; k < 2; k++) {
            sec[k] += (o->n_gen - 1) / res[i].tps[k];
            tot.cpu[k] += res[i].cpu[k] / n;
            tot.passes[k] += res[i].passes[k] / n;
        }
    }
    for (int k = 0; k < 2; k++) tot.tps[k] = n * (o->n_gen - 1) / sec[k];
    double bw = 0.5 * (bw0 + bw1);
    if (o->json) {
        for (int i = 0; i < n; i++)
            if (print_json(c, "spec", i, threads, &res[i], bw0, bw1)) goto oom;
        if (print_json(c, "spec-total", -1, threads, &tot, bw0, bw1)) goto oom;
    } else {
        print_header(c, threads, bw0, bw1);
        for (int i = 0; i < n; i++) {
            char name[32];
            snprintf(name, sizeof name, "%d", i + 1);
            print_row(c, name, res[i].n_prompt, &res[i], bw);
        }
        print_row(c, "all", tot.n_prompt, &tot, bw);
    }
    rc = ferror(stdout) ? pith_errf(err, "writing the output failed (stdout)") : 0;
    goto done;
oom:
    pith_errf(err, "out of memory writing JSON");
done:
    for (int i = 0; i < n; i++) free(ids[i]);
    free(ids);
    free(lens);
    free(res);
    pith_probe_free(probe);
    pith_model_free(draft);
    pith_assets_free(&a);
    return rc;
}

int cli_bench_spec(const bench_spec_opts *o, pith_err *err) {
    spec_ctx c = {.o = o};
    for (int i = 0; i < o->n_thread_counts; i++) {
        int rc = bench_threads(&c, o->threads[i], err);
        if (rc) return rc;
    }
    return 0;
}
