/* Media spans in a step: the encoder runs for the spans this step's tokens enter that the encoder cache
 * does not hold (all of them in one call, across requests), and the batch gets their rows in place of
 * the placeholder tokens' embeddings (batch.h: embed_rows, attend_last), and for an M-RoPE model every
 * token of a sequence with images its three positions (rope_pos). */
#include <stdlib.h>
#include <string.h>

#include "core/engine_internal.h"

static engine_media_item *find_item(pith_engine *e, uint64_t hash, int rows) {
    for (int i = 0; i < e->n_m_items; i++)
        if (e->m_items[i].hash == hash && e->m_items[i].rows == rows) return &e->m_items[i];
    return NULL;
}

/* Iterates sp over the spans of s that its scheduled tokens [n_computed, n_computed + n_sched) enter. */
#define FOR_SCHEDULED_SPANS(s, sp)                                                                               \
    for (const media_span *sp = (s)->media ? (s)->media->spans : NULL,                                           \
                          *sp##_end = (s)->media ? (s)->media->spans + (s)->media->n : NULL;                     \
         sp && sp < sp##_end; sp++)                                                                              \
        if (sp->pos < (s)->n_computed + (s)->n_sched && sp->pos + sp->n_tokens > (s)->n_computed)

/* True when s needs a span encoded this step. */
static bool needs_fresh(pith_engine *e, const seq *s) {
    FOR_SCHEDULED_SPANS(s, sp) {
        const engine_media_item *it = find_item(e, sp->hash, sp->n_tokens);
        if (it && it->fresh) return true;
    }
    return false;
}

/* Runs the encoder once for every fresh item. 0, or -1 with err. */
static int encode_fresh(pith_engine *e, int n_fresh, pith_err *err) {
    const sched *sc = &e->sc;
    pith_media *items = calloc((size_t)n_fresh, sizeof *items);
    const pith_media **ptrs = calloc((size_t)n_fresh, sizeof *ptrs);
    float **outs = calloc((size_t)n_fresh, sizeof *outs);
    int rc = items && ptrs && outs ? 0 : pith_errf(err, "out of memory for image embeddings");
    for (int k = 0, m = 0; k < e->n_m_items && !rc; k++) {
        const engine_media_item *it = &e->m_items[k];
        if (!it->fresh) continue;
        for (int i = 0; i < sc->n_batch && !items[m].input; i++) { /* the input: any sequence holding the span */
            FOR_SCHEDULED_SPANS(sc->batch[i], sp) {
                if (sp->hash == it->hash && sp->n_tokens == it->rows) {
                    items[m] = (pith_media){.pos = sp->pos, .n_tokens = sp->n_tokens, .input = sp->input,
                                            .n_input = sp->n_input, .hash = sp->hash, .rows = sp->rows,
                                            .cols = sp->cols};
                    break;
                }
            }
        }
        ptrs[m] = &items[m];
        outs[m++] = (float *)it->data;
    }
    if (!rc) rc = e->opt.encoder->encode(e->opt.encoder->user, ptrs, n_fresh, outs, err);
    if (!rc) e->n_media_encoded += (uint64_t)n_fresh;
    free(items);
    free(ptrs);
    free(outs);
    return rc;
}

int engine_media_prepare(pith_engine *e) {
    sched *sc = &e->sc;
    const int dim = e->opt.encoder ? e->opt.encoder->out_dim : e->model->hp.dim; /* a row: the model's embed parts */
    e->n_m_items = 0;
    int n_fresh = 0;
    pith_err err = {0};
    int rc = 0;
    /* The spans the batch needs: cached ones pinned, the others given room. */
    for (int i = 0; i < sc->n_batch && !rc; i++) {
        const seq *s = sc->batch[i];
        FOR_SCHEDULED_SPANS(s, sp) {
            if (find_item(e, sp->hash, sp->n_tokens)) continue;
            if (e->n_m_items == e->cap_m_items) {
                int cap = e->cap_m_items ? 2 * e->cap_m_items : 8;
                engine_media_item *v = realloc(e->m_items, (size_t)cap * sizeof *v);
                if (!v) {
                    rc = pith_errf(&err, "out of memory for image embeddings");
                    break;
                }
                e->m_items = v;
                e->cap_m_items = cap;
            }
            engine_media_item *it = &e->m_items[e->n_m_items++];
            *it = (engine_media_item){.hash = sp->hash, .rows = sp->n_tokens};
            if ((it->data = enc_cache_get(&e->enc, sp->hash, sp->n_tokens, dim))) {
                e->n_media_hits++;
                continue;
            }
            it->fresh = true;
            n_fresh++;
            float *rows = enc_cache_put(&e->enc, sp->hash, sp->n_tokens, dim);
            if (!rows) rows = it->own = malloc((size_t)sp->n_tokens * (size_t)dim * sizeof *rows);
            if (!rows) {
                rc = pith_errf(&err, "out of memory for the rows of an image");
                break;
            }
            it->data = rows;
        }
    }
    if (!rc && n_fresh > 0) rc = encode_fresh(e, n_fresh, &err);
    if (!rc) return 0;
    /* The requests that needed this step's encodings end with the error; the rest of the batch runs. */
    int finished = 0;
    for (int i = 0; i < sc->n_batch;) {
        seq *s = sc->batch[i];
        if (!needs_fresh(e, s)) {
            i++;
            continue;
        }
        sched_remove(sc, s); /* takes it out of sc->batch */
        engine_finish(e, s, PITH_FINISH_ERROR, false, err.msg[0] ? err.msg : "the image encoder failed");
        finished++;
    }
    for (int k = 0; k < e->n_m_items; k++) {
        engine_media_item *it = &e->m_items[k];
        if (!it->fresh) continue;
        if (it->own) free(it->own);
        else if (it->data) enc_cache_drop(&e->enc, it->data);
        it->own = NULL;
        it->data = NULL;
    }
    return finished;
}

int engine_media_batch(pith_engine *e, pith_batch *b, pith_err *err) {
    const sched *sc = &e->sc;
    if (e->n_m_items == 0) return 0;
    const size_t nt = (size_t)e->opt.max_batch_tokens, dim = (size_t)e->opt.encoder->out_dim;
    if (!e->b_embed_rows) {
        e->b_embed_rows = malloc(nt * sizeof *e->b_embed_rows);
        e->b_attend_last = malloc(nt * sizeof *e->b_attend_last);
        e->b_embeds = malloc(nt * dim * sizeof *e->b_embeds);
        if (!e->b_embed_rows || !e->b_attend_last || !e->b_embeds) {
            free(e->b_embed_rows);
            free(e->b_attend_last);
            free(e->b_embeds);
            e->b_embed_rows = e->b_attend_last = NULL;
            e->b_embeds = NULL;
            return pith_errf(err, "out of memory for the batch's image rows");
        }
    }
    int n_rows = 0;
    for (int i = 0, t = 0; i < sc->n_batch; i++) {
        const seq *s = sc->batch[i];
        for (int j = 0; j < s->n_sched; j++, t++) {
            int p = s->n_computed + j;
            e->b_embed_rows[t] = -1;
            e->b_attend_last[t] = p;
            int k = s->n_draft > 0 ? -1 : media_span_at(s->media, p); /* a draft is never in the prompt */
            if (k < 0) continue;
            const media_span *sp = &s->media->spans[k];
            const engine_media_item *it = find_item(e, sp->hash, sp->n_tokens);
            if (!it) return pith_errf(err, "image rows missing for request %llu (a bug)", (unsigned long long)s->id);
            memcpy(&e->b_embeds[(size_t)n_rows * dim], &it->data[(size_t)(p - sp->pos) * dim], dim * sizeof *e->b_embeds);
            e->b_embed_rows[t] = n_rows++;
            if (sc->whole_spans) e->b_attend_last[t] = sp->pos + sp->n_tokens - 1;
        }
    }
    if (n_rows == 0) return 0;
    b->embed_rows = e->b_embed_rows;
    b->embeds = e->b_embeds;
    b->n_embeds = n_rows;
    b->embed_stride = (int)dim;
    if (sc->whole_spans) b->attend_last = e->b_attend_last;
    return 0;
}

int engine_media_rope(pith_engine *e, pith_batch *b, pith_err *err) {
    const sched *sc = &e->sc;
    if (!e->model->has_mrope) return 0;
    bool any = false;
    for (int i = 0; i < sc->n_batch && !any; i++) any = sc->batch[i]->media && sc->batch[i]->media->n > 0;
    if (!any) return 0; /* every position is the token's own: plain RoPE */
    if (!e->b_rope_pos && !(e->b_rope_pos = malloc((size_t)3 * e->opt.max_batch_tokens * sizeof *e->b_rope_pos)))
        return pith_errf(err, "out of memory for the batch's M-RoPE positions");
    for (int i = 0, t = 0; i < sc->n_batch; i++) {
        const seq *s = sc->batch[i];
        for (int j = 0; j < s->n_sched; j++, t++) media_rope_pos(s->media, s->n_computed + j, &e->b_rope_pos[3 * t]);
    }
    b->rope_pos = e->b_rope_pos;
    return 0;
}

void engine_media_done(pith_engine *e) {
    for (int k = 0; k < e->n_m_items; k++) free(e->m_items[k].own);
    e->n_m_items = 0;
    enc_cache_unpin_all(&e->enc);
}
