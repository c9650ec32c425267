/* Compiling a grammar for a vocabulary, and its reference count. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "grammar/gr_internal.h"

static void grammar_free(pith_grammar *g) {
    if (!g) return;
    if (g->poscache)
        for (int i = 0; i < g->pda.n_elems; i++) {
            gr_poscache *pc = g->poscache[i];
            if (!pc) continue;
            free(pc->acc);
            free(pc->dep);
            free(pc->dep_lcp);
            free(pc->dep_depth);
            free(pc->dep_boff);
            free(pc->dep_bytes);
            free(pc);
        }
    free(g->poscache);
    free(g->scratch_states);
    gr_regions_free(g);
    for (size_t i = 0; i < sizeof g->slots / sizeof g->slots[0]; i++) free(g->slots[i].mask);
    gr_pda_free(&g->pda);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

pith_grammar *pith_grammar_retain(pith_grammar *g) {
    if (g) __atomic_add_fetch(&g->refs, 1, __ATOMIC_RELAXED);
    return g;
}

void pith_grammar_release(pith_grammar *g) {
    if (g && __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) == 0) grammar_free(g);
}

const pith_grammar_vocab *pith_grammar_get_vocab(const pith_grammar *g) { return g ? g->vocab : NULL; }

size_t pith_grammar_bytes(pith_grammar *g) {
    if (!g) return 0;
    pthread_mutex_lock(&g->mu);
    size_t n = sizeof *g + g->pda.bytes_used;
    pthread_mutex_unlock(&g->mu);
    return n;
}

/* guided_choice: a JSON array of strings -> root ::= "a" | "b" ... */
static int choice_to_gbnf(const char *src, size_t len, char **out, pith_err *err) {
    cJSON *j = cJSON_ParseWithLength(src, len);
    if (!j || !cJSON_IsArray(j) || cJSON_GetArraySize(j) == 0) {
        cJSON_Delete(j);
        return pith_errf(err, "grammar: choices must be a non-empty JSON array of strings");
    }
    gr_buf b = {0};
    gr_buf_puts(&b, "root ::= ");
    int i = 0;
    for (cJSON *c = j->child; c; c = c->next, i++) {
        if (!cJSON_IsString(c)) {
            cJSON_Delete(j);
            free(b.p);
            return pith_errf(err, "grammar: choice %d is not a string", i);
        }
        if (i) gr_buf_puts(&b, " | ");
        gr_buf_literal(&b, c->valuestring, strlen(c->valuestring));
    }
    gr_buf_puts(&b, "\n");
    cJSON_Delete(j);
    if (b.oom) { free(b.p); return pith_errf(err, "out of memory"); }
    *out = b.p;
    return 0;
}

int pith_grammar_compile(const pith_grammar_vocab *v, pith_grammar_kind kind, const char *src, size_t len,
                         pith_grammar **out, pith_err *err) {
    *out = NULL;
    if (!v) return pith_errf(err, "grammar: no vocabulary");
    char *text = NULL;
    int rc = 0;
    switch (kind) {
    case PITH_GRAMMAR_GBNF: break;
    case PITH_GRAMMAR_JSON_SCHEMA: rc = pith_grammar_json_schema_to_gbnf(src, len, "root", &text, err); break;
    case PITH_GRAMMAR_JSON_SCHEMA_STRICT:
        rc = pith_grammar_json_schema_to_gbnf_strict(src, len, "root", true, &text, err);
        break;
    case PITH_GRAMMAR_REGEX: rc = pith_grammar_regex_to_gbnf(src, len, "root", &text, err); break;
    case PITH_GRAMMAR_JSON: rc = pith_grammar_json_to_gbnf(true, "root", &text, err); break;
    case PITH_GRAMMAR_CHOICE: rc = choice_to_gbnf(src, len, &text, err); break;
    default: return pith_errf(err, "grammar: unknown grammar kind %d", (int)kind);
    }
    if (rc) return -1;
    if (text) {
        src = text;
        len = strlen(text);
    }
    if (!src) return pith_errf(err, "grammar: empty grammar");
    gr_ir ir = {0};
    int root = -1;
    rc = gr_gbnf_parse(src, len, &ir, &root, err);
    free(text);
    if (rc) {
        gr_ir_free(&ir);
        return -1;
    }
    pith_grammar *g = gr_ir_inline(&ir) ? NULL : calloc(1, sizeof *g);
    if (!g) {
        bool too_large = ir.too_large;
        gr_ir_free(&ir);
        return too_large ? gr_too_large(err) : pith_errf(err, "out of memory");
    }
    g->refs = 1;
    g->vocab = v;
    g->mask_words = ((size_t)v->n_vocab + 31) / 32;
    pthread_mutex_init(&g->mu, NULL);
    for (size_t i = 0; i < sizeof g->slots / sizeof g->slots[0]; i++) g->slots[i].set = -1;
    rc = gr_pda_init(&g->pda, &ir, root, err);
    gr_ir_free(&ir);
    if (rc) {
        pthread_mutex_destroy(&g->mu);
        free(g);
        return -1;
    }
    if (gr_regions_build(g) || gr_pda_alias_chains(&g->pda, g->class_run)) {
        bool over = g->pda.overflow;
        grammar_free(g);
        return over ? pith_errf(err, "grammar: too large: its tables need more than the %zu MiB limit",
                                GR_MAX_BYTES >> 20)
                    : pith_errf(err, "out of memory");
    }
    size_t pos_bytes = ((size_t)g->pda.n_elems + 1) * sizeof *g->poscache;
    size_t scratch_bytes = ((size_t)v->max_depth + 2) * sizeof *g->scratch_states;
    if (!gr_pda_charge(&g->pda, pos_bytes + scratch_bytes)) {
        grammar_free(g);
        return pith_errf(err, "grammar: too large: its tables need more than the %zu MiB limit", GR_MAX_BYTES >> 20);
    }
    g->poscache = calloc((size_t)g->pda.n_elems + 1, sizeof *g->poscache);
    g->scratch_states = malloc(scratch_bytes);
    if (!g->poscache || !g->scratch_states) {
        grammar_free(g);
        return pith_errf(err, "out of memory");
    }
    if (gr_precompute(g, err)) {
        grammar_free(g);
        return -1;
    }
    *out = g;
    return 0;
}
