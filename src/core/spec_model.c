/* The draft model: proposals as greedy requests on an engine of its own (spec_model.h). */
#include "core/spec_model.h"

#include <stdlib.h>
#include <string.h>

#include "pith/gguf.h"
#include "pith/model.h"
#include "pith/tokenizer.h"

/* One queued proposal: where its tokens go. */
typedef struct spec_job {
    int32_t *draft;
    int max;
    int *n_out;
} spec_job;

struct spec_model {
    pith_model *model;
    bool owned;
    pith_engine *eng;
    int max_seq_len;
    spec_job *jobs;            /* [max_seqs]: the callbacks' user pointers, stable while they run */
    int n_jobs, max_jobs;
};

/* The tokenizer a model's file carries, or NULL (none, or not a GGUF file). */
static pith_tokenizer *file_tokenizer(const pith_model *m) {
    const pith_gguf *g = m->file ? pith_model_file_gguf(m->file) : NULL;
    pith_tokenizer *t = NULL;
    pith_err err;
    if (!g || pith_tokenizer_from_gguf(g, &t, &err)) return NULL;
    return t;
}

/* Same vocabulary: the same size and, where both tokenizers are known, the same text for every id. */
static int check_vocab(const pith_model *draft, const pith_model *target, const pith_tokenizer *tok, pith_err *err) {
    if (draft->hp.n_vocab != target->hp.n_vocab)
        return pith_errf(err, "the draft model's vocabulary has %d tokens, the target's %d: a draft model needs "
                         "the target's vocabulary", draft->hp.n_vocab, target->hp.n_vocab);
    pith_tokenizer *own = tok ? NULL : file_tokenizer(target);
    const pith_tokenizer *tt = tok ? tok : own;
    pith_tokenizer *dt = tt ? file_tokenizer(draft) : NULL;
    int rc = 0;
    if (tt && dt && pith_tokenizer_n_vocab(tt) != pith_tokenizer_n_vocab(dt))
        rc = pith_errf(err, "the draft model's tokenizer has %d tokens, the target's %d: a draft model needs the "
                       "target's vocabulary", pith_tokenizer_n_vocab(dt), pith_tokenizer_n_vocab(tt));
    if (tt && dt && !rc) {
        int n = pith_tokenizer_n_vocab(tt);
        for (int id = 0; id < n && !rc; id++) {
            size_t la = 0, lb = 0;
            const char *a = pith_tokenizer_token_text(tt, id, &la), *b = pith_tokenizer_token_text(dt, id, &lb);
            if (!a || !b || la != lb || memcmp(a, b, la))
                rc = pith_errf(err, "the draft model's vocabulary differs from the target's at token %d ('%.*s' vs "
                               "'%.*s'): a draft model needs the target's vocabulary", id, a ? (int)(la > 40 ? 40 : la) : 0,
                               a ? a : "", b ? (int)(lb > 40 ? 40 : lb) : 0, b ? b : "");
        }
    }
    pith_tokenizer_free(own);
    pith_tokenizer_free(dt);
    return rc;
}

int spec_model_create(pith_model *draft, bool owned, const pith_model *target, const pith_tokenizer *tok,
                      int max_seqs, int max_seq_len, spec_model **out, pith_err *err) {
    *out = NULL;
    spec_model *d = calloc(1, sizeof *d);
    if (!d) {
        if (owned) pith_model_free(draft);
        return pith_errf(err, "out of memory");
    }
    d->model = draft;
    d->owned = owned;
    d->max_jobs = max_seqs;
    d->jobs = calloc((size_t)max_seqs, sizeof *d->jobs);
    if (!d->jobs) {
        spec_model_free(d);
        return pith_errf(err, "out of memory");
    }
    if (check_vocab(draft, target, tok, err)) {
        spec_model_free(d);
        return -1;
    }
    /* Blocks of one token: the prefix cache then holds every computed token, so a proposal recomputes
     * only what the draft has not seen (the target's last sampled token and what followed a rejection). */
    pith_engine_options o = {.block_size = 1, .max_num_seqs = max_seqs, .snapshot_interval = -1,
                             .max_seq_len = max_seq_len < draft->hp.ctx_len ? max_seq_len : draft->hp.ctx_len};
    if (pith_engine_create(draft, NULL, &o, &d->eng, err)) {
        spec_model_free(d);
        return pith_err_prefix(err, "the draft model");
    }
    d->max_seq_len = pith_engine_max_seq_len(d->eng);
    *out = d;
    return 0;
}

void spec_model_free(spec_model *d) {
    if (!d) return;
    pith_engine_free(d->eng);
    if (d->owned) pith_model_free(d->model);
    free(d->jobs);
    free(d);
}

pith_engine *spec_model_engine(spec_model *d) { return d->eng; }

static void on_token(const pith_token_event *ev, void *user) {
    spec_job *j = user;
    if (!ev->final && *j->n_out < j->max) j->draft[(*j->n_out)++] = ev->token;
}

void spec_model_add(spec_model *d, const int32_t *tokens, int n, int32_t *draft, int max, int *n_out) {
    *n_out = 0;
    if (n + max > d->max_seq_len) max = d->max_seq_len - n;
    if (max <= 0 || n < 1 || d->n_jobs == d->max_jobs) return;
    spec_job *j = &d->jobs[d->n_jobs];
    *j = (spec_job){.draft = draft, .max = max, .n_out = n_out};
    pith_request r = {.prompt = tokens, .n_prompt = n, .sampling = pith_sampling_defaults(), .max_tokens = max,
                      .ignore_eos = true, .on_token = on_token, .user = j};
    r.sampling.temperature = 0; /* greedy */
    uint64_t id;
    pith_err err;
    if (pith_engine_submit(d->eng, &r, &id, &err) == 0) d->n_jobs++;
}

void spec_model_run(spec_model *d) {
    if (d->n_jobs == 0) return;
    pith_err err;
    /* A failed forward pass finishes its requests with an error: they keep the tokens they had, each a
     * greedy continuation, and the target verifies them like any draft. */
    (void)pith_engine_run(d->eng, &err);
    d->n_jobs = 0;
}
