/* Vocabulary storage and the read-only queries on a loaded tokenizer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

char *tok_strndup(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    if (n) memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

pith_tokenizer *tok_alloc(int n_vocab, pith_err *err) {
    if (n_vocab <= 0 || n_vocab > (1 << 24)) {
        pith_errf(err, "tokenizer: vocabulary size %d out of range", n_vocab);
        return NULL;
    }
    pith_tokenizer *t = calloc(1, sizeof *t);
    if (!t) goto oom;
    t->n_vocab = n_vocab;
    t->off = calloc((size_t)n_vocab, sizeof *t->off);
    t->len = calloc((size_t)n_vocab, sizeof *t->len);
    t->scores = calloc((size_t)n_vocab, sizeof *t->scores);
    t->types = malloc((size_t)n_vocab);
    t->eog = calloc((size_t)n_vocab, sizeof *t->eog);
    t->arena_cap = (size_t)n_vocab * 8 + 64;
    t->arena = malloc(t->arena_cap);
    if (!t->off || !t->len || !t->scores || !t->types || !t->eog || !t->arena) goto oom;
    memset(t->types, TOK_NORMAL, (size_t)n_vocab);
    /* Offset 0 holds an empty string, which every token starts as. */
    t->arena[0] = '\0';
    t->arena_len = 1;
    t->bos = t->eos = t->unk = t->pad = -1;
    for (int i = 0; i < PITH_TOK_FIM_COUNT; i++) t->fim[i] = -1;
    for (int i = 0; i < 256; i++) t->byte_token[i] = t->bytelevel_token[i] = -1;
    return t;
oom:
    pith_tokenizer_free(t);
    pith_errf(err, "tokenizer: out of memory for %d tokens", n_vocab);
    return NULL;
}

int tok_set_token(pith_tokenizer *t, int32_t id, const char *text, size_t len, float score, int type,
                  pith_err *err) {
    if (id < 0 || id >= t->n_vocab) return pith_errf(err, "tokenizer: token id %d out of range", id);
    if (len > (1u << 20)) return pith_errf(err, "tokenizer: token %d is %zu bytes long", id, len);
    if (t->arena_len + len + 1 > t->arena_cap) {
        size_t cap = t->arena_cap * 2;
        while (cap < t->arena_len + len + 1) cap *= 2;
        char *a = realloc(t->arena, cap);
        if (!a) return pith_errf(err, "tokenizer: out of memory");
        t->arena = a;
        t->arena_cap = cap;
    }
    t->off[id] = t->arena_len;
    t->len[id] = (uint32_t)len;
    if (len) memcpy(t->arena + t->arena_len, text, len);
    t->arena[t->arena_len + len] = '\0';
    t->arena_len += len + 1;
    t->scores[id] = score;
    t->types[id] = (uint8_t)(type >= TOK_NORMAL && type <= TOK_BYTE ? type : TOK_NORMAL);
    return 0;
}

static tok_texts texts_of(const pith_tokenizer *t) {
    tok_texts tx = {t->arena, t->off, t->len};
    return tx;
}

int32_t tok_lookup(const pith_tokenizer *t, const char *text, size_t len) {
    return tok_strmap_find(&t->vocab, texts_of(t), text, len);
}

static int cmp_special(const void *pa, const void *pb, void *ctx) {
    const pith_tokenizer *t = ctx;
    const tok_special *a = pa, *b = pb;
    uint32_t la = t->len[a->id], lb = t->len[b->id];
    if (la != lb) return la > lb ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static bool is_eog_name(const char *s, size_t n) {
    static const char *const names[] = {
        "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<eos>", "<|endoftext|>",
        "<|end_of_text|>", "<EOT>", "_<EOT>", "<\uFF5Cend\u2581of\u2581sentence\uFF5C>",
        "<|return|>", "<|call|>",
        "<turn|>", "<|tool_response>", /* Gemma 4 (llama.cpp's llama-vocab.cpp marks both) */
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i]) == n && memcmp(names[i], s, n) == 0) return true;
    return false;
}

/* Marks in t->word_sticky the byte before each space marker that follows a non-marker inside a
 * mergeable token; returns how many distinct bytes that marks. */
static int mark_sticky_bytes(pith_tokenizer *t) {
    const char *m = t->space_marker;
    size_t ml = t->space_marker_len;
    int n_sticky = 0;
    memset(t->word_sticky, 0, sizeof t->word_sticky);
    for (int32_t id = 0; id < t->n_vocab; id++) {
        int ty = t->types[id];
        if (ty != TOK_NORMAL && ty != TOK_USER_DEFINED && ty != TOK_UNUSED) continue;
        const char *p = t->arena + t->off[id];
        size_t n = t->len[id];
        for (size_t i = 1; i + ml <= n; i++) {
            if (memcmp(p + i, m, ml) != 0) continue;
            if (i < ml || memcmp(p + i - ml, m, ml) != 0) {
                unsigned char b = (unsigned char)p[i - 1];
                n_sticky += !t->word_sticky[b];
                t->word_sticky[b] = true;
            }
        }
    }
    return n_sticky;
}

int tok_finalize(pith_tokenizer *t, pith_err *err) {
    if (tok_strmap_init(&t->vocab, (size_t)t->n_vocab) != 0) return pith_errf(err, "tokenizer: out of memory");
    tok_texts tx = texts_of(t);
    t->max_token_len = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (t->len[id] > t->max_token_len) t->max_token_len = t->len[id];
        if (t->len[id] > 0) tok_strmap_insert(&t->vocab, tx, id);
    }
    for (int b = 0; b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        t->byte_token[b] = tok_lookup(t, hex, 6);
        char ch[2];
        int n = tok_bytelevel_encode((uint8_t)b, ch);
        t->bytelevel_token[b] = tok_lookup(t, ch, (size_t)n);
    }
    for (const int32_t *p = (const int32_t[]){t->bos, t->eos, t->unk, t->pad}, *end = p + 4; p < end; p++)
        if (*p >= t->n_vocab) return pith_errf(err, "tokenizer: special token id %d out of range", *p);

    if (!t->no_special_matching) {
        int n = 0;
        for (int32_t id = 0; id < t->n_vocab; id++) {
            int ty = t->types[id];
            if ((ty == TOK_CONTROL || ty == TOK_USER_DEFINED || ty == TOK_UNKNOWN) && t->len[id] > 0) n++;
        }
        if (n) {
            t->specials = calloc((size_t)n, sizeof *t->specials);
            if (!t->specials) return pith_errf(err, "tokenizer: out of memory");
            for (int32_t id = 0; id < t->n_vocab; id++) {
                int ty = t->types[id];
                if (!((ty == TOK_CONTROL || ty == TOK_USER_DEFINED || ty == TOK_UNKNOWN) && t->len[id] > 0))
                    continue;
                tok_special *s = &t->specials[t->n_specials++];
                s->id = id;
                s->needs_parse_special = ty != TOK_USER_DEFINED;
            }
            qsort_r(t->specials, (size_t)t->n_specials, sizeof *t->specials, cmp_special, t);
            if (tok_build_special_trie(t, err) != 0) return -1;
        }
    }

    /* Splitting pays only while few bytes are sticky (no vocabulary seen so far has more than one). */
    t->split_words = t->space_marker_len > 0 && tok_lookup(t, t->space_marker, t->space_marker_len) >= 0 &&
                     mark_sticky_bytes(t) <= 8;
    if (t->eos >= 0) t->eog[t->eos] = true;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        int ty = t->types[id];
        if ((ty == TOK_CONTROL || ty == TOK_USER_DEFINED) && is_eog_name(t->arena + t->off[id], t->len[id]))
            t->eog[id] = true;
    }
    tok_harmony_eog(t);
    return 0;
}

void tok_harmony_eog(pith_tokenizer *t) {
    int32_t end = tok_lookup(t, "<|end|>", 7);
    if (end >= 0 && end != t->eos && tok_lookup(t, "<|return|>", 10) >= 0 && tok_lookup(t, "<|call|>", 8) >= 0)
        t->eog[end] = false;
}

int tok_reserve_merges(pith_tokenizer *t, size_t n, pith_err *err) {
    tok_pairmap_free(&t->merges);
    if (tok_pairmap_init(&t->merges, n) != 0) return pith_errf(err, "tokenizer: out of memory for %zu merges", n);
    return 0;
}

void tok_add_merge(pith_tokenizer *t, const char *a, size_t a_len, const char *b, size_t b_len, int32_t rank) {
    int32_t ia = tok_lookup(t, a, a_len), ib = tok_lookup(t, b, b_len);
    if (ia < 0 || ib < 0) return;
    char stack[256];
    char *buf = a_len + b_len <= sizeof stack ? stack : malloc(a_len + b_len);
    if (!buf) return;
    memcpy(buf, a, a_len);
    memcpy(buf + a_len, b, b_len);
    int32_t r = tok_lookup(t, buf, a_len + b_len);
    if (buf != stack) free(buf);
    if (r >= 0) tok_pairmap_insert(&t->merges, ia, ib, rank, r);
}

void pith_tokenizer_free(pith_tokenizer *t) {
    if (!t) return;
    tok_free_pipeline(t);
    tok_strmap_free(&t->vocab);
    tok_pairmap_free(&t->merges);
    free(t->arena);
    free(t->off);
    free(t->len);
    free(t->scores);
    free(t->types);
    free(t->eog);
    free(t->specials);
    free(t->trie);
    free(t->chat_template);
    free(t);
}

int pith_tokenizer_n_vocab(const pith_tokenizer *t) { return t->n_vocab; }
int pith_tokenizer_bos(const pith_tokenizer *t) { return t->bos; }
int pith_tokenizer_eos(const pith_tokenizer *t) { return t->eos; }

bool pith_tokenizer_is_eog(const pith_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->eog[id];
}

bool pith_tokenizer_is_special(const pith_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return false;
    return t->types[id] == TOK_CONTROL || t->types[id] == TOK_UNKNOWN;
}

const char *pith_tokenizer_token_text(const pith_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    if (len) *len = t->len[id];
    return t->arena + t->off[id];
}

const char *pith_tokenizer_chat_template(const pith_tokenizer *t) { return t->chat_template; }

int32_t pith_tokenizer_token_id(const pith_tokenizer *t, const char *text, size_t len) {
    if (!t || !text) return -1;
    int32_t id = tok_lookup(t, text, len);
    return id >= 0 && id < t->n_vocab ? id : -1;
}

/* The usual spellings of each fill-in-the-middle token, tried in order where the file names none. */
#define SP "\xe2\x96\x81" /* SentencePiece's space marker (CodeLlama's tokens start with it) */
static const char *const fim_texts[PITH_TOK_FIM_COUNT][8] = {
    [PITH_TOK_FIM_PRE] = {"<|fim_prefix|>", "<fim_prefix>", "<fim-prefix>", "<\xef\xbd\x9c" "fim" SP "begin" "\xef\xbd\x9c>",
                          SP "<PRE>", "<PRE>", "<|code_prefix|>", NULL},
    [PITH_TOK_FIM_SUF] = {"<|fim_suffix|>", "<fim_suffix>", "<fim-suffix>", "<\xef\xbd\x9c" "fim" SP "hole" "\xef\xbd\x9c>",
                          SP "<SUF>", "<SUF>", "<|code_suffix|>", NULL},
    [PITH_TOK_FIM_MID] = {"<|fim_middle|>", "<fim_middle>", "<fim-middle>", "<\xef\xbd\x9c" "fim" SP "end" "\xef\xbd\x9c>",
                          SP "<MID>", "<MID>", "<|code_middle|>", NULL},
    [PITH_TOK_FIM_PAD] = {"<|fim_pad|>", "<fim_pad>", "<fim-pad>", NULL},
    [PITH_TOK_FIM_REP] = {"<|repo_name|>", "<|fim_repo|>", "<repo_name>", "<reponame>", "<fim-repo>", NULL},
    [PITH_TOK_FIM_SEP] = {"<|file_sep|>", "<file_sep>", "<fim-sep>", NULL},
};
#undef SP

int32_t pith_tokenizer_fim(const pith_tokenizer *t, pith_tok_fim which) {
    if (!t || (int)which < 0 || which >= PITH_TOK_FIM_COUNT) return -1;
    if (t->fim[which] >= 0) return t->fim[which];
    for (int i = 0; fim_texts[which][i]; i++) {
        int32_t id = pith_tokenizer_token_id(t, fim_texts[which][i], strlen(fim_texts[which][i]));
        if (id >= 0) return id;
    }
    return -1;
}
