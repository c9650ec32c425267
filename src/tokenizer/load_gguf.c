/* Tokenizer from GGUF metadata (tokenizer.ggml.*), with llama.cpp's meaning for each key:
 * model "llama" is SentencePiece BPE over scores, "gpt2" byte-level BPE over merges with the
 * pre-tokenizer named by tokenizer.ggml.pre, "gemma4" (Gemma 4; llama.cpp's LLAMA_VOCAB_PRE_TYPE_GEMMA4)
 * BPE over merges of raw UTF-8 characters: spaces become U+2581 first, pieces are runs of newlines and
 * runs of everything else ([^\n]+|[\n]+), a run of newlines that is a token is emitted whole, a character
 * without a token falls back to its <0xNN> bytes, BOS added, no space prefix. Everything is copied out of
 * the file, so the tokenizer does not depend on the pith_gguf staying open. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

static bool str_is(pith_str s, const char *lit) { return s.len == strlen(lit) && memcmp(s.ptr, lit, s.len) == 0; }

/* An optional token id key: *id keeps its default when absent, becomes -1 when out of range. */
static void read_id(const pith_gguf *g, const char *key, int n_vocab, int32_t *id) {
    int64_t v;
    if (!pith_gguf_get_i64(g, key, &v)) return;
    *id = v >= 0 && v < n_vocab ? (int32_t)v : -1;
}

static void read_flag(const pith_gguf *g, const char *key, bool *flag) {
    bool v;
    if (pith_gguf_get_bool(g, key, &v)) *flag = v;
}

static int load_merges(pith_tokenizer *t, const pith_gguf *g, pith_err *err) {
    const pith_gguf_kv *kv = pith_gguf_find(g, "tokenizer.ggml.merges");
    if (!kv) return pith_errf(err, "GGUF gpt2 tokenizer without tokenizer.ggml.merges");
    if (kv->type != PITH_GGUF_ARRAY || kv->arr_type != PITH_GGUF_STRING || !kv->arr_strs)
        return pith_errf(err, "tokenizer.ggml.merges is not a string array");
    if (kv->arr_n > (uint64_t)INT32_MAX) return pith_errf(err, "tokenizer.ggml.merges: too many merges");
    if (tok_reserve_merges(t, (size_t)kv->arr_n, err) != 0) return -1;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        pith_str m = kv->arr_strs[i];
        /* "left right", split at the first space after the first byte (a part may itself be ' '). */
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
        if (!sp) continue;
        size_t a_len = (size_t)(sp - m.ptr);
        tok_add_merge(t, m.ptr, a_len, sp + 1, m.len - a_len - 1, (int32_t)i);
    }
    return 0;
}

/* llama.cpp's per-model token attributes: Phi-3's special tokens swallow the whitespace after them
 * (its tokenizer.json marks them rstrip), except <unk>, <s> and <|endoftext|>. */
static void apply_model_quirks(pith_tokenizer *t, const pith_gguf *g) {
    pith_str name;
    if (!pith_gguf_get_str(g, "general.name", &name)) return;
    char lower[128];
    size_t n = name.len < sizeof lower - 1 ? (size_t)name.len : sizeof lower - 1;
    for (size_t i = 0; i < n; i++) lower[i] = (char)(name.ptr[i] >= 'A' && name.ptr[i] <= 'Z' ? name.ptr[i] + 32 : name.ptr[i]);
    lower[n] = '\0';
    if (!strstr(lower, "phi-3") && !strstr(lower, "phi3")) return;
    for (int i = 0; i < t->n_specials; i++) t->specials[i].rstrip = true;
    static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        int32_t id = tok_lookup(t, keep[i], strlen(keep[i]));
        if (id >= 0) tok_special_set_strip(t, id, false, false);
    }
}

int pith_tokenizer_from_gguf(const pith_gguf *g, pith_tokenizer **out, pith_err *err) {
    *out = NULL;
    pith_str model;
    if (!pith_gguf_get_str(g, "tokenizer.ggml.model", &model))
        return pith_errf(err, "%s: no tokenizer.ggml.model", pith_gguf_path(g));
    bool spm = str_is(model, "llama"), gemma = str_is(model, "gemma4"), bpe = str_is(model, "gpt2") || gemma;
    if (!spm && !bpe)
        return pith_errf(err, "%s: unsupported tokenizer model '%.*s' (supported: llama, gpt2, gemma4)",
                         pith_gguf_path(g), (int)(model.len > 64 ? 64 : model.len), model.ptr);
    const pith_gguf_kv *tokens = pith_gguf_find(g, "tokenizer.ggml.tokens");
    if (!tokens || tokens->type != PITH_GGUF_ARRAY || tokens->arr_type != PITH_GGUF_STRING || !tokens->arr_strs)
        return pith_errf(err, "%s: tokenizer.ggml.tokens missing or not a string array", pith_gguf_path(g));
    if (tokens->arr_n == 0 || tokens->arr_n > (1u << 24))
        return pith_errf(err, "%s: tokenizer.ggml.tokens has %llu entries", pith_gguf_path(g),
                         (unsigned long long)tokens->arr_n);
    int n = (int)tokens->arr_n;
    const pith_gguf_kv *scores = pith_gguf_find(g, "tokenizer.ggml.scores");
    const pith_gguf_kv *types = pith_gguf_find(g, "tokenizer.ggml.token_type");
    if (scores && (scores->type != PITH_GGUF_ARRAY || scores->arr_n != tokens->arr_n))
        return pith_errf(err, "%s: tokenizer.ggml.scores does not match the token count", pith_gguf_path(g));
    if (types && (types->type != PITH_GGUF_ARRAY || types->arr_n != tokens->arr_n))
        return pith_errf(err, "%s: tokenizer.ggml.token_type does not match the token count", pith_gguf_path(g));
    if (spm && !scores) return pith_errf(err, "%s: SentencePiece vocabulary without scores", pith_gguf_path(g));

    pith_tokenizer *t = tok_alloc(n, err);
    if (!t) return pith_err_prefix(err, "%s", pith_gguf_path(g));
    for (int i = 0; i < n; i++) {
        double score = 0;
        int64_t type = TOK_NORMAL;
        if (scores && !pith_gguf_arr_f64(scores, (uint64_t)i, &score)) {
            pith_errf(err, "tokenizer.ggml.scores is not numeric");
            goto fail;
        }
        if (types && !pith_gguf_arr_i64(types, (uint64_t)i, &type)) {
            pith_errf(err, "tokenizer.ggml.token_type is not an integer array");
            goto fail;
        }
        pith_str s = tokens->arr_strs[i];
        if (tok_set_token(t, i, s.ptr, (size_t)s.len, (float)score, (int)type, err) != 0) goto fail;
    }

    pith_str pre = {NULL, 0};
    if (spm) {
        t->model = TOK_MODEL_SPM;
        t->decode = TOK_DECODE_SPM;
        t->bos = n > 1 ? 1 : -1;
        t->eos = n > 2 ? 2 : -1;
        t->unk = 0;
        t->add_bos = true;
        t->add_space_prefix = true;
        t->byte_fallback = true;
    } else if (gemma) {
        static const char split[] = "[^\\n]+|[\\n]+";
        t->model = TOK_MODEL_BPE;
        t->decode = TOK_DECODE_SPM;
        t->byte_fallback = true;
        t->ignore_merges_newlines = true;
        t->add_bos = true;
        if (tok_add_pre_split(t, split, sizeof split - 1, TOK_SPLIT_ISOLATED, false, err) != 0) goto fail;
    } else {
        t->model = TOK_MODEL_BPE;
        t->decode = TOK_DECODE_BYTELEVEL;
        t->byte_level = true;
        pith_gguf_get_str(g, "tokenizer.ggml.pre", &pre);
        if (tok_set_gguf_pretokenizer(t, pre.ptr, (size_t)pre.len, err) != 0) goto fail;
        /* llama.cpp adds BOS by default for the Llama 3 family only (the ones that ignore merges). */
        t->add_bos = t->ignore_merges;
    }
    read_id(g, "tokenizer.ggml.bos_token_id", n, &t->bos);
    read_id(g, "tokenizer.ggml.eos_token_id", n, &t->eos);
    read_id(g, "tokenizer.ggml.unknown_token_id", n, &t->unk);
    read_id(g, "tokenizer.ggml.padding_token_id", n, &t->pad);
    /* fill-in-the-middle (llama.cpp's keys; the older prefix/suffix/middle ones first, so the new win) */
    read_id(g, "tokenizer.ggml.prefix_token_id", n, &t->fim[PITH_TOK_FIM_PRE]);
    read_id(g, "tokenizer.ggml.suffix_token_id", n, &t->fim[PITH_TOK_FIM_SUF]);
    read_id(g, "tokenizer.ggml.middle_token_id", n, &t->fim[PITH_TOK_FIM_MID]);
    static const char *const fim_keys[PITH_TOK_FIM_COUNT] = {
        "tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.fim_mid_token_id",
        "tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id",
    };
    for (int i = 0; i < PITH_TOK_FIM_COUNT; i++) read_id(g, fim_keys[i], n, &t->fim[i]);
    read_flag(g, "tokenizer.ggml.add_bos_token", &t->add_bos);
    read_flag(g, "tokenizer.ggml.add_eos_token", &t->add_eos);
    if (gemma) { /* spaces as SentencePiece's visible space, with no prefix */
        static const char marker[] = "\xe2\x96\x81";
        memcpy(t->space_marker, marker, 3);
        t->space_marker_len = 3;
        if (tok_add_norm(t, TOK_NORM_REPLACE, " ", 1, marker, 3, err) != 0) goto fail;
    }
    if (spm) {
        read_flag(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix);
        t->strip_leading_space = t->add_space_prefix;
        static const char marker[] = "\xe2\x96\x81"; /* U+2581, SentencePiece's visible space */
        memcpy(t->space_marker, marker, 3);
    t->space_marker_len = 3;
    if (tok_add_norm(t, TOK_NORM_REPLACE, " ", 1, marker, 3, err) != 0) goto fail;
        if (t->add_space_prefix && tok_add_norm(t, TOK_NORM_PREPEND, marker, 3, NULL, 0, err) != 0) goto fail;
    }
    pith_str tmpl;
    if (pith_gguf_get_str(g, "tokenizer.chat_template", &tmpl)) {
        t->chat_template = tok_strndup(tmpl.ptr, (size_t)tmpl.len);
        if (!t->chat_template) {
            pith_errf(err, "out of memory");
            goto fail;
        }
    }
    if (tok_finalize(t, err) != 0) goto fail;
    apply_model_quirks(t, g);
    int32_t eot = -1, eom = -1;
    read_id(g, "tokenizer.ggml.eot_token_id", n, &eot);
    read_id(g, "tokenizer.ggml.eom_token_id", n, &eom);
    if (eot >= 0) t->eog[eot] = true;
    if (eom >= 0) t->eog[eom] = true;
    tok_harmony_eog(t);
    if (bpe && load_merges(t, g, err) != 0) goto fail;
    *out = t;
    return 0;
fail:
    pith_tokenizer_free(t);
    return pith_err_prefix(err, "%s", pith_gguf_path(g));
}
