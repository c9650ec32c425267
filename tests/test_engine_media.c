/* Media spans in the engine (engine.h: pith_media), over a fake model that reads embedding rows as
 * tokens (engine_fake_model.h) and a fake encoder whose rows are a function of the input, so that the
 * greedy output of every request is predicted independently from the prompt with each span replaced by
 * its rows' ids. Checks, with the integrity check after every step:
 *   - the helpers: span validation, block keys, where chunks may end, the encoder cache's budget, LRU
 *     and pins;
 *   - an image request alone, batched with text and other image requests, with chunks cut around a
 *     span (the fake model flags a span split across batches), preempted (recomputed from the encoder
 *     cache), n = 2 siblings, and a second turn served from the prefix cache without encoding again;
 *   - the same tokens with another image are not a prefix hit past the span;
 *   - the encoder cache's budget (evicting, re-encoding) and an entry larger than the budget;
 *   - an encoder failure ends only the requests that needed it;
 *   - refusals at submit. */
#include <stdint.h>

#include "check.h"
#include "core/engine_internal.h"
#include "core/media.h"
#include "engine_fake_model.h"

enum { V = 2000, DIM = 4, IMG = 999, MAXT = 64 };

/* The fake encoder: row r of an image whose input starts with x counts as token 1000 + (x * 37 + r) % 1000.
 * An input whose first float is negative fails. */
typedef struct fake_enc {
    int calls, items;
    bool fail_negative;
} fake_enc;

static int32_t row_id(float x, int r) { return 1000 + (int32_t)(((int64_t)x * 37 + r) % 1000); }

static int fake_encode(void *user, const pith_media *const *items, int n, float *const *out, pith_err *err) {
    fake_enc *fe = user;
    fe->calls++;
    fe->items += n;
    for (int i = 0; i < n; i++)
        if (items[i]->input[0] < 0) return pith_errf(err, "fake encoder: bad image %d", i);
    for (int i = 0; i < n; i++)
        for (int r = 0; r < items[i]->n_tokens; r++)
            for (int d = 0; d < DIM; d++) out[i][r * DIM + d] = d == 0 ? (float)row_id(items[i]->input[0], r) : 0.5f;
    return 0;
}

typedef struct outs {
    int32_t toks[MAXT];
    int n, n_final, cached;
    pith_finish_reason why;
    char error[160];
} outs;

static void collect(const pith_token_event *ev, void *user) {
    outs *o = user;
    if (ev->final) {
        o->n_final++;
        o->why = ev->finish_reason;
        o->cached = ev->usage.cached_tokens;
        snprintf(o->error, sizeof o->error, "%s", ev->error);
    } else if (o->n < MAXT) {
        o->toks[o->n++] = ev->token;
    }
}

/* A prompt of n tokens: text ids, with spans [pos, pos + len) of the image token. */
typedef struct prompt {
    int32_t t[256];
    int n;
    pith_media m[4];
    float in[4][8];
    int n_media;
} prompt;

static void make_prompt(prompt *p, int n, uint32_t seed) {
    memset(p, 0, sizeof *p);
    p->n = n;
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p->t[i] = (int32_t)((seed >> 16) % 900);
    }
}

static void add_image(prompt *p, int pos, int len, float x) {
    int k = p->n_media++;
    for (int i = 0; i < len; i++) p->t[pos + i] = IMG;
    for (int i = 0; i < 8; i++) p->in[k][i] = x + (float)i;
    p->m[k] = (pith_media){.pos = pos, .n_tokens = len, .input = p->in[k], .n_input = 8};
}

/* The greedy continuation, from the prompt with each span's rows in place of its tokens. */
static void expect(const fake_state *st, const prompt *p, int n_gen, int32_t *out) {
    int32_t t[512];
    memcpy(t, p->t, (size_t)p->n * sizeof *t);
    for (int k = 0; k < p->n_media; k++)
        for (int r = 0; r < p->m[k].n_tokens; r++) t[p->m[k].pos + r] = row_id(p->in[k][0], r);
    int n = p->n;
    for (int i = 0; i < n_gen; i++) {
        out[i] = fake_next_for(st, t, n, V);
        t[n++] = out[i];
    }
}

static pith_request greedy(const prompt *p, int max_tokens, outs *o) {
    pith_request r = {.prompt = p->t, .n_prompt = p->n, .sampling = pith_sampling_defaults(), .max_tokens = max_tokens,
                      .on_token = collect, .user = o, .ignore_eos = true, .media = p->m, .n_media = p->n_media};
    r.sampling.temperature = 0;
    return r;
}

static pith_model *media_model(bool window) {
    fake_group_def defs[2] = {{PITH_MEM_FULL, 0, 2}, {PITH_MEM_WINDOW, 12, 1}};
    pith_model *m = fake_model_new_spec(V, 0, defs, window ? 2 : 1, 1);
    m->hp.dim = DIM;
    m->hp.ctx_len = 512;
    m->has_embeds = true;
    m->bidirectional_spans = true;
    return m;
}

static void run_all(pith_engine *e) {
    pith_err err;
    int guard = 0;
    while (pith_engine_has_work(e) && guard++ < 10000) {
        CHECKF(pith_engine_step(e, &err) == 0, "%s (%s)", err.msg, fake_of(e->model)->first_violation);
        CHECKF(engine_check(e, &err) == 0, "%s", err.msg);
    }
    CHECK(!pith_engine_has_work(e));
    CHECKF(fake_of(e->model)->violations == 0, "%s", fake_of(e->model)->first_violation);
}

static void check_out(const fake_state *st, const prompt *p, const outs *o, int n_gen, const char *what) {
    int32_t want[MAXT];
    expect(st, p, n_gen, want);
    CHECKF(o->n_final == 1 && o->why == PITH_FINISH_LENGTH, "%s: final %d, reason %d (%s)", what, o->n_final, (int)o->why, o->error);
    CHECKF(o->n == n_gen, "%s: %d tokens", what, o->n);
    int bad = -1;
    for (int i = 0; i < o->n && i < n_gen && bad < 0; i++)
        if (o->toks[i] != want[i]) bad = i;
    CHECKF(bad < 0, "%s: token %d is %d, expected %d", what, bad, bad >= 0 ? o->toks[bad] : 0, bad >= 0 ? want[bad] : 0);
}

static void test_helpers(void) {
    pith_err err;
    float in[4] = {1, 2, 3, 4};
    pith_media m[2] = {{.pos = 2, .n_tokens = 5, .input = in, .n_input = 4}, {.pos = 9, .n_tokens = 3, .input = in, .n_input = 4}};
    media_set *ms;
    CHECK(media_set_create(m, 2, 12, &ms, &err) == 0);
    CHECK(ms->spans[0].hash == ms->spans[1].hash && ms->spans[0].hash != 0); /* same input, same hash */
    CHECK(media_span_at(ms, 1) == -1 && media_span_at(ms, 2) == 0 && media_span_at(ms, 6) == 0 && media_span_at(ms, 7) == -1);
    CHECK(media_span_at(ms, 9) == 1 && media_span_at(ms, 11) == 1 && media_span_at(ms, 12) == -1);
    CHECK(media_block_key(ms, 0, 2) == 0 && media_block_key(ms, 7, 9) == 0);
    CHECK(media_block_key(ms, 0, 4) != 0 && media_block_key(ms, 0, 4) != media_block_key(ms, 4, 8));
    CHECK(media_chunk_end(ms, 0, 2, 100) == 2);   /* ends before the span */
    CHECK(media_chunk_end(ms, 0, 4, 100) == 2);   /* would cut it: ends at its start */
    CHECK(media_chunk_end(ms, 2, 4, 100) == 7);   /* starts at it: takes it whole */
    CHECK(media_chunk_end(ms, 2, 4, 6) == 2);     /* ... or nothing when it does not fit */
    CHECK(media_chunk_end(ms, 4, 5, 7) == 7);     /* resumed inside it (a prefix hit): the rest */
    CHECK(media_chunk_end(ms, 0, 12, 12) == 12);
    CHECK(media_chunk_end(NULL, 0, 4, 4) == 4);
    media_set *ms2 = media_set_ref(ms);
    media_set_unref(ms);
    CHECK(ms2->n == 2);
    media_set_unref(ms2);
    float other[4] = {1, 2, 3, 5};
    pith_media a = {.pos = 0, .n_tokens = 4, .input = in, .n_input = 4}, b = a;
    b.input = other;
    media_set *sa = NULL, *sb = NULL;
    CHECK(media_set_create(&a, 1, 8, &sa, &err) == 0);
    CHECK(media_set_create(&b, 1, 8, &sb, &err) == 0);
    CHECK(media_block_key(sa, 0, 4) != media_block_key(sb, 0, 4)); /* another image: another name */
    media_set_unref(sa);
    media_set_unref(sb);
    /* refusals */
    pith_media bad[2] = {{.pos = 10, .n_tokens = 5, .input = in, .n_input = 4}};
    CHECK(media_set_create(bad, 1, 12, &ms, &err) == -1 && strstr(err.msg, "outside the prompt"));
    bad[0] = (pith_media){.pos = 0, .n_tokens = 5, .input = in, .n_input = 4};
    bad[1] = (pith_media){.pos = 4, .n_tokens = 2, .input = in, .n_input = 4};
    CHECK(media_set_create(bad, 2, 12, &ms, &err) == -1 && strstr(err.msg, "inside or before"));
    bad[1] = (pith_media){.pos = 6, .n_tokens = 2, .input = NULL, .n_input = 4};
    CHECK(media_set_create(bad, 2, 12, &ms, &err) == -1 && strstr(err.msg, "no encoder input"));

    enc_cache c;
    enc_cache_init(&c, 3 * 10 * DIM * sizeof(float)); /* three entries of 10 rows */
    float *r1 = enc_cache_put(&c, 1, 10, DIM), *r2 = enc_cache_put(&c, 2, 10, DIM), *r3 = enc_cache_put(&c, 3, 10, DIM);
    CHECK(r1 && r2 && r3);
    CHECK(!enc_cache_put(&c, 4, 10, DIM)); /* all pinned this step: no room */
    CHECK(enc_cache_check(&c, &err) == 0);
    enc_cache_unpin_all(&c);
    CHECK(enc_cache_get(&c, 1, 10, DIM) == r1); /* 1 is now the most recent */
    CHECK(!enc_cache_get(&c, 1, 11, DIM));      /* another shape: another entry */
    enc_cache_unpin_all(&c);
    CHECK(enc_cache_put(&c, 4, 10, DIM) != NULL); /* evicts 2, the least recent */
    CHECK(!enc_cache_get(&c, 2, 10, DIM) && enc_cache_get(&c, 1, 10, DIM) && enc_cache_get(&c, 3, 10, DIM));
    CHECK(!enc_cache_put(&c, 5, 31, DIM)); /* larger than the budget */
    CHECK(c.bytes <= c.budget && enc_cache_check(&c, &err) == 0);
    enc_cache_drop(&c, r1);
    CHECK(!enc_cache_get(&c, 1, 10, DIM) && enc_cache_check(&c, &err) == 0);
    enc_cache_free(&c);
}

static pith_engine *make_engine(pith_model *m, fake_enc *fe, pith_encoder *enc, int kv_blocks, int max_batch, size_t cache) {
    *enc = (pith_encoder){.out_dim = DIM, .encode = fake_encode, .user = fe};
    pith_engine_options o = {.block_size = 4, .kv_blocks = kv_blocks, .max_batch_tokens = max_batch, .max_num_seqs = 8,
                             .encoder = enc, .encoder_cache_bytes = cache};
    pith_engine *e;
    pith_err err;
    CHECKF(pith_engine_create(m, NULL, &o, &e, &err) == 0, "%s", err.msg);
    return e;
}

static void submit(pith_engine *e, const pith_request *r) {
    pith_err err;
    uint64_t id;
    CHECKF(pith_engine_submit(e, r, &id, &err) == 0, "%s", err.msg);
}

static void test_alone_batched_chunked(bool window) {
    pith_model *m = media_model(window);
    fake_enc fe = {0};
    pith_encoder enc;
    pith_engine *e = make_engine(m, &fe, &enc, 0, 16, 0);
    const fake_state *st = fake_of(m);
    prompt a, b, c, t;
    make_prompt(&a, 30, 1);
    add_image(&a, 7, 10, 3); /* a chunk of 16 would end inside it: the first chunk ends at 7 */
    make_prompt(&b, 40, 2);
    add_image(&b, 2, 12, 50);
    add_image(&b, 20, 9, 3); /* the same image as a's, in another place and size */
    make_prompt(&c, 20, 3);
    add_image(&c, 4, 16, 9); /* exactly the budget */
    make_prompt(&t, 25, 4);  /* text only */
    outs oa = {0}, ob = {0}, oc = {0}, ot = {0};
    pith_request ra = greedy(&a, 6, &oa);
    submit(e, &ra);
    run_all(e);
    check_out(st, &a, &oa, 6, "alone");
    CHECK(fe.items == 1 && st->embed_rows_seen == 10);
    pith_request rb = greedy(&b, 5, &ob), rc = greedy(&c, 4, &oc), rt = greedy(&t, 7, &ot);
    memset(&oa, 0, sizeof oa);
    ra.cache_salt = "again"; /* no prefix hit: computed again, the image from the encoder cache */
    submit(e, &rb);
    submit(e, &rt);
    submit(e, &rc);
    submit(e, &ra);
    run_all(e);
    check_out(st, &a, &oa, 6, "batched a");
    check_out(st, &b, &ob, 5, "batched b");
    check_out(st, &c, &oc, 4, "batched c");
    check_out(st, &t, &ot, 7, "batched text");
    pith_engine_stats s;
    pith_engine_get_stats(e, &s);
    CHECKF(fe.items == 4 && s.media_encoded == 4, "encoded %d items", fe.items); /* a's image once: a cache hit */
    CHECK(s.media_cache_hits >= 1);
    pith_engine_free(e);
    m->ops->destroy(m);
}

static void test_preempted_and_forked(void) {
    pith_model *m = media_model(true);
    fake_enc fe = {0};
    pith_encoder enc;
    /* 24 blocks of 4: three 32-token sequences cannot all grow to their ends at once */
    pith_engine *e = make_engine(m, &fe, &enc, 24, 64, 0);
    const fake_state *st = fake_of(m);
    prompt p[3];
    outs o[3];
    memset(o, 0, sizeof o);
    for (int i = 0; i < 3; i++) {
        make_prompt(&p[i], 14, 10 + (uint32_t)i);
        add_image(&p[i], 3, 8, (float)(100 + i));
        pith_request r = greedy(&p[i], 24, &o[i]);
        submit(e, &r);
    }
    run_all(e);
    pith_engine_stats s;
    pith_engine_get_stats(e, &s);
    CHECKF(s.preemptions > 0, "no preemption (the test needs one)");
    for (int i = 0; i < 3; i++) check_out(st, &p[i], &o[i], 24, "preempted");
    CHECKF(fe.items == 3, "encoded %d items for 3 images", fe.items);

    /* n = 2: the siblings fork from one prefill */
    prompt f;
    make_prompt(&f, 18, 20);
    add_image(&f, 5, 6, 7);
    outs of = {0};
    pith_request r = greedy(&f, 5, &of);
    r.n = 2;
    r.user = &of;
    int before = fe.items;
    submit(e, &r);
    run_all(e);
    CHECKF(of.n_final == 2 && of.n == 10, "siblings: %d finals, %d tokens", of.n_final, of.n);
    CHECK(fe.items == before + 1);
    pith_engine_free(e);
    m->ops->destroy(m);
}

static void test_second_turn(void) {
    pith_model *m = media_model(false);
    fake_enc fe = {0};
    pith_encoder enc;
    pith_engine *e = make_engine(m, &fe, &enc, 0, 64, 0);
    const fake_state *st = fake_of(m);
    prompt a;
    make_prompt(&a, 21, 30);
    add_image(&a, 4, 9, 11);
    outs oa = {0};
    pith_request r = greedy(&a, 8, &oa);
    submit(e, &r);
    run_all(e);
    check_out(st, &a, &oa, 8, "first turn");
    /* the next turn: the first prompt, its answer, and more text */
    prompt b = a;
    memcpy(&b.t[a.n], oa.toks, 8 * sizeof(int32_t));
    for (int i = 0; i < 6; i++) b.t[a.n + 8 + i] = 100 + i;
    b.n = a.n + 14;
    for (int k = 0; k < b.n_media; k++) b.m[k].input = b.in[k];
    outs ob = {0};
    r = greedy(&b, 5, &ob);
    int before = fe.items;
    submit(e, &r);
    run_all(e);
    check_out(st, &b, &ob, 5, "second turn");
    CHECKF(ob.cached >= 24, "second turn: %d cached tokens", ob.cached);
    CHECKF(fe.items == before, "the image was encoded again (%d items)", fe.items - before);
    /* the same tokens with another image: no hit past the block before the span */
    prompt c = a;
    for (int i = 0; i < 8; i++) c.in[0][i] = 500 + (float)i;
    c.m[0].input = c.in[0];
    outs oc = {0};
    r = greedy(&c, 8, &oc);
    submit(e, &r);
    run_all(e);
    check_out(st, &c, &oc, 8, "another image");
    CHECKF(oc.cached <= 4, "another image: %d cached tokens", oc.cached);
    pith_engine_free(e);
    m->ops->destroy(m);
}

static void test_cache_budget_and_failure(void) {
    pith_model *m = media_model(false);
    fake_enc fe = {0};
    pith_encoder enc;
    /* room for one image of 10 rows */
    pith_engine *e = make_engine(m, &fe, &enc, 0, 64, 10 * DIM * sizeof(float) + 8);
    const fake_state *st = fake_of(m);
    prompt p[2];
    for (int i = 0; i < 2; i++) {
        make_prompt(&p[i], 16, 40 + (uint32_t)i);
        add_image(&p[i], 2, 10, (float)(200 + 10 * i));
    }
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 2; i++) {
            outs o = {0};
            pith_request r = greedy(&p[i], 3, &o);
            r.cache_salt = round ? "r1" : "r0";
            submit(e, &r);
            run_all(e);
            check_out(st, &p[i], &o, 3, "budget");
            CHECK(e->enc.bytes <= e->enc.budget);
        }
    CHECKF(fe.items == 4, "alternating two images through a one-image cache: %d encodings", fe.items);
    /* an image larger than the budget: encoded for its step, not kept */
    prompt big;
    make_prompt(&big, 30, 50);
    add_image(&big, 1, 20, 300);
    outs ob = {0};
    pith_request r = greedy(&big, 3, &ob);
    submit(e, &r);
    run_all(e);
    check_out(st, &big, &ob, 3, "larger than the budget");
    /* a failing image: its request ends with the error, the text request beside it is unharmed */
    fe.fail_negative = true;
    prompt bad, t;
    make_prompt(&bad, 16, 60);
    add_image(&bad, 2, 6, -5);
    make_prompt(&t, 12, 61);
    outs obad = {0}, ot = {0};
    pith_request rbad = greedy(&bad, 3, &obad), rt = greedy(&t, 4, &ot);
    submit(e, &rt);
    submit(e, &rbad);
    run_all(e);
    CHECKF(obad.n_final == 1 && obad.why == PITH_FINISH_ERROR && strstr(obad.error, "bad image"), "bad image: reason %d, %s",
           (int)obad.why, obad.error);
    check_out(st, &t, &ot, 4, "beside a bad image");
    pith_err err;
    CHECK(engine_check(e, &err) == 0 && e->enc.bytes <= e->enc.budget);
    pith_engine_free(e);
    m->ops->destroy(m);
}

static void test_refusals(void) {
    pith_err err;
    uint64_t id;
    prompt p;
    make_prompt(&p, 20, 70);
    add_image(&p, 2, 12, 1);
    outs o = {0};
    pith_request r = greedy(&p, 3, &o);
    /* no encoder */
    pith_model *m = media_model(false);
    pith_engine *e;
    pith_engine_options opt = {.block_size = 4, .max_batch_tokens = 8};
    CHECK(pith_engine_create(m, NULL, &opt, &e, &err) == 0);
    CHECK(pith_engine_submit(e, &r, &id, &err) == PITH_SUBMIT_INVALID && strstr(err.msg, "no encoder"));
    pith_engine_free(e);
    /* a span larger than a batch */
    fake_enc fe = {0};
    pith_encoder enc = {.out_dim = DIM, .encode = fake_encode, .user = &fe};
    opt.encoder = &enc;
    CHECK(pith_engine_create(m, NULL, &opt, &e, &err) == 0);
    CHECK(pith_engine_submit(e, &r, &id, &err) == PITH_SUBMIT_INVALID && strstr(err.msg, "one batch"));
    r.media = NULL; /* n_media without the array */
    CHECK(pith_engine_submit(e, &r, &id, &err) == PITH_SUBMIT_INVALID);
    r = greedy(&p, 3, &o);
    p.m[0].n_tokens = 6;
    r.prompt_logprobs = true;
    CHECK(pith_engine_submit(e, &r, &id, &err) == PITH_SUBMIT_INVALID && strstr(err.msg, "prompt logprobs"));
    pith_engine_free(e);
    /* an encoder of the wrong width; a model that takes no images */
    enc.out_dim = DIM + 1;
    CHECK(pith_engine_create(m, NULL, &opt, &e, &err) == -1 && strstr(err.msg, "width"));
    m->ops->destroy(m);
    pith_model *text = fake_model_new(V, 1, 256);
    enc.out_dim = 0;
    CHECK(pith_engine_create(text, NULL, &opt, &e, &err) == -1);
    opt.encoder = NULL;
    CHECK(pith_engine_create(text, NULL, &opt, &e, &err) == 0);
    r = greedy(&p, 3, &o);
    CHECK(pith_engine_submit(e, &r, &id, &err) == PITH_SUBMIT_INVALID && strstr(err.msg, "does not take images"));
    pith_engine_free(e);
    text->ops->destroy(text);
}

int main(void) {
    test_helpers();
    test_alone_batched_chunked(false);
    test_alone_batched_chunked(true);
    test_preempted_and_forked();
    test_second_turn();
    test_cache_budget_and_failure();
    test_refusals();
    return check_summary("test_engine_media");
}
