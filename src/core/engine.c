/* The engine: request intake and cancellation (thread-safe), the step loop (schedule, build the flat
 * batch, forward, sample, report) and the optional thread that runs it.
 *
 * Locking: `lock` guards what other threads touch: the incoming list, the live list (for cancel), the
 * cancel flags and the stats snapshot. Everything else (scheduler, pool, sequences once taken in)
 * belongs to whichever thread steps, and callbacks run with the lock released. */
#include "pith/engine.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/engine_internal.h"
#include "core/spec.h"
#include "core/spec_model.h"

const char *pith_finish_reason_str(pith_finish_reason r) {
    switch (r) {
    case PITH_FINISH_STOP: return "stop";
    case PITH_FINISH_LENGTH: return "length";
    case PITH_FINISH_CANCELLED: return "cancelled";
    case PITH_FINISH_ERROR: return "error";
    default: return "";
    }
}

/* Blocks (or slots) of group g when every FULL group gets n blocks: a WINDOW group needs per sequence
 * the blocks its window touches plus those of a prefill chunk, so max_num_seqs of them may need fewer
 * than n; a RECURRENT group has one state slot per sequence that can run. */
static long long group_units(const pith_engine_options *o, const pith_mem_group *g, long long n, long long per_seq_full) {
    if (g->kind == PITH_MEM_FULL) return n;
    if (g->kind == PITH_MEM_RECURRENT) return o->max_num_seqs;
    long long bs = o->block_size;
    long long per_seq = (g->window - 1 + bs - 1) / bs + 1 + (o->max_batch_tokens + bs - 1) / bs;
    if (per_seq > per_seq_full) per_seq = per_seq_full;
    long long want = per_seq * o->max_num_seqs;
    return want < n ? want : n;
}

static double pool_bytes(const pith_engine_options *o, const pith_mem_spec *spec, const pith_mem_layout *lay,
                         long long n, long long per_seq_full) {
    double bytes = 0;
    for (int g = 0; g < spec->n_groups; g++)
        bytes += (double)group_units(o, &spec->groups[g], n, per_seq_full) *
                 (double)pith_mem_unit_bytes(&spec->groups[g], lay->type[g], o->block_size);
    return bytes;
}

/* The largest n in [1, 2^28] whose pools fit in `budget` bytes, or 0 when not even n = 1 does. */
static long long fit_blocks(const pith_engine_options *o, const pith_mem_spec *spec, const pith_mem_layout *lay,
                            double budget, long long per_seq_full) {
    long long lo = 0, hi = 1 << 28;
    while (lo < hi) {
        long long mid = lo + (hi - lo + 1) / 2;
        if (pool_bytes(o, spec, lay, mid, per_seq_full) <= budget) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static int resolve_options(pith_engine *e, const pith_model *m, const pith_engine_options *in, pith_err *err) {
    pith_engine_options o = in ? *in : (pith_engine_options){0};
    if (o.block_size == 0) o.block_size = 16;
    if (o.max_num_seqs == 0) o.max_num_seqs = 64;
    if (o.max_batch_tokens == 0) o.max_batch_tokens = 2048;
    if (o.max_waiting == 0) o.max_waiting = 4096;
    if (o.encoder_cache_bytes == 0) o.encoder_cache_bytes = (size_t)256 << 20;
    const int row = m->hp.dim * (m->embed_parts > 1 ? m->embed_parts : 1);
    if (o.encoder && (!o.encoder->encode || o.encoder->out_dim != row))
        return pith_errf(err, "the encoder makes rows of %d floats; the model's width is %d (rows of %d)",
                         o.encoder->out_dim, m->hp.dim, row);
    if (o.encoder && !m->has_embeds) return pith_errf(err, "this model cannot read encoder rows (no image input)");
    if (o.block_size < 1 || o.block_size > 4096) return pith_errf(err, "block size must be in 1..4096, not %d", o.block_size);
    if (o.max_num_seqs < 1 || o.max_num_seqs > 65536) return pith_errf(err, "max_num_seqs must be in 1..65536, not %d", o.max_num_seqs);
    if (o.max_batch_tokens < 1 || o.max_batch_tokens > (1 << 24)) return pith_errf(err, "max_batch_tokens must be in 1..16777216, not %d", o.max_batch_tokens);
    if (o.kv_blocks < 0 || o.max_seq_len < 0 || o.max_waiting < 0) return pith_errf(err, "engine options must not be negative");
    if (o.spec_type < PITH_SPEC_OFF || o.spec_type > PITH_SPEC_MTP) return pith_errf(err, "unknown speculative decoding type %d", (int)o.spec_type);
    if (o.spec_type == PITH_SPEC_CUSTOM && !o.spec_draft) return pith_errf(err, "custom speculative decoding needs a draft function");
    if (o.spec_type == PITH_SPEC_DRAFT && !o.draft_model && !(o.draft_model_path && *o.draft_model_path))
        return pith_errf(err, "speculative decoding with a draft model needs the draft model (draft_model or draft_model_path)");
    if (o.spec_type == PITH_SPEC_DRAFT && o.draft_model == m) return pith_errf(err, "the draft model must be another model than the target (load the file twice to draft with the same weights)");
    if (o.spec_type == PITH_SPEC_MTP && !m->has_mtp)
        return pith_errf(err, m->hp.n_mtp_layers > 0 ? "speculative decoding with MTP needs the model loaded with its MTP head"
                                                     : "speculative decoding with MTP: the model has no MTP layers");
    if (o.spec_max_draft == 0) o.spec_max_draft = 8;
    if (o.spec_max_seqs == 0) o.spec_max_seqs = 2;
    if (o.spec_max_draft < 1 || o.spec_max_draft > 16) return pith_errf(err, "spec_max_draft must be in 1..16, not %d", o.spec_max_draft);
    if (o.spec_max_seqs < 1) return pith_errf(err, "spec_max_seqs must be positive, not %d", o.spec_max_seqs);
    if (o.snapshot_interval < -1) return pith_errf(err, "snapshot_interval must be -1, 0 or positive, not %d", o.snapshot_interval);
    if (o.snapshot_interval == 0) o.snapshot_interval = 1024;
    if (o.snapshot_interval > 0) o.snapshot_interval = (o.snapshot_interval + o.block_size - 1) / o.block_size * o.block_size;

    const pith_mem_spec *spec = &m->mem;
    if (pith_mem_spec_check(spec, pith_model_mem_layers(m), err)) return pith_err_prefix(err, "the model's memory spec");
    pith_mem_layout *lay = &e->layout;
    memset(lay, 0, sizeof *lay);
    lay->block_size = o.block_size;
    lay->n_groups = spec->n_groups;
    bool has_full = false, has_kv = false;
    if ((unsigned)o.kv_type > PITH_KV_Q8_0 || (o.kv_f32 && o.kv_type && o.kv_type != PITH_KV_F32))
        return pith_errf(err, "kv_type %d %s", (int)o.kv_type, o.kv_f32 ? "contradicts kv_f32" : "is unknown");
    static const pith_dtype kv_dtype[] = {PITH_F16, PITH_F32, PITH_F16, PITH_BF16, PITH_Q8_0};
    pith_kv_type kvt = o.kv_f32 ? PITH_KV_F32 : o.kv_type;
    for (int g = 0; g < spec->n_groups; g++) {
        const pith_mem_group *mg = &spec->groups[g];
        lay->type[g] = mg->kind != PITH_MEM_RECURRENT && kvt ? kv_dtype[kvt] : mg->type;
        if (mg->kind != PITH_MEM_RECURRENT && !pith_mem_unit_bytes(mg, lay->type[g], o.block_size))
            return pith_errf(err, "memory group %d: K/V width %d/%d cannot be held as %s", g, mg->k_dim, mg->v_dim,
                             pith_dtype_name(lay->type[g]));
        has_full |= mg->kind == PITH_MEM_FULL;
        has_kv |= mg->kind != PITH_MEM_RECURRENT;
    }

    int max_len = o.max_seq_len ? o.max_seq_len : m->hp.ctx_len;
    if (m->hp.ctx_len > 0 && max_len > m->hp.ctx_len) max_len = m->hp.ctx_len; /* never past training */
    long long per_seq_full = max_len > 0 ? (max_len + o.block_size - 1) / o.block_size : 1 << 20;
    long long blocks = o.kv_blocks;
    if (blocks == 0 && has_kv) {
        double budget = o.kv_mem_bytes ? (double)o.kv_mem_bytes : (double)((size_t)1 << 30);
        blocks = fit_blocks(&o, spec, lay, budget, per_seq_full);
        if (!o.kv_mem_bytes && blocks > per_seq_full * o.max_num_seqs) blocks = per_seq_full * o.max_num_seqs;
        if (blocks < 1)
            return pith_errf(err, "KV memory of %.0f bytes holds no block of every group (%.0f bytes per block of "
                             "each group)", budget, pool_bytes(&o, spec, lay, 1, per_seq_full));
    }
    if (blocks < 1) blocks = 1;
    if (blocks > (1 << 28) || blocks * o.block_size > INT32_MAX)
        return pith_errf(err, "KV pool of %lld blocks is too large", blocks);
    if (has_full && (max_len <= 0 || max_len > blocks * o.block_size)) max_len = (int)(blocks * o.block_size);
    if (max_len <= 0) max_len = (int)(blocks * o.block_size);
    per_seq_full = (max_len + o.block_size - 1) / o.block_size;
    for (int g = 0; g < spec->n_groups; g++) {
        const pith_mem_group *mg = &spec->groups[g];
        lay->n_blocks[g] = (int)group_units(&o, mg, blocks, per_seq_full);
        /* One sequence alone must always progress: a window's blocks plus the block of its next token. */
        long long lone = mg->kind == PITH_MEM_WINDOW ? (mg->window - 1 + o.block_size - 1) / o.block_size + 2 : 1;
        if (lone > per_seq_full) lone = per_seq_full;
        if (lay->n_blocks[g] < lone)
            return pith_errf(err, "memory group %d (%s, window %d) gets %d blocks of %d tokens; one sequence needs %lld",
                             g, pith_mem_kind_name(mg->kind), mg->window, lay->n_blocks[g], o.block_size, lone);
    }
    /* Snapshots: one slot in every RECURRENT group per snapshot point, from their own budget. */
    double snap_bytes = 0;
    for (int g = 0; g < spec->n_groups; g++)
        if (spec->groups[g].kind == PITH_MEM_RECURRENT)
            snap_bytes += (double)pith_mem_unit_bytes(&spec->groups[g], lay->type[g], o.block_size);
    long long n_snaps = 0;
    if (snap_bytes > 0 && !o.no_prefix_cache && o.snapshot_mem_bytes != SIZE_MAX) {
        double budget = (double)o.snapshot_mem_bytes;
        if (!o.snapshot_mem_bytes) {
            budget = 2.0 * o.max_num_seqs * snap_bytes;
            if (budget > (double)((size_t)1 << 30)) budget = (double)((size_t)1 << 30);
        }
        n_snaps = (long long)(budget / snap_bytes);
        if (n_snaps > (1 << 20)) n_snaps = 1 << 20;
    }
    /* Speculation on a model with state checkpoints: spare running slots for the checkpoints. */
    int spares = o.spec_type != PITH_SPEC_OFF && m->state_checkpoints ? o.spec_max_seqs * o.spec_max_draft : 0;
    for (int g = 0; g < spec->n_groups; g++)
        if (spec->groups[g].kind == PITH_MEM_RECURRENT) lay->n_blocks[g] += (int)n_snaps + spares;
    e->state_spares = spares;
    o.kv_blocks = (int)blocks;
    o.max_seq_len = max_len;
    e->opt = o;
    return 0;
}

int engine_grow_list(seq ***list, int *cap, int need) {
    if (need <= *cap) return 0;
    int cap2 = *cap ? *cap * 2 : 64;
    if (cap2 < need) cap2 = need;
    seq **p = realloc(*list, (size_t)cap2 * sizeof *p);
    if (!p) return -1;
    *list = p;
    *cap = cap2;
    return 0;
}

/* The draft model's engine (PITH_SPEC_DRAFT), for up to spec_max_seqs sequences as long as ours. */
static int draft_create(pith_engine *e, pith_err *err) {
    const pith_engine_options *o = &e->opt;
    pith_model *dm = o->draft_model;
    if (!dm) {
        pith_model_options mo = {.n_threads = o->draft_threads, .device = o->draft_device};
        if (pith_model_load(o->draft_model_path, &mo, &dm, err)) return pith_err_prefix(err, "the draft model");
    }
    int n = o->spec_max_seqs < o->max_num_seqs ? o->spec_max_seqs : o->max_num_seqs;
    return spec_model_create(dm, !o->draft_model, e->model, e->tok, n, o->max_seq_len, &e->draft, err);
}

int pith_engine_create(pith_model *model, const pith_tokenizer *tok, const pith_engine_options *opt,
                       pith_engine **out, pith_err *err) {
    *out = NULL;
    if (!model || !model->ops || !model->ops->forward || !model->ops->mem_alloc || model->hp.n_vocab <= 0)
        return pith_errf(err, "engine: invalid model");
    pith_engine *e = calloc(1, sizeof *e);
    if (!e) return pith_errf(err, "out of memory");
    e->model = model;
    e->tok = tok;
    e->n_vocab = model->hp.n_vocab;
    e->n_embd = model->has_hidden ? model->hp.dim : 0;
    if (resolve_options(e, model, opt, err)) {
        free(e);
        return -1;
    }
    const pith_engine_options *o = &e->opt;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->wake, NULL);
    pthread_mutex_init(&e->admin_lock, NULL);
    e->max_blocks_per_seq = (o->max_seq_len + o->block_size - 1) / o->block_size;
    /* Logits rows: one per sequence, the prompt positions of prompt_logprobs requests, and the drafts
     * of the sequences that may speculate. */
    e->max_logits = o->max_num_seqs + ENGINE_PROMPT_ROWS + (o->spec_type != PITH_SPEC_OFF ? o->spec_max_seqs * o->spec_max_draft : 0);
    pith_model_limits lim = {.max_batch_tokens = o->max_batch_tokens, .max_num_seqs = o->max_num_seqs,
                             .max_seq_len = o->max_seq_len, .max_logits = e->max_logits};
    if (pith_model_prepare(model, &lim, err) || pith_model_mem_alloc(model, &e->layout, err)) {
        pith_engine_free(e);
        return -1;
    }
    e->mem_allocated = true;
    mem_config mc = {.prefix_cache = !o->no_prefix_cache, .n_state_slots = o->max_num_seqs + e->state_spares,
                     .snapshot_interval = o->snapshot_interval > 0 ? o->snapshot_interval : 0};
    if (mem_init(&e->mem, &model->mem, &e->layout, &mc, err) ||
        sched_init(&e->sc, &e->mem, o->max_num_seqs, o->max_batch_tokens, err)) {
        pith_engine_free(e);
        return -1;
    }
    e->sc.whole_spans = model->bidirectional_spans;
    enc_cache_init(&e->enc, o->encoder_cache_bytes);
    size_t nt = (size_t)o->max_batch_tokens, ns = (size_t)o->max_num_seqs;
    e->b_tokens = malloc(nt * sizeof *e->b_tokens);
    e->b_positions = malloc(nt * sizeof *e->b_positions);
    e->b_seq = malloc(nt * sizeof *e->b_seq);
    e->b_want = malloc(nt);
    bool ok = e->b_tokens && e->b_positions && e->b_seq && e->b_want;
    for (int g = 0; g < e->mem.n_groups && ok; g++) {
        if (e->mem.g[g].kind == PITH_MEM_RECURRENT) {
            e->b_states[g] = malloc(ns * sizeof **e->b_states);
            e->b_ckpt[g] = malloc(nt * sizeof **e->b_ckpt);
            ok = e->b_states[g] && e->b_ckpt[g];
        } else {
            e->b_slots[g] = malloc(nt * sizeof **e->b_slots);
            e->b_tables[g] = malloc(ns * (size_t)e->max_blocks_per_seq * sizeof **e->b_tables);
            ok = e->b_slots[g] && e->b_tables[g];
        }
    }
    e->logits = malloc((size_t)e->max_logits * (size_t)e->n_vocab * sizeof *e->logits);
    e->b_row0 = malloc(ns * sizeof *e->b_row0);
    e->b_nrows = malloc(ns * sizeof *e->b_nrows);
    e->raw_row = malloc((size_t)e->n_vocab * sizeof *e->raw_row);
    e->fork_row = malloc((size_t)e->n_vocab * sizeof *e->fork_row);
    e->step_seqs = malloc(ns * sizeof *e->step_seqs);
    if (!ok || !e->logits || !e->raw_row || !e->fork_row || !e->step_seqs || !e->b_row0 || !e->b_nrows) {
        pith_engine_free(e);
        return pith_errf(err, "out of memory for the engine's batch buffers");
    }
    e->spec_min_rate = pith_spec_backoff_rate(o->spec_type == PITH_SPEC_MTP ? model->mtp_cost : 0.0f);
    if (o->spec_type == PITH_SPEC_DRAFT && draft_create(e, err)) {
        pith_engine_free(e);
        return -1;
    }
    e->opt.draft_model_path = NULL; /* the caller's string: used only here */
    e->next_id = 1;
    engine_publish_stats(e); /* the pool size and limits are readable before the first step */
    *out = e;
    return 0;
}

void pith_engine_free(pith_engine *e) {
    if (!e) return;
    pith_engine_stop(e);
    /* Every live request ends as cancelled, in whichever queue it is (a request still on the incoming
     * list is in no scheduler queue, and sched_remove handles that too). */
    pthread_mutex_lock(&e->lock);
    e->shutting_down = true;
    e->n_incoming = 0;
    pthread_mutex_unlock(&e->lock);
    while (e->n_live > 0) {
        seq *s = e->live[e->n_live - 1];
        sched_remove(&e->sc, s);
        engine_finish(e, s, PITH_FINISH_CANCELLED, false, NULL);
    }
    spec_model_free(e->draft);
    sched_free(&e->sc);
    mem_free(&e->mem);
    engine_kv_events_free(e);
    if (e->mem_allocated && !e->asleep) pith_model_mem_free(e->model);
    free(e->incoming);
    free(e->intake);
    free(e->cancels);
    free(e->live);
    free(e->b_tokens);
    free(e->b_positions);
    free(e->b_seq);
    free(e->b_want);
    for (int g = 0; g < PITH_MAX_MEM_GROUPS; g++) {
        free(e->b_slots[g]);
        free(e->b_tables[g]);
        free(e->b_states[g]);
        free(e->b_ckpt[g]);
    }
    free(e->logits);
    free(e->b_row0);
    free(e->b_nrows);
    free(e->raw_row);
    free(e->fork_row);
    engine_media_done(e);
    free(e->m_items);
    enc_cache_free(&e->enc);
    free(e->b_embed_rows);
    free(e->b_embeds);
    free(e->b_attend_last);
    free(e->b_rope_pos);
    free(e->b_want_hidden);
    free(e->hidden);
    free(e->emb_out);
    free(e->step_seqs);
    pthread_cond_destroy(&e->wake);
    pthread_mutex_destroy(&e->lock);
    pthread_mutex_destroy(&e->admin_lock);
    free(e);
}

static int validate_request(const pith_engine *e, const pith_request *r, pith_err *err) {
    if (!r->prompt || r->n_prompt < 1) return pith_errf(err, "the prompt is empty");
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= e->n_vocab)
            return pith_errf(err, "prompt token %d is %d, outside the vocabulary of %d", i, (int)r->prompt[i], e->n_vocab);
    if (r->n_prompt >= e->opt.max_seq_len)
        return pith_errf(err, "the prompt is %d tokens; this engine holds at most %d tokens per sequence, "
                         "prompt and output together", r->n_prompt, e->opt.max_seq_len);
    if (r->embed == PITH_EMBED_OFF && pith_sampling_validate(&r->sampling, err)) return -1; /* embed: unused */
    if (r->n_stop_ids < 0 || r->n_stop_ids > 1024 || (r->n_stop_ids > 0 && !r->stop_ids))
        return pith_errf(err, "stop token ids: between 0 and 1024 expected");
    if (r->n_stop < 0 || r->n_stop > 64 || (r->n_stop > 0 && !r->stop))
        return pith_errf(err, "stop strings: between 0 and 64 expected");
    for (int i = 0; i < r->n_stop; i++) {
        size_t len = r->stop[i] ? strlen(r->stop[i]) : 0;
        if (len == 0 || len > 1024) return pith_errf(err, "stop string %d must hold 1 to 1024 bytes", i);
    }
    if (r->top_logprobs < 0 || r->top_logprobs > PITH_ENGINE_MAX_TOP_LOGPROBS)
        return pith_errf(err, "top_logprobs must be in 0..%d", PITH_ENGINE_MAX_TOP_LOGPROBS);
    if (r->prompt_top_logprobs < 0 || r->prompt_top_logprobs > PITH_ENGINE_MAX_TOP_LOGPROBS)
        return pith_errf(err, "prompt_top_logprobs must be in 0..%d", PITH_ENGINE_MAX_TOP_LOGPROBS);
    if (r->logprobs_mode != PITH_LOGPROBS_RAW && r->logprobs_mode != PITH_LOGPROBS_PROCESSED)
        return pith_errf(err, "logprobs mode %d is not raw (0) or processed (1)", (int)r->logprobs_mode);
    if (r->embed != PITH_EMBED_OFF && (r->embed < PITH_EMBED_MEAN || r->embed > PITH_EMBED_LAST))
        return pith_errf(err, "embedding pooling %d is not mean (1), cls (2) or last (3)", (int)r->embed);
    if (r->n < 0 || r->n > 1024) return pith_errf(err, "n must be in 1..1024, not %d", r->n);
    if (r->n > 1 && r->embed != PITH_EMBED_OFF) return pith_errf(err, "an embedding request has one result (n must be 1)");
    if (r->grammar && pith_grammar_vocab_size(pith_grammar_get_vocab(r->grammar)) != e->n_vocab)
        return pith_errf(err, "the grammar was compiled for a vocabulary of %d tokens, the model has %d",
                         pith_grammar_vocab_size(pith_grammar_get_vocab(r->grammar)), e->n_vocab);
    if (r->embed != PITH_EMBED_OFF && !e->n_embd)
        return pith_errf(err, "this model cannot return hidden states, so it cannot serve embeddings");
    if (r->n_media != 0) {
        if (!e->opt.encoder)
            return pith_errf(err, e->model->has_embeds ? "this engine has no encoder for images (load the projector: --mmproj)"
                                                       : "this model does not take images");
        if (r->embed != PITH_EMBED_OFF) return pith_errf(err, "embedding requests take no images");
        if (r->prompt_logprobs) return pith_errf(err, "prompt logprobs are not available for prompts with images");
        for (int i = 0; i < r->n_media && r->media && e->model->has_mrope; i++)
            if (r->media[i].rows < 1 || r->media[i].cols < 1)
                return pith_errf(err, "image %d has no grid (rows x cols): this model places image tokens in 2-D", i);
        for (int i = 0; i < r->n_media && r->media && e->sc.whole_spans; i++)
            if (r->media[i].n_tokens > e->opt.max_batch_tokens)
                return pith_errf(err, "image %d takes %d tokens, which must be computed in one batch of at most %d "
                                 "(max_batch_tokens)", i, r->media[i].n_tokens, e->opt.max_batch_tokens);
    }
    return 0;
}

int pith_engine_submit(pith_engine *e, const pith_request *r, uint64_t *id, pith_err *err) {
    if (id) *id = 0;
    if (validate_request(e, r, err)) {
        pthread_mutex_lock(&e->lock);
        e->stats.requests_rejected += r->n > 1 && r->n <= 1024 ? (uint64_t)r->n : 1; /* each sample counts */
        pthread_mutex_unlock(&e->lock);
        return PITH_SUBMIT_INVALID;
    }
    int room = e->opt.max_seq_len - r->n_prompt;
    int max_len = r->n_prompt + (r->max_tokens > 0 && r->max_tokens < room ? r->max_tokens : room);
    if (r->embed != PITH_EMBED_OFF) max_len = r->n_prompt;
    const int n = r->n > 1 ? r->n : 1;
    seq *s;
    media_set *ms = NULL;
    if (r->n_media && media_set_create(r->media, r->n_media, r->n_prompt, &ms, err)) {
        pthread_mutex_lock(&e->lock);
        e->stats.requests_rejected += (uint64_t)n;
        pthread_mutex_unlock(&e->lock);
        return PITH_SUBMIT_INVALID;
    }
    if (seq_create(r, max_len, e->opt.block_size, e->mem.n_groups, e->tok, &s, err)) {
        media_set_unref(ms);
        return PITH_SUBMIT_INVALID;
    }
    s->media = ms; /* the request's reference */
    if (n > 1 && !(s->forks = calloc((size_t)n - 1, sizeof *s->forks))) {
        seq_free(s);
        pith_errf(err, "out of memory");
        return PITH_SUBMIT_INVALID;
    }
    for (int i = 1; i < n; i++) {
        seq *c;
        if (seq_create(r, max_len, e->opt.block_size, e->mem.n_groups, e->tok, &c, err)) {
            for (int k = 0; k < s->n_forks; k++) seq_free(s->forks[k]);
            seq_free(s);
            return PITH_SUBMIT_INVALID;
        }
        c->media = media_set_ref(ms);
        c->sampling.seed += (uint64_t)i;
        c->sibling = i;
        c->fork_parent = s;
        s->forks[s->n_forks++] = c;
    }

    pthread_mutex_lock(&e->lock);
    int rc = 0;
    if (e->shutting_down) {
        rc = pith_errf(err, "the engine is shutting down");
    } else if (e->n_live - e->stats.running + n > e->opt.max_waiting) {
        rc = pith_errf(err, "too many requests waiting (%d)", e->opt.max_waiting);
    } else if (engine_grow_list(&e->live, &e->cap_live, e->n_live + n) ||
               engine_grow_list(&e->incoming, &e->cap_incoming, e->n_incoming + 1)) {
        rc = pith_errf(err, "out of memory");
    }
    if (rc) {
        e->stats.requests_rejected += (uint64_t)n;
        pthread_mutex_unlock(&e->lock);
        for (int k = 0; k < s->n_forks; k++) seq_free(s->forks[k]);
        seq_free(s);
        return PITH_SUBMIT_BUSY;
    }
    s->id = e->next_id;
    e->next_id += (uint64_t)n;
    s->arrival = s->id;
    /* MEAN and CLS need every position computed: a salt of their own keeps other requests' prefixes out */
    if (s->embed == PITH_EMBED_MEAN || s->embed == PITH_EMBED_CLS || s->prompt_logprobs)
        s->salt ^= 0x9e3779b97f4a7c15ull * s->id; /* prompt_logprobs likewise needs every position's row */
    e->live[e->n_live++] = s;
    for (int k = 0; k < s->n_forks; k++) {
        seq *c = s->forks[k];
        c->id = c->arrival = s->id + (uint64_t)c->sibling;
        c->state = SEQ_WAITING;
        e->live[e->n_live++] = c; /* live (cancel, final events), in no queue until it forks */
    }
    e->incoming[e->n_incoming++] = s;
    e->stats.requests_submitted += (uint64_t)n;
    e->stats.prompt_tokens += (uint64_t)r->n_prompt * (uint64_t)n;
    e->stats.waiting = e->n_live - e->stats.running;
    if (id) *id = s->id;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
    return 0;
}

int pith_engine_cancel(pith_engine *e, uint64_t id) {
    int rc = -1;
    pthread_mutex_lock(&e->lock);
    for (int i = 0; i < e->n_live; i++) {
        seq *s = e->live[i];
        if (s->id != id) continue;
        if (!s->cancel_requested) {
            s->cancel_requested = true;
            e->n_cancel_pending++;
            pthread_cond_signal(&e->wake);
        }
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&e->lock);
    return rc;
}

int engine_cancel_live(pith_engine *e) {
    int n = 0;
    pthread_mutex_lock(&e->lock);
    for (int i = 0; i < e->n_live; i++) {
        seq *s = e->live[i];
        if (s->cancel_requested) continue;
        s->cancel_requested = true;
        e->n_cancel_pending++;
        n++;
    }
    pthread_cond_broadcast(&e->wake);
    pthread_mutex_unlock(&e->lock);
    return n;
}

bool pith_engine_has_work(pith_engine *e) {
    pthread_mutex_lock(&e->lock);
    bool work = e->n_live > 0;
    pthread_mutex_unlock(&e->lock);
    return work;
}

int pith_engine_max_seq_len(const pith_engine *e) { return e->opt.max_seq_len; }
int pith_engine_n_vocab(const pith_engine *e) { return e->n_vocab; }

int pith_engine_n_embd(const pith_engine *e) { return e->n_embd; }

void pith_engine_get_stats(pith_engine *e, pith_engine_stats *out) {
    pthread_mutex_lock(&e->lock);
    *out = e->stats;
    out->waiting = e->n_live - out->running;
    pthread_mutex_unlock(&e->lock);
}

void engine_publish_stats(pith_engine *e) {
    pith_engine_stats *st = &e->stats;
    pthread_mutex_lock(&e->lock);
    st->running = e->sc.n_running;
    st->waiting = e->n_live - st->running;
    st->kv_blocks_total = st->kv_blocks_used = st->kv_blocks_cached = st->kv_blocks_free = 0;
    st->mem_bytes = 0;
    st->n_mem_groups = e->mem.n_groups;
    for (int g = 0; g < e->mem.n_groups; g++) {
        const mem_group *mg = &e->mem.g[g];
        pith_engine_mem_stats *ms = &st->mem[g];
        ms->kind = mg->kind;
        ms->window = mg->window;
        ms->n_layers = e->model->mem.groups[g].n_layers;
        ms->unit_bytes = mg->unit_bytes;
        if (mg->kind == PITH_MEM_RECURRENT) {
            ms->units_total = mg->n_slots + mg->n_snaps;
            ms->units_free = mg->n_free_slots + mg->snaps.n_free;
            ms->units_used = mg->n_slots - mg->n_free_slots + mg->snaps.n_used;
            ms->units_cached = mg->snaps.n_cached;
            ms->snapshot_units = mg->n_snaps;
        } else {
            ms->units_total = mg->pool.n_blocks;
            ms->units_used = mg->pool.n_used;
            ms->units_cached = mg->pool.n_cached;
            ms->units_free = mg->pool.n_free;
            st->kv_blocks_total += ms->units_total;
            st->kv_blocks_used += ms->units_used;
            st->kv_blocks_cached += ms->units_cached;
            st->kv_blocks_free += ms->units_free;
        }
        st->mem_bytes += (size_t)ms->units_total * ms->unit_bytes;
    }
    st->block_size = e->opt.block_size;
    st->max_num_seqs = e->opt.max_num_seqs;
    st->max_batch_tokens = e->opt.max_batch_tokens;
    st->max_seq_len = e->opt.max_seq_len;
    st->prefix_cache_queries = e->sc.cache_queries;
    st->prefix_cache_hits = e->sc.cache_hits;
    st->preemptions = e->sc.preemptions;
    st->state_snapshots = e->mem.snaps_taken;
    st->state_restores = e->mem.snaps_restored;
    st->forked_sequences = e->n_forked;
    st->spec_draft_tokens = e->spec_drafted;
    st->spec_accepted_tokens = e->spec_accepted;
    st->spec_verify_steps = e->spec_verifies;
    st->steps = e->n_forwards;
    st->computed_tokens = e->n_computed_tokens;
    st->generation_tokens = e->n_generated;
    st->weight_generation = e->generation;
    st->requests_restarted = e->n_restarted;
    st->media_encoded = e->n_media_encoded;
    st->media_cache_hits = e->n_media_hits;
    st->encoder_cache_bytes = e->enc.bytes;
    st->paused = e->hold;
    st->asleep = e->asleep;
    pthread_mutex_unlock(&e->lock);
}

/* Background thread: steps while there is work, sleeps on `wake` otherwise. */
static void *engine_thread(void *arg) {
    pith_engine *e = arg;
    pthread_mutex_lock(&e->lock);
    while (!e->stop_requested) {
        /* Idle: no work, or nothing that may run while paused (held requests wait for a resume). */
        bool idle = e->n_live == 0 || (e->n_cancel_pending == 0 && (e->frozen || (e->hold && e->n_live == e->n_incoming)));
        if (idle) {
            pthread_cond_wait(&e->wake, &e->lock);
            continue;
        }
        pthread_mutex_unlock(&e->lock);
        pith_err err;
        bool progressed = engine_step(e, &err) != 0;
        pthread_mutex_lock(&e->lock);
        if (!progressed && !e->stop_requested) {
            /* Nothing could run (should not happen while work exists); do not spin. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 1000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&e->wake, &e->lock, &ts);
        }
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

int pith_engine_start(pith_engine *e, pith_err *err) {
    if (e->thread_started) return pith_errf(err, "the engine thread is already running");
    e->stop_requested = false;
    if (pthread_create(&e->thread, NULL, engine_thread, e)) return pith_errf(err, "cannot start the engine thread");
    e->thread_started = true;
    return 0;
}

void pith_engine_stop(pith_engine *e) {
    if (!e->thread_started) return;
    pthread_mutex_lock(&e->lock);
    e->stop_requested = true;
    pthread_cond_broadcast(&e->wake);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->thread, NULL);
    e->thread_started = false;
}

int pith_engine_step(pith_engine *e, pith_err *err) {
    pith_err local;
    if (!err) err = &local;
    err->msg[0] = 0;
    engine_step(e, err);
    return err->msg[0] ? -1 : 0;
}

int pith_engine_run_until(pith_engine *e, pith_run_check check, void *user, pith_err *err) {
    if (e->thread_started) return pith_errf(err, "the engine's thread is running: it steps the engine itself");
    int rc = 0;
    while (pith_engine_has_work(e)) {
        pith_run_action act = check ? check(user) : PITH_RUN_CONTINUE;
        if (act == PITH_RUN_STOP) return rc ? rc : 1;
        /* Cancelling flags only: the final events come from the steps below, like any cancel's. */
        if (act == PITH_RUN_CANCEL) engine_cancel_live(e);
        pith_err step_err;
        if (pith_engine_step(e, &step_err) && rc == 0) {
            rc = -1;
            if (err) *err = step_err;
        }
    }
    return rc;
}

int pith_engine_run(pith_engine *e, pith_err *err) { return pith_engine_run_until(e, NULL, NULL, err); }
