/* Hugging Face tokenizer.json (+ tokenizer_config.json, generation_config.json beside it).
 *
 * Supported: model BPE (merges as "a b" strings or ["a", "b"] pairs, byte_fallback, fuse_unk,
 * ignore_merges, unk_token); normalizers Sequence / Prepend / Replace / NFC; pre-tokenizers Sequence /
 * Split / ByteLevel / Metaspace / Digits / WhitespaceSplit; added tokens (special ones become control
 * tokens, others user-defined; lstrip/rstrip honoured), matched leftmost-longest on the raw text as
 * Hugging Face does. Anything else is refused with an error naming it, rather than tokenized wrongly.
 * Added tokens flagged "normalized" are matched on the raw text too (Hugging Face matches them after
 * normalization; the two agree unless a normalizer rewrites the token's own text). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/json_file.h"
#include "format/mapped_file.h"
#include "tokenizer/tok_internal.h"

static const cJSON *get(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

static const char *get_str(const cJSON *o, const char *key) {
    const cJSON *v = get(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool get_bool(const cJSON *o, const char *key, bool dflt) {
    const cJSON *v = get(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static bool type_is(const cJSON *o, const char *name) {
    const char *t = get_str(o, "type");
    return t && strcmp(t, name) == 0;
}

/* A token named in tokenizer_config.json: a string, or an object with "content". */
static const char *token_name(const cJSON *v) {
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v)) return get_str(v, "content");
    return NULL;
}

static int32_t lookup_cstr(const pith_tokenizer *t, const char *s) { return s ? tok_lookup(t, s, strlen(s)) : -1; }

/* A regex that matches the literal string s (for Split/Replace with a String pattern). */
static char *escape_literal(const char *s) {
    size_t n = strlen(s);
    char *r = malloc(2 * n + 1), *w = r;
    if (!r) return NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) *w++ = '\\';
        *w++ = (char)c;
    }
    *w = '\0';
    return r;
}

static int load_normalizer(pith_tokenizer *t, const cJSON *n, pith_err *err) {
    if (!n || cJSON_IsNull(n)) return 0;
    if (type_is(n, "Sequence")) {
        const cJSON *item;
        cJSON_ArrayForEach(item, get(n, "normalizers")) if (load_normalizer(t, item, err) != 0) return -1;
        return 0;
    }
    if (type_is(n, "Prepend")) {
        const char *p = get_str(n, "prepend");
        if (!p) return pith_errf(err, "Prepend normalizer without 'prepend'");
        return tok_add_norm(t, TOK_NORM_PREPEND, p, strlen(p), NULL, 0, err);
    }
    if (type_is(n, "Replace")) {
        const cJSON *pat = get(n, "pattern");
        const char *content = get_str(n, "content"), *lit = get_str(pat, "String"), *re = get_str(pat, "Regex");
        if (!content || (!lit && !re)) return pith_errf(err, "Replace normalizer without pattern or content");
        if (tok_add_norm(t, TOK_NORM_REPLACE, lit ? lit : "", lit ? strlen(lit) : 0, content, strlen(content), err))
            return -1;
        if (re && !(t->norm[t->n_norm - 1].re = tok_regex_compile(re, strlen(re), false, err))) return -1;
        return 0;
    }
    if (type_is(n, "NFC")) return tok_add_norm(t, TOK_NORM_NFC, NULL, 0, NULL, 0, err);
    const char *ty = get_str(n, "type");
    return pith_errf(err, "unsupported normalizer '%s'", ty ? ty : "?");
}

static tok_pre_step *new_pre(pith_tokenizer *t, tok_pre_kind kind, pith_err *err) {
    tok_pre_step *steps = realloc(t->pre, (size_t)(t->n_pre + 1) * sizeof *steps);
    if (!steps) {
        pith_errf(err, "out of memory");
        return NULL;
    }
    t->pre = steps;
    tok_pre_step *st = &t->pre[t->n_pre++];
    memset(st, 0, sizeof *st);
    st->kind = kind;
    return st;
}

static int parse_behavior(const char *b, tok_split_behavior *out, pith_err *err) {
    static const struct {
        const char *name;
        tok_split_behavior b;
    } names[] = {
        {"Isolated", TOK_SPLIT_ISOLATED},
        {"Removed", TOK_SPLIT_REMOVED},
        {"MergedWithPrevious", TOK_SPLIT_MERGED_WITH_PREVIOUS},
        {"MergedWithNext", TOK_SPLIT_MERGED_WITH_NEXT},
        {"Contiguous", TOK_SPLIT_CONTIGUOUS},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (b && strcmp(b, names[i].name) == 0) {
            *out = names[i].b;
            return 0;
        }
    }
    return pith_errf(err, "unsupported Split behavior '%s'", b ? b : "?");
}

#define GPT2_REGEX "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"

/* Whether the normalizer leaves no occurrence of the one-character literal lit: it has a plain
 * Replace of exactly lit by text without lit, and every later step is a Replace or Prepend whose
 * output cannot hold lit either (NFC could compose it). Gemma 3 replaces ' ' by '▁' and then splits on
 * ' ', which can never match. */
static bool normalizer_removes(const pith_tokenizer *t, const char *lit) {
    size_t n = strlen(lit);
    if (n == 0 || n != (size_t)tok_utf8_len((unsigned char)lit[0])) return false;
    int from = -1;
    for (int i = 0; i < t->n_norm; i++) {
        const tok_norm_step *st = &t->norm[i];
        if (st->kind == TOK_NORM_REPLACE && !st->re && st->a_len == n && memcmp(st->a, lit, n) == 0) from = i;
    }
    if (from < 0) return false;
    for (int i = from; i < t->n_norm; i++) {
        const tok_norm_step *st = &t->norm[i];
        const char *out = st->kind == TOK_NORM_REPLACE ? st->b : st->kind == TOK_NORM_PREPEND ? st->a : NULL;
        size_t out_n = st->kind == TOK_NORM_REPLACE ? st->b_len : st->a_len;
        if (!out && st->kind != TOK_NORM_REPLACE) return false;
        for (size_t k = 0; out && k + n <= out_n; k++)
            if (memcmp(out + k, lit, n) == 0) return false;
    }
    return true;
}

static int load_pre_tokenizer(pith_tokenizer *t, const cJSON *p, bool top_level, pith_err *err) {
    if (!p || cJSON_IsNull(p)) return 0;
    if (type_is(p, "Sequence")) {
        const cJSON *item;
        cJSON_ArrayForEach(item, get(p, "pretokenizers")) if (load_pre_tokenizer(t, item, false, err) != 0) return -1;
        return 0;
    }
    if (type_is(p, "Split")) {
        const cJSON *pat = get(p, "pattern");
        const char *lit = get_str(pat, "String"), *re = get_str(pat, "Regex");
        if (!lit && !re) return pith_errf(err, "Split pre-tokenizer without a pattern");
        tok_split_behavior b = TOK_SPLIT_ISOLATED;
        if (parse_behavior(get_str(p, "behavior"), &b, err) != 0) return -1;
        /* A split that cannot match leaves each text whole (not inverted: that would keep only matches).
         * Dropped, the pipeline has no pre-tokenizer and can merge word by word (see split_words). */
        if (top_level && lit && !get_bool(p, "invert", false) && normalizer_removes(t, lit)) return 0;
        char *esc = lit ? escape_literal(lit) : NULL;
        if (lit && !esc) return pith_errf(err, "out of memory");
        int rc = tok_add_pre_split(t, esc ? esc : re, strlen(esc ? esc : re), b, get_bool(p, "invert", false), err);
        free(esc);
        return rc;
    }
    if (type_is(p, "ByteLevel")) {
        tok_pre_step *st = new_pre(t, TOK_PRE_BYTELEVEL, err);
        if (!st) return -1;
        st->add_prefix_space = get_bool(p, "add_prefix_space", true);
        if (get_bool(p, "use_regex", true) && !(st->re = tok_regex_compile(GPT2_REGEX, strlen(GPT2_REGEX), false, err)))
            return -1;
        t->byte_level = true;
        return 0;
    }
    if (type_is(p, "Metaspace")) {
        tok_pre_step *st = new_pre(t, TOK_PRE_METASPACE, err);
        if (!st) return -1;
        const char *r = get_str(p, "replacement");
        if (!r) r = "\xe2\x96\x81";
        st->repl = tok_strndup(r, strlen(r));
        st->repl_len = strlen(r);
        if (!st->repl) return pith_errf(err, "out of memory");
        const char *scheme = get_str(p, "prepend_scheme");
        if (scheme) st->prepend_scheme = !strcmp(scheme, "first") ? 1 : !strcmp(scheme, "never") ? 2 : 0;
        else st->prepend_scheme = get_bool(p, "add_prefix_space", true) ? 0 : 2;
        st->split = get_bool(p, "split", true);
        return 0;
    }
    /* Digits and WhitespaceSplit are regex splits: ASCII digits isolated (singly or as runs), and
     * whitespace removed. */
    if (type_is(p, "Digits")) {
        const char *re = get_bool(p, "individual_digits", false) ? "[0-9]" : "[0-9]+";
        return tok_add_pre_split(t, re, strlen(re), TOK_SPLIT_ISOLATED, false, err);
    }
    if (type_is(p, "WhitespaceSplit")) return tok_add_pre_split(t, "\\s+", 3, TOK_SPLIT_REMOVED, false, err);
    const char *ty = get_str(p, "type");
    return pith_errf(err, "unsupported pre_tokenizer '%s'", ty ? ty : "?");
}

/* Decoding style from the decoder: byte-level, or SentencePiece-like (Replace ▁, ByteFallback,
 * Strip / Metaspace, which drop the first leading space). */
static void load_decoder(pith_tokenizer *t, const cJSON *d) {
    if (!d || cJSON_IsNull(d)) return;
    if (type_is(d, "Sequence")) {
        const cJSON *item;
        cJSON_ArrayForEach(item, get(d, "decoders")) load_decoder(t, item);
    } else if (type_is(d, "ByteLevel")) {
        t->decode = TOK_DECODE_BYTELEVEL;
    } else if (type_is(d, "Strip")) {
        const cJSON *start = get(d, "start");
        if (cJSON_IsNumber(start) && start->valuedouble >= 1) t->strip_leading_space = true;
    } else if (type_is(d, "Metaspace")) {
        const char *scheme = get_str(d, "prepend_scheme");
        t->strip_leading_space = scheme ? strcmp(scheme, "never") != 0 : get_bool(d, "add_prefix_space", true);
    }
}

/* BOS/EOS from a TemplateProcessing post-processor: special tokens before/after the sequence. */
static void load_post_processor(pith_tokenizer *t, const cJSON *pp, bool *bos_set, bool *eos_set) {
    if (!pp || cJSON_IsNull(pp)) return;
    if (type_is(pp, "Sequence")) {
        const cJSON *item;
        cJSON_ArrayForEach(item, get(pp, "processors")) load_post_processor(t, item, bos_set, eos_set);
        return;
    }
    if (!type_is(pp, "TemplateProcessing")) return;
    const cJSON *single = get(pp, "single");
    bool seen_seq = false;
    const cJSON *item;
    cJSON_ArrayForEach(item, single) {
        const cJSON *sp = get(item, "SpecialToken");
        if (get(item, "Sequence")) {
            seen_seq = true;
        } else if (sp) {
            int32_t id = lookup_cstr(t, get_str(sp, "id"));
            if (id < 0) continue;
            if (!seen_seq) {
                t->bos = id;
                t->add_bos = *bos_set = true;
            } else {
                t->eos = id;
                t->add_eos = *eos_set = true;
            }
        }
    }
}

static int load_merges(pith_tokenizer *t, const cJSON *merges, pith_err *err) {
    int n = cJSON_GetArraySize(merges);
    if (tok_reserve_merges(t, (size_t)(n > 0 ? n : 0), err) != 0) return -1;
    int32_t rank = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        if (cJSON_IsString(m)) {
            const char *s = m->valuestring;
            size_t len = strlen(s);
            const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
            if (sp) tok_add_merge(t, s, (size_t)(sp - s), sp + 1, len - (size_t)(sp - s) - 1, rank);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2) {
            const cJSON *a = cJSON_GetArrayItem(m, 0), *b = cJSON_GetArrayItem(m, 1);
            if (cJSON_IsString(a) && cJSON_IsString(b))
                tok_add_merge(t, a->valuestring, strlen(a->valuestring), b->valuestring, strlen(b->valuestring), rank);
        } else {
            return pith_errf(err, "merge %d is neither \"a b\" nor [\"a\", \"b\"]", rank);
        }
        rank++;
    }
    return 0;
}

/* generation_config.json's eos_token_id (a number or a list) marks more end-of-generation tokens. The file
 * is optional, and one that is not JSON is ignored; but a FIFO, a device or an oversized file there fails
 * the load, as anywhere in a model directory. */
static int load_generation_config(pith_tokenizer *t, const char *json_path, pith_err *err) {
    const char *slash = strrchr(json_path, '/');
    size_t dir_len = slash ? (size_t)(slash - json_path + 1) : 0;
    char *path = malloc(dir_len + sizeof "generation_config.json");
    if (!path) return pith_errf(err, "out of memory");
    memcpy(path, json_path, dir_len);
    strcpy(path + dir_len, "generation_config.json");
    char *text;
    size_t len;
    int rc = pith_read_optional_file(path, TOK_MAX_GENERATION_CONFIG_BYTES, &text, &len, err);
    cJSON *j = NULL;
    pith_err ignored;
    if (rc == 0 && text) pith_json_parse(path, text, len, PITH_JSON_MAX_VALUES, &j, &ignored);
    free(text);
    free(path);
    if (rc) return -1;
    const cJSON *eos = get(j, "eos_token_id"), *item;
    if (cJSON_IsNumber(eos) && eos->valuedouble >= 0 && eos->valuedouble < t->n_vocab) t->eog[(int)eos->valuedouble] = true;
    const cJSON *list = cJSON_IsArray(eos) ? eos : NULL;
    cJSON_ArrayForEach(item, list)
        if (cJSON_IsNumber(item) && item->valuedouble >= 0 && item->valuedouble < t->n_vocab) t->eog[(int)item->valuedouble] = true;
    cJSON_Delete(j);
    return 0;
}

static bool id_ok(double v) { return v >= 0 && v < (1 << 24) && v == (double)(int32_t)v; }

static int build(pith_tokenizer **out, const cJSON *root, const cJSON *cfg, pith_err *err) {
    const cJSON *model = get(root, "model"), *vocab = get(model, "vocab"), *added = get(root, "added_tokens");
    const char *mtype = get_str(model, "type");
    if (!cJSON_IsObject(model)) return pith_errf(err, "no \"model\" object");
    if (mtype && strcmp(mtype, "BPE") != 0) return pith_errf(err, "unsupported model type '%s' (only BPE)", mtype);
    if (!cJSON_IsObject(vocab)) return pith_errf(err, "model has no vocab object");
    const char *prefix = get_str(model, "continuing_subword_prefix"), *suffix = get_str(model, "end_of_word_suffix");
    if ((prefix && *prefix) || (suffix && *suffix))
        return pith_errf(err, "unsupported BPE continuing_subword_prefix/end_of_word_suffix");
    int n_vocab = 0, n_named = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, vocab) {
        if (!cJSON_IsNumber(item) || !id_ok(item->valuedouble)) return pith_errf(err, "vocab entry with a bad id");
        if ((int)item->valuedouble + 1 > n_vocab) n_vocab = (int)item->valuedouble + 1;
        n_named++;
    }
    cJSON_ArrayForEach(item, added) {
        const cJSON *id = get(item, "id");
        if (!cJSON_IsNumber(id) || !id_ok(id->valuedouble) || !get_str(item, "content"))
            return pith_errf(err, "added token without a valid id and content");
        if ((int)id->valuedouble + 1 > n_vocab) n_vocab = (int)id->valuedouble + 1;
        n_named++;
    }
    /* The tables cost about 26 bytes per id up to the largest: a file naming one token with id 16777215
     * would build 280 MB from 60 bytes. Real files name every id (Gemma 3, GPT-OSS, Llama 3, Qwen3). */
    if (n_vocab > 2 * n_named + TOK_MAX_UNNAMED_IDS)
        return pith_errf(err, "token ids reach %d but the file names only %d tokens", n_vocab - 1, n_named);
    pith_tokenizer *t = tok_alloc(n_vocab, err);
    if (!t) return -1;
    *out = t;
    memset(t->types, TOK_UNUSED, (size_t)n_vocab); /* ids the file never names stay unused and empty */
    cJSON_ArrayForEach(item, vocab) {
        if (tok_set_token(t, (int32_t)item->valuedouble, item->string, strlen(item->string), 0, TOK_NORMAL, err))
            return -1;
    }
    cJSON_ArrayForEach(item, added) {
        const char *content = get_str(item, "content");
        int type = get_bool(item, "special", false) ? TOK_CONTROL : TOK_USER_DEFINED;
        if (tok_set_token(t, (int32_t)get(item, "id")->valuedouble, content, strlen(content), 0, type, err)) return -1;
    }
    t->model = TOK_MODEL_BPE;
    t->decode = TOK_DECODE_SPM;
    t->specials_leftmost = true;
    t->byte_fallback = get_bool(model, "byte_fallback", false);
    t->fuse_unk = get_bool(model, "fuse_unk", false);
    t->ignore_merges = get_bool(model, "ignore_merges", false);
    if (load_normalizer(t, get(root, "normalizer"), err) != 0) return -1;
    for (int i = 0; i < t->n_norm; i++) {
        const tok_norm_step *st = &t->norm[i];
        if (st->kind == TOK_NORM_REPLACE && !st->re && st->a_len == 1 && st->a[0] == ' ' && st->b_len > 0 &&
            st->b_len <= sizeof t->space_marker) {
            memcpy(t->space_marker, st->b, st->b_len);
            t->space_marker_len = st->b_len;
        }
    }
    if (load_pre_tokenizer(t, get(root, "pre_tokenizer"), true, err) != 0) return -1;
    if (t->byte_level) t->decode = TOK_DECODE_BYTELEVEL;
    load_decoder(t, get(root, "decoder"));
    if (tok_finalize(t, err) != 0) return -1;
    /* (Only where set: the lookup is linear, and Gemma 3 has 6,415 added tokens, none stripping.) */
    cJSON_ArrayForEach(item, added) {
        bool lstrip = get_bool(item, "lstrip", false), rstrip = get_bool(item, "rstrip", false);
        if (lstrip || rstrip) tok_special_set_strip(t, (int32_t)get(item, "id")->valuedouble, lstrip, rstrip);
    }
    t->unk = lookup_cstr(t, get_str(model, "unk_token"));
    if (load_merges(t, get(model, "merges"), err) != 0) return -1;

    bool bos_set = false, eos_set = false;
    load_post_processor(t, get(root, "post_processor"), &bos_set, &eos_set);
    int32_t bos = lookup_cstr(t, token_name(get(cfg, "bos_token")));
    int32_t eos = lookup_cstr(t, token_name(get(cfg, "eos_token")));
    if (!bos_set && bos >= 0) t->bos = bos;
    if (eos >= 0) t->eos = eos;
    if (t->unk < 0) t->unk = lookup_cstr(t, token_name(get(cfg, "unk_token")));
    if (t->eos >= 0) t->eog[t->eos] = true;
    /* add_bos_token when the config says; else the post-processor's template; else a BOS distinct from
     * EOS is added (Llama 3's published tokenizer.json names <|begin_of_text|> only in its config), except
     * in a harmony vocabulary (GPT-OSS: its config names <|startoftext|>, but a harmony prompt starts
     * with <|start|> and Hugging Face adds nothing). */
    const cJSON *add_bos = get(cfg, "add_bos_token"), *add_eos = get(cfg, "add_eos_token");
    bool harmony = lookup_cstr(t, "<|start|>") >= 0 && lookup_cstr(t, "<|channel|>") >= 0 &&
                   lookup_cstr(t, "<|message|>") >= 0;
    if (cJSON_IsBool(add_bos)) t->add_bos = cJSON_IsTrue(add_bos);
    else if (!bos_set) t->add_bos = t->bos >= 0 && t->bos != t->eos && !harmony;
    if (cJSON_IsBool(add_eos)) t->add_eos = cJSON_IsTrue(add_eos);

    const cJSON *tmpl = get(cfg, "chat_template");
    const char *tmpl_text = cJSON_IsString(tmpl) ? tmpl->valuestring : NULL;
    const cJSON *tmpl_list = cJSON_IsArray(tmpl) ? tmpl : NULL;
    cJSON_ArrayForEach(item, tmpl_list) {
        const char *name = get_str(item, "name");
        if (name && !strcmp(name, "default")) tmpl_text = get_str(item, "template");
    }
    if (tmpl_text && !(t->chat_template = tok_strndup(tmpl_text, strlen(tmpl_text))))
        return pith_errf(err, "out of memory");
    return 0;
}

int tok_load_hf_json(const char *json_path, const char *config_path, pith_tokenizer **out, pith_err *err) {
    *out = NULL;
    cJSON *root, *cfg = NULL;
    if (pith_json_read(json_path, TOK_MAX_FILE_BYTES, PITH_JSON_MAX_VALUES, false, &root, err)) return -1;
    if (config_path && pith_json_read(config_path, TOK_MAX_CONFIG_BYTES, PITH_JSON_MAX_VALUES, true, &cfg, err)) {
        cJSON_Delete(root);
        return -1;
    }
    pith_tokenizer *t = NULL;
    int rc = build(&t, root, cfg, err);
    cJSON_Delete(root); /* before generation_config.json is read: the tree is the load's largest allocation */
    cJSON_Delete(cfg);
    if (rc != 0) {
        pith_tokenizer_free(t);
        return pith_err_prefix(err, "%s", json_path);
    }
    if (load_generation_config(t, json_path, err)) {
        pith_tokenizer_free(t);
        return -1;
    }
    tok_harmony_eog(t);
    *out = t;
    return 0;
}
