/* Pre-tokenization: cutting a text fragment into the words that BPE merges within.
 *
 * A pipeline of steps maps a list of pieces to a new list, as Hugging Face's pre-tokenizers do; the
 * GGUF "gpt2" pre-tokenizers are the same thing with a fixed list of Isolated regex splits. Regexes
 * run on PCRE2 in UTF mode with Unicode properties (\p{L}, \s over all of Unicode), compiled with JIT,
 * and with PCRE2_MATCH_INVALID_UTF so that invalid UTF-8 input is matched around instead of rejected:
 * bytes that are not valid UTF-8 never match and end up in gaps, which Isolated splitting keeps. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

int tok_bytelevel_encode(uint8_t b, char out[2]) {
    uint32_t cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) {
        cp = b;
    } else if (b <= 32) {
        cp = 256u + b;
    } else if (b <= 160) {
        cp = 256u + 33u + (b - 127u);
    } else {
        cp = 256u + 33u + 34u; /* 173 */
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

int tok_bytelevel_decode(uint32_t cp) {
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) return (int)cp;
    if (cp >= 256 && cp <= 256 + 32) return (int)(cp - 256);
    if (cp >= 256 + 33 && cp <= 256 + 66) return (int)(cp - 256 - 33 + 127);
    if (cp == 256 + 67) return 173;
    return -1;
}

void *tok_regex_compile(const char *pattern, size_t len, bool caseless, pith_err *err) {
    int code;
    PCRE2_SIZE at;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | (caseless ? PCRE2_CASELESS : 0);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &code, &at, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        pith_errf(err, "tokenizer: bad pre-tokenizer regex at offset %zu: %s", (size_t)at, (const char *)msg);
        return NULL;
    }
    /* JIT is an optimisation only: without it (no JIT support on this CPU) the interpreter runs. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    return re;
}

void tok_regex_free(void *re) { pcre2_code_free(re); }

static int pieces_push(tok_pieces *p, size_t off, size_t len, bool flag) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        tok_piece *v = realloc(p->v, cap * sizeof *v);
        if (!v) return -1;
        p->v = v;
        p->cap = cap;
    }
    tok_piece pc = {off, len, flag};
    p->v[p->n++] = pc;
    return 0;
}

static int ensure_match(tok_scratch *s) {
    if (s->match_data) return 0;
    s->match_data = pcre2_match_data_create(1, NULL);
    return s->match_data ? 0 : -1;
}

/* The JIT's default 32 KiB stack covers ordinary text; a match that needs more (long runs under a
 * backtracking construct) retries once with a large private stack kept for the rest of the call. */
static int match_once(tok_scratch *s, const pcre2_code *re, const char *subject, size_t n, size_t off) {
    int rc = pcre2_match(re, (PCRE2_SPTR)subject, n, off, 0, s->match_data, s->match_ctx);
    if (rc != PCRE2_ERROR_JIT_STACKLIMIT || s->jit_stack) return rc;
    s->match_ctx = pcre2_match_context_create(NULL);
    s->jit_stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
    if (!s->match_ctx || !s->jit_stack) return PCRE2_ERROR_NOMEMORY;
    pcre2_jit_stack_assign(s->match_ctx, NULL, s->jit_stack);
    return pcre2_match(re, (PCRE2_SPTR)subject, n, off, 0, s->match_data, s->match_ctx);
}

/* Collects the matches of re in subject[0..n) and the gaps between them into s->segs (at_origin is
 * "is a match" there). Empty matches are skipped. */
static int find_segments(tok_scratch *s, const pcre2_code *re, const char *subject, size_t n) {
    s->segs.n = 0;
    if (ensure_match(s) != 0) return -1;
    size_t off = 0, prev = 0;
    while (off < n) {
        int rc = match_once(s, re, subject, n, off);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return -2;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->match_data);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms || me > n) {
            off = ms + 1;
            continue;
        }
        if (ms > prev && pieces_push(&s->segs, prev, ms - prev, false) != 0) return -1;
        if (pieces_push(&s->segs, ms, me - ms, true) != 0) return -1;
        prev = off = me;
    }
    if (prev < n && pieces_push(&s->segs, prev, n - prev, false) != 0) return -1;
    return 0;
}

/* Literal split points, for Metaspace: every occurrence of pat. */
static int find_literal_segments(tok_scratch *s, const char *subject, size_t n, const char *pat, size_t pn) {
    s->segs.n = 0;
    size_t prev = 0;
    for (size_t i = 0; pn && i + pn <= n;) {
        if (memcmp(subject + i, pat, pn) == 0) {
            if (i > prev && pieces_push(&s->segs, prev, i - prev, false) != 0) return -1;
            if (pieces_push(&s->segs, i, pn, true) != 0) return -1;
            i += pn;
            prev = i;
        } else {
            i++;
        }
    }
    if (prev < n && pieces_push(&s->segs, prev, n - prev, false) != 0) return -1;
    return 0;
}

/* Turns s->segs of piece `in` into output pieces following Hugging Face's delimiter behaviours. */
static int emit_segments(tok_scratch *s, const tok_piece *in, tok_split_behavior b, bool invert,
                         tok_pieces *out) {
    size_t n = s->segs.n;
    tok_piece *sg = s->segs.v;
    if (invert)
        for (size_t i = 0; i < n; i++) sg[i].at_origin = !sg[i].at_origin;
    size_t first_out = out->n;
    bool prev_match = false;
    for (size_t i = 0; i < n; i++) {
        bool m = sg[i].at_origin;
        size_t off = in->off + sg[i].off, len = sg[i].len;
        bool origin = in->at_origin && sg[i].off == 0;
        switch (b) {
        case TOK_SPLIT_ISOLATED:
            if (pieces_push(out, off, len, origin) != 0) return -1;
            break;
        case TOK_SPLIT_REMOVED:
            if (!m && pieces_push(out, off, len, origin) != 0) return -1;
            break;
        case TOK_SPLIT_MERGED_WITH_PREVIOUS:
            if (m && !prev_match && out->n > first_out) {
                out->v[out->n - 1].len += len;
            } else if (pieces_push(out, off, len, origin) != 0) {
                return -1;
            }
            break;
        case TOK_SPLIT_MERGED_WITH_NEXT:
            if (m && i + 1 < n && !sg[i + 1].at_origin) {
                /* The delimiter opens the next piece. */
                sg[i + 1].off = sg[i].off;
                sg[i + 1].len += len;
            } else if (pieces_push(out, off, len, origin) != 0) {
                return -1;
            }
            break;
        case TOK_SPLIT_CONTIGUOUS:
            if (m == prev_match && out->n > first_out) {
                out->v[out->n - 1].len += len;
            } else if (pieces_push(out, off, len, origin) != 0) {
                return -1;
            }
            break;
        }
        prev_match = m;
    }
    return 0;
}

static const char *other_buffer(tok_scratch *s, const char *base, tok_buf **buf) {
    *buf = base == s->pre[0].p ? &s->pre[1] : &s->pre[0];
    return (*buf)->p;
}

/* Rewrites every piece into a fresh buffer: ByteLevel's prefix space and Metaspace's replacement. */
static int rewrite_pieces(const tok_pre_step *st, tok_scratch *s, const char **base, tok_pieces *in,
                          tok_pieces *out) {
    tok_buf *buf;
    other_buffer(s, *base, &buf);
    buf->n = 0;
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        const char *p = *base + in->v[i].off;
        size_t n = in->v[i].len, start = buf->n;
        if (st->kind == TOK_PRE_BYTELEVEL) {
            if (st->add_prefix_space && (n == 0 || p[0] != ' ') && tok_buf_append(buf, " ", 1) != 0) return -1;
            if (tok_buf_append(buf, p, n) != 0) return -1;
        } else {
            bool has_prefix = n >= st->repl_len && memcmp(p, st->repl, st->repl_len) == 0;
            bool prepend = st->prepend_scheme == 0 || (st->prepend_scheme == 1 && in->v[i].at_origin);
            /* A leading ' ' becomes the replacement, so it counts as already prefixed. */
            if (n > 0 && p[0] == ' ') has_prefix = true;
            if (prepend && !has_prefix && tok_buf_append(buf, st->repl, st->repl_len) != 0) return -1;
            for (size_t j = 0; j < n; j++) {
                int rc = p[j] == ' ' ? tok_buf_append(buf, st->repl, st->repl_len) : tok_buf_append(buf, p + j, 1);
                if (rc != 0) return -1;
            }
        }
        if (pieces_push(out, start, buf->n - start, in->v[i].at_origin) != 0) return -1;
    }
    *base = buf->p;
    return 0;
}

static int split_all(tok_scratch *s, const char *base, const tok_pieces *in, const pcre2_code *re,
                     const char *lit, size_t lit_n, tok_split_behavior b, bool invert, tok_pieces *out) {
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        const tok_piece *pc = &in->v[i];
        int rc = re ? find_segments(s, re, base + pc->off, pc->len)
                    : find_literal_segments(s, base + pc->off, pc->len, lit, lit_n);
        if (rc != 0) return rc;
        if (emit_segments(s, pc, b, invert, out) != 0) return -1;
    }
    return 0;
}

int tok_pretokenize(const pith_tokenizer *t, tok_scratch *s, const char *text, size_t n, bool at_origin,
                    const char **base_out, tok_pieces **pieces_out) {
    tok_pieces *cur = &s->pieces[0], *next = &s->pieces[1];
    cur->n = 0;
    if (pieces_push(cur, 0, n, at_origin) != 0) return -1;
    const char *base = text;
    for (int k = 0; k < t->n_pre; k++) {
        const tok_pre_step *st = &t->pre[k];
        int rc = 0;
        switch (st->kind) {
        case TOK_PRE_SPLIT:
            rc = split_all(s, base, cur, st->re, NULL, 0, st->behavior, st->invert, next);
            break;
        case TOK_PRE_BYTELEVEL:
            if (st->add_prefix_space) {
                rc = rewrite_pieces(st, s, &base, cur, next);
                tok_pieces *tmp = cur;
                cur = next;
                next = tmp;
            }
            if (rc == 0 && st->re) {
                rc = split_all(s, base, cur, st->re, NULL, 0, TOK_SPLIT_ISOLATED, false, next);
            } else if (rc == 0) {
                continue;
            }
            break;
        case TOK_PRE_METASPACE:
            rc = rewrite_pieces(st, s, &base, cur, next);
            if (rc == 0 && st->split) {
                tok_pieces *tmp = cur;
                cur = next;
                next = tmp;
                rc = split_all(s, base, cur, NULL, st->repl, st->repl_len, TOK_SPLIT_MERGED_WITH_NEXT, false, next);
            }
            break;
        }
        if (rc != 0) return rc;
        tok_pieces *tmp = cur;
        cur = next;
        next = tmp;
    }
    *base_out = base;
    *pieces_out = cur;
    return 0;
}

int tok_add_pre_split(pith_tokenizer *t, const char *pattern, size_t len, tok_split_behavior b, bool invert,
                      pith_err *err) {
    tok_pre_step *steps = realloc(t->pre, (size_t)(t->n_pre + 1) * sizeof *steps);
    if (!steps) return pith_errf(err, "tokenizer: out of memory");
    t->pre = steps;
    tok_pre_step *st = &t->pre[t->n_pre];
    memset(st, 0, sizeof *st);
    st->kind = TOK_PRE_SPLIT;
    st->behavior = b;
    st->invert = invert;
    st->re = tok_regex_compile(pattern, len, false, err);
    if (!st->re) return -1;
    t->n_pre++;
    return 0;
}

/* The pre-tokenizer regexes of llama.cpp's GGUF "gpt2" vocabularies, applied in order, each splitting
 * every piece into matches and the gaps between them. */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_LLAMA3 RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* o200k (GPT-4o, GPT-OSS's o200k_harmony, Llama 4): words split at case changes (an upper-case run
 * then lower-case letters, combining marks counted as both), the contraction glued to its word, digits
 * in groups of 1-3, punctuation keeping a trailing run of newlines and slashes. PCRE2 runs the
 * tokenizer.json pattern as it is. */
#define RE_O200K_WORD_LOWER "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
#define RE_O200K_WORD_UPPER "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
#define RE_O200K_CONTRACTION "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
#define RE_O200K RE_O200K_WORD_LOWER RE_O200K_CONTRACTION "|" RE_O200K_WORD_UPPER RE_O200K_CONTRACTION \
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2 RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static const char *const PRE_LLAMA3[] = {RE_LLAMA3, NULL};
static const char *const PRE_QWEN2[] = {RE_QWEN2, NULL};
static const char *const PRE_O200K[] = {RE_O200K, NULL};
static const char *const PRE_GPT2[] = {RE_GPT2, NULL};
static const char *const PRE_STARCODER[] = {"\\p{N}", RE_GPT2, NULL};
static const char *const PRE_FALCON[] = {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]", NULL};
static const char *const PRE_DEFAULT[] = {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]", NULL};
static const char *const PRE_DEEPSEEK_CODER[] = {
    "[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}", NULL,
};
/* Some letters below are written as \u escapes: they are canonical singletons (U+2126 OHM SIGN and
 * friends), which tools that normalize text would silently turn into other code points. */
static const char *const PRE_DEEPSEEK_LLM[] = {
    "[\\r\\n]",
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u1F7Dᾀ-ᾴᾶ-ᾼ\u1FBEῂ-ῄῆ-ῌῐ-\u1FD3ῖ-\u1FDBῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212A-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}+",
    NULL,
};

/* DeepSeek-V3 (and the models on its tokenizer): digits in threes, CJK runs, then words with a leading
 * ASCII punctuation mark kept on them (llama.cpp's DEEPSEEK3_LLM, from the tokenizer.json splits). */
static const char *const PRE_DEEPSEEK3[] = {
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};
/* Mistral's Tekken (Mistral NeMo, Ministral 3, Mistral Small 3.x): words split at lower-to-upper case
 * changes, every digit alone. This is tokenizer.json's own regex; PCRE2 has the Unicode case classes
 * that llama.cpp's engine lacks (it rewrites them with lookaheads to the same effect). */
static const char *const PRE_TEKKEN[] = {
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};

/* Kimi K2 (tokenization_kimi.py's pat_str): o200k's splits with Han runs cut out on their own and never
 * joined to other letters. Its classes [X&&[^\p{Han}]] are written (?:(?!\p{Han})[X]) here: PCRE2 has no
 * class intersection. */
#define KIMI_NOT_HAN(cls) "(?:(?!\\p{Han})[" cls "])"
static const char *const PRE_KIMI_K2[] = {
    "[\\p{Han}]+|"
    "[^\\r\\n\\p{L}\\p{N}]?" KIMI_NOT_HAN("\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}") "*" KIMI_NOT_HAN(
        "\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}") "+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?" KIMI_NOT_HAN("\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}") "+" KIMI_NOT_HAN(
        "\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}") "*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL,
};
#undef KIMI_NOT_HAN

typedef struct pre_entry {
    const char *name;
    const char *const *regexes;
    bool ignore_merges;
} pre_entry;

static const pre_entry PRE_TABLE[] = {
    {"default", PRE_DEFAULT, false},
    {"llama3", PRE_LLAMA3, true},
    {"llama-v3", PRE_LLAMA3, true},
    {"llama-bpe", PRE_LLAMA3, true},
    {"falcon3", PRE_LLAMA3, true},
    {"dbrx", PRE_LLAMA3, false},
    {"smaug-bpe", PRE_LLAMA3, false},
    {"chatglm-bpe", PRE_LLAMA3, false},
    {"glm4", PRE_LLAMA3, false},
    {"deepseek-llm", PRE_DEEPSEEK_LLM, false},
    {"deepseek-coder", PRE_DEEPSEEK_CODER, false},
    {"deepseek-v3", PRE_DEEPSEEK3, false},
    {"tekken", PRE_TEKKEN, true},
    {"kimi-k2", PRE_KIMI_K2, false}, /* whole pieces found in the vocabulary first, as tiktoken and llama.cpp do */
    {"falcon", PRE_FALCON, false},
    {"mpt", PRE_GPT2, false},
    {"gpt-2", PRE_GPT2, false},
    {"phi-2", PRE_GPT2, false},
    {"olmo", PRE_GPT2, false},
    {"jais", PRE_GPT2, false},
    {"roberta-bpe", PRE_GPT2, false},
    {"starcoder", PRE_STARCODER, false},
    {"refact", PRE_STARCODER, false},
    {"command-r", PRE_STARCODER, false},
    {"smollm", PRE_STARCODER, false},
    {"codeshell", PRE_STARCODER, false},
    {"exaone", PRE_STARCODER, false},
    {"minerva-7b", PRE_STARCODER, false},
    {"qwen2", PRE_QWEN2, false},
    {"deepseek-r1-qwen", PRE_QWEN2, false},
    {"stablelm2", PRE_QWEN2, false},
    {"megrez", PRE_QWEN2, false},
    {"gpt-4o", PRE_O200K, false}, /* GPT-OSS's o200k_harmony too, as llama.cpp's converter names it */
    {"llama4", PRE_O200K, false},
};

int tok_set_gguf_pretokenizer(pith_tokenizer *t, const char *pre, size_t pre_len, pith_err *err) {
    const pre_entry *e = &PRE_TABLE[0]; /* llama.cpp's fallback for a missing or unknown name */
    for (size_t i = 0; i < sizeof PRE_TABLE / sizeof PRE_TABLE[0]; i++)
        if (pre && strlen(PRE_TABLE[i].name) == pre_len && memcmp(PRE_TABLE[i].name, pre, pre_len) == 0)
            e = &PRE_TABLE[i];
    t->ignore_merges = e->ignore_merges;
    for (const char *const *re = e->regexes; *re; re++)
        if (tok_add_pre_split(t, *re, strlen(*re), TOK_SPLIT_ISOLATED, false, err) != 0) return -1;
    return 0;
}

void tok_free_pipeline(pith_tokenizer *t) {
    for (int i = 0; i < t->n_pre; i++) {
        if (t->pre[i].re) tok_regex_free(t->pre[i].re);
        free(t->pre[i].repl);
    }
    free(t->pre);
    t->pre = NULL;
    t->n_pre = 0;
    for (int i = 0; i < t->n_norm; i++) {
        if (t->norm[i].re) tok_regex_free(t->norm[i].re);
        free(t->norm[i].a);
        free(t->norm[i].b);
    }
    free(t->norm);
    t->norm = NULL;
    t->n_norm = 0;
}
