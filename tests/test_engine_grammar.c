/* The engine with structured output (pith_request.grammar) over the fake model: 12 constrained
 * requests at once, greedy and sampled, in a pool small enough that sequences are preempted and
 * recomputed; every output matches the grammar (checked by accepting it in a fresh matcher), ends with
 * stop exactly where the grammar is complete, and greedy outputs do not depend on the batching (each
 * is also run alone). A grammar for another vocabulary is refused at submission. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "engine_fake_model.h"
#include "pith/engine.h"
#include "pith/grammar.h"

enum { V = 300 };

typedef struct out {
    int32_t toks[512];
    int n;
    int n_final;
    pith_finish_reason why;
} out;

static void collect(const pith_token_event *ev, void *user) {
    out *o = user;
    if (ev->final) {
        o->n_final++;
        o->why = ev->finish_reason;
        return;
    }
    if (o->n < 512) o->toks[o->n++] = ev->token;
}

/* Token i < 256 is byte i; 256.. are short pieces. */
static pith_grammar_vocab *make_vocab(int n) {
    static const char *pieces[] = {"ab", "a,", "[1", "2]", ", ", "xyz", "ba", "aa", "1,", "\"", "{}", "]]"};
    const char *b[V];
    size_t l[V];
    static char bytes[256];
    for (int i = 0; i < n; i++) {
        if (i < 256) {
            bytes[i] = (char)i;
            b[i] = &bytes[i];
            l[i] = 1;
        } else {
            b[i] = pieces[(i - 256) % 12];
            l[i] = strlen(b[i]);
        }
    }
    pith_grammar_vocab *v = NULL;
    pith_err err;
    if (pith_grammar_vocab_new(n, b, l, NULL, &v, &err)) fprintf(stderr, "vocab: %s\n", err.msg);
    return v;
}

static bool valid_output(pith_grammar *g, const out *o) {
    pith_grammar_matcher *m;
    pith_err err;
    if (pith_grammar_matcher_new(g, &m, &err)) return false;
    bool ok = true;
    for (int i = 0; i < o->n && ok; i++) ok = pith_grammar_matcher_accept(m, o->toks[i], &err) == 0;
    ok = ok && pith_grammar_matcher_is_done(m);
    pith_grammar_matcher_free(m);
    return ok;
}

static void run(pith_model *m, pith_engine_options opt, pith_grammar *g, int n_req, const int *which, out *outs) {
    pith_engine *e = NULL;
    pith_err err;
    CHECKF(pith_engine_create(m, NULL, &opt, &e, &err) == 0, "%s", err.msg);
    if (!e) return;
    for (int k = 0; k < n_req; k++) {
        int i = which[k];
        int32_t prompt[6] = {1 + i, 2, 3 + i % 5, 4, 5, 6 + i};
        pith_request r = {.prompt = prompt, .n_prompt = 6, .sampling = pith_sampling_defaults(), .max_tokens = 70,
                          .grammar = g, .on_token = collect, .user = &outs[i]};
        if (i % 2) r.sampling.temperature = 0;
        r.sampling.seed = (uint64_t)i;
        uint64_t id;
        CHECKF(pith_engine_submit(e, &r, &id, &err) == 0, "%s", err.msg);
    }
    CHECK(pith_engine_run(e, &err) == 0);
    pith_engine_stats st;
    pith_engine_get_stats(e, &st);
    if (n_req > 1) CHECKF(st.preemptions > 0, "no preemption (%llu)", (unsigned long long)st.preemptions);
    pith_engine_free(e);
}

int main(void) {
    pith_grammar_vocab *v = make_vocab(V);
    pith_err err;
    /* a list of 3 to 12 items "ab" or "a" or digits, closed by "]" */
    const char *src = "root ::= \"[\" item (\", \" item){2,11} \"]\"\nitem ::= \"ab\" | \"a\" | [0-9]{1,3} | \"xyz\"";
    pith_grammar *g = NULL;
    CHECKF(pith_grammar_compile(v, PITH_GRAMMAR_GBNF, src, strlen(src), &g, &err) == 0, "%s", err.msg);
    pith_model *m = fake_model_new(V, 2, 0);
    enum { N = 12 };
    out together[N], alone[N];
    memset(together, 0, sizeof together);
    memset(alone, 0, sizeof alone);
    int all[N];
    for (int i = 0; i < N; i++) all[i] = i;
    run(m, (pith_engine_options){.block_size = 4, .kv_blocks = 20, .max_num_seqs = 8}, g, N, all, together);
    for (int i = 0; i < N; i++) {
        CHECKF(together[i].n_final == 1 && together[i].why == PITH_FINISH_STOP, "request %d: finish %d", i,
               (int)together[i].why);
        CHECKF(valid_output(g, &together[i]), "request %d: output does not match the grammar", i);
    }
    for (int i = 1; i < N; i += 2) { /* greedy ones, alone */
        run(m, (pith_engine_options){.block_size = 4, .kv_blocks = 200}, g, 1, &i, alone);
        CHECKF(alone[i].n == together[i].n && memcmp(alone[i].toks, together[i].toks, (size_t)alone[i].n * 4) == 0,
               "request %d: greedy output differs when batched", i);
    }
    /* a grammar compiled for another vocabulary */
    pith_grammar_vocab *v2 = make_vocab(280);
    pith_grammar *g2 = NULL;
    CHECK(pith_grammar_compile(v2, PITH_GRAMMAR_GBNF, src, strlen(src), &g2, &err) == 0);
    pith_engine *e = NULL;
    pith_engine_options o = {.block_size = 4, .kv_blocks = 40};
    CHECK(pith_engine_create(m, NULL, &o, &e, &err) == 0);
    int32_t prompt[2] = {1, 2};
    pith_request r = {.prompt = prompt, .n_prompt = 2, .sampling = pith_sampling_defaults(), .max_tokens = 5, .grammar = g2};
    uint64_t id;
    CHECK(pith_engine_submit(e, &r, &id, &err) == PITH_SUBMIT_INVALID && strstr(err.msg, "vocabulary of 280 tokens"));
    pith_engine_free(e);
    pith_grammar_release(g2);
    pith_grammar_vocab_free(v2);
    pith_grammar_release(g);
    pith_model_free(m);
    pith_grammar_vocab_free(v);
    return check_summary("test_engine_grammar");
}
