/* Sampled speculation keeps the target's distribution (spec.h), tested statistically.
 *
 * A fake model (engine_fake_model.h) of V = 5 tokens gives logits that are a fixed function of the
 * sequence; requests sample at temperature 1 (no top-k, top-p or min-p) with N different seeds. After a
 * prompt P and the first sampled token t1, a custom draft source proposes the greedy continuation
 * [a, b] of P t1. The engine verifies: t2 is sampled from the row after P t1 and accepted when it is a,
 * then t3 from the row after P t1 a. The test counts t2 per t1 (the token at the drafted position) and
 * t3 per t1 where t2 == a (the first token after an accepted draft position), and compares each table
 * with the counts the target's probabilities (softmax of its logits, computed here from the model's
 * logits function) predict: Pearson's chi-square over the cells, degrees of freedom (V - 1) per row
 * with observations, p-value from the regularised upper incomplete gamma function. The test rejects
 * at p < 1e-3: a correct engine fails it once in a thousand runs per table, and the seeds are fixed,
 * so it is deterministic.
 *
 * The test can fail: the same tables drawn with a wrong acceptance rule, simulated here (accept the
 * draft token with probability p(a), and on rejection sample from p itself instead of from p with a
 * removed, which over-weights a), must be rejected at the same threshold. */
#include <math.h>
#include <stdint.h>

#include "check.h"
#include "core/engine_internal.h"
#include "engine_fake_model.h"

enum { V = 5, N = 3000, NP = 6 };

static fake_state *fs;
static const int32_t prompt[NP] = {3, 1, 4, 1, 0, 2};

/* The target's probabilities after tokens[0..n) at temperature 1. */
static void probs(const int32_t *tokens, int n, double *p) {
    float row[V];
    fake_logits_row(fake_hash_for(fs, tokens, n), V, row);
    double mx = row[0], z = 0;
    for (int v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
    for (int v = 0; v < V; v++) z += p[v] = exp(row[v] - mx);
    for (int v = 0; v < V; v++) p[v] /= z;
}

static int draft_fn(void *user, uint64_t id, const int32_t *tokens, int n, int32_t *draft, int max) {
    (void)user, (void)id;
    if (n != NP + 1 || max < 2) return 0; /* only after the first sampled token */
    int32_t t[NP + 2];
    memcpy(t, tokens, (size_t)n * sizeof *t);
    draft[0] = t[n] = fake_next_for(fs, t, n, V);
    draft[1] = fake_next_for(fs, t, n + 1, V);
    return 2;
}

typedef struct out {
    int32_t toks[3];
    int n;
} out;

static void collect(const pith_token_event *ev, void *user) {
    out *o = user;
    if (!ev->final && o->n < 3) o->toks[o->n++] = ev->token;
}

/* Q(s, x): the regularised upper incomplete gamma function (series below s + 1, continued fraction
 * above), so the chi-square p-value with k degrees of freedom is Q(k / 2, x / 2). */
static double gamma_q(double s, double x) {
    if (x <= 0) return 1;
    double lg = lgamma(s);
    if (x < s + 1) {
        double term = 1 / s, sum = term;
        for (int n = 1; n < 1000 && fabs(term) > 1e-15 * fabs(sum); n++) sum += term *= x / (s + n);
        return 1 - sum * exp(-x + s * log(x) - lg);
    }
    double b = x + 1 - s, c = 1e300, d = 1 / b, h = d; /* Lentz's method */
    for (int i = 1; i < 1000; i++) {
        double an = -i * (i - s);
        b += 2;
        d = an * d + b;
        d = fabs(d) < 1e-300 ? 1e-300 : d;
        c = b + an / c;
        c = fabs(c) < 1e-300 ? 1e-300 : c;
        d = 1 / d;
        double delta = d * c;
        h *= delta;
        if (fabs(delta - 1) < 1e-15) break;
    }
    return exp(-x + s * log(x) - lg) * h;
}

/* Tables: t2 per t1, and t3 per t1 when t2 was the draft's first token. */
typedef struct tables {
    int t2[V][V], t3[V][V];
} tables;

static void add(tables *t, const int32_t *toks) {
    int32_t seqn[NP + 2];
    memcpy(seqn, prompt, sizeof prompt);
    seqn[NP] = toks[0];
    int32_t a = fake_next_for(fs, seqn, NP + 1, V);
    t->t2[toks[0]][toks[1]]++;
    if (toks[1] == a) t->t3[toks[0]][toks[2]]++;
}

/* The p-value of table m (rows: t1) against the target's probabilities after P t1 (second: P t1 a). */
static double p_value(int m[V][V], bool second, double *stat, int *dof) {
    double x2 = 0;
    int k = 0;
    for (int t1 = 0; t1 < V; t1++) {
        int n = 0;
        for (int v = 0; v < V; v++) n += m[t1][v];
        if (n == 0) continue;
        int32_t s[NP + 2];
        memcpy(s, prompt, sizeof prompt);
        s[NP] = t1;
        int len = NP + 1;
        if (second) s[len] = fake_next_for(fs, s, len, V), len++;
        double p[V];
        probs(s, len, p);
        for (int v = 0; v < V; v++) {
            double e = n * p[v];
            x2 += (m[t1][v] - e) * (m[t1][v] - e) / e;
        }
        k += V - 1;
    }
    *stat = x2;
    *dof = k;
    return gamma_q(k / 2.0, x2 / 2);
}

static uint64_t rng = 0x12345678u;
static double unif(void) {
    rng = fake_mix(rng);
    return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}
static int32_t draw(const double *p) {
    double u = unif(), c = 0;
    for (int v = 0; v < V - 1; v++)
        if (u < (c += p[v])) return v;
    return V - 1;
}

/* The wrong rule for a deterministic draft token d: accept with probability p(d), else sample from p. */
static int32_t wrong_verify(const double *p, int32_t d) { return unif() < p[d] ? d : draw(p); }

static void test_gamma(void) {
    /* chi-square reference values: P(X > 3.841) = 0.05 for 1 dof, P(X > 18.307) = 0.05 for 10,
     * P(X > 45.315) = 0.001 for 20 */
    CHECK(fabs(gamma_q(0.5, 3.841 / 2) - 0.05) < 1e-4);
    CHECK(fabs(gamma_q(5, 18.307 / 2) - 0.05) < 1e-4);
    CHECK(fabs(gamma_q(10, 45.315 / 2) - 0.001) < 1e-5);
}

int main(void) {
    test_gamma();
    fake_group_def full[1] = {{PITH_MEM_FULL, 0, 1}};
    pith_model *m = fake_model_new_spec(V, 0, full, 1, 1);
    fs = fake_of(m);
    pith_engine_options o = {.block_size = 4, .max_num_seqs = 64, .max_seq_len = 64, .spec_type = PITH_SPEC_CUSTOM,
                             .spec_draft = draft_fn, .spec_max_seqs = 64, .spec_max_draft = 2};
    pith_engine *e = NULL;
    pith_err err;
    CHECKF(pith_engine_create(m, NULL, &o, &e, &err) == 0, "%s", err.msg);
    if (!e) return check_summary("test_engine_spec_dist");
    static out outs[N];
    static tables got, wrong;
    for (int i = 0; i < N; i++) {
        pith_sampling_params sp = pith_sampling_defaults();
        sp.temperature = 1;
        sp.top_k = 0;
        sp.top_p = 1;
        sp.min_p = 0;
        sp.seed = 7000u + (uint64_t)i;
        pith_request q = {.prompt = prompt, .n_prompt = NP, .sampling = sp, .max_tokens = 3, .ignore_eos = true,
                          .on_token = collect, .user = &outs[i]};
        CHECKF(pith_engine_submit(e, &q, NULL, &err) == 0, "%s", err.msg);
        if (i % 64 == 63 || i == N - 1) CHECKF(pith_engine_run(e, &err) == 0, "%s", err.msg);
    }
    pith_engine_stats st;
    pith_engine_get_stats(e, &st);
    pith_engine_free(e);
    for (int i = 0; i < N; i++) {
        CHECK(outs[i].n == 3);
        if (outs[i].n == 3) add(&got, outs[i].toks);
    }
    /* every request drafted once: verification, not plain decoding, produced t2 (and t3 after an accept) */
    CHECK(st.spec_verify_steps == N && st.spec_draft_tokens == 2 * N);
    for (int i = 0; i < N; i++) { /* the same experiment with the wrong rule */
        double p[V];
        int32_t s[NP + 3];
        memcpy(s, prompt, sizeof prompt);
        probs(s, NP, p);
        s[NP] = draw(p);
        int32_t a = fake_next_for(fs, s, NP + 1, V);
        probs(s, NP + 1, p);
        s[NP + 1] = wrong_verify(p, a);
        if (s[NP + 1] == a) {
            int32_t b = fake_next_for(fs, s, NP + 2, V);
            probs(s, NP + 2, p);
            s[NP + 2] = wrong_verify(p, b);
        } else {
            probs(s, NP + 2, p);
            s[NP + 2] = draw(p);
        }
        add(&wrong, &s[NP]);
    }
    const double alpha = 1e-3;
    double x2;
    int dof;
    double p2 = p_value(got.t2, false, &x2, &dof);
    printf("engine, drafted position: chi-square %.2f, %d dof, p = %.4f\n", x2, dof, p2);
    CHECKF(p2 >= alpha, "the token at a drafted position: p = %g", p2);
    double p3 = p_value(got.t3, true, &x2, &dof);
    printf("engine, after an accepted draft token: chi-square %.2f, %d dof, p = %.4f (%llu of %d drafts accepted)\n",
           x2, dof, p3, (unsigned long long)st.spec_accepted_tokens, 2 * N);
    CHECKF(p3 >= alpha, "the token after an accepted draft position: p = %g", p3);
    double w2 = p_value(wrong.t2, false, &x2, &dof);
    printf("wrong rule, drafted position: chi-square %.2f, %d dof, p = %.3g\n", x2, dof, w2);
    CHECKF(w2 < alpha, "the wrong acceptance rule went undetected: p = %g", w2);
    m->ops->destroy(m);
    return check_summary("test_engine_spec_dist");
}
