/* Internal layout of pith_tokenizer, shared by the loaders, the encoder and the decoder.
 *
 * Every loader (llama2.c file, GGUF, tokenizer.json, SentencePiece .model) builds the same structure:
 * a vocabulary (token texts, scores, types), optional BPE merges, a normalizer and pre-tokenizer
 * pipeline, and the set of added/special tokens matched whole before anything else. After
 * tok_finalize() the structure is never written again, so one tokenizer can serve many threads;
 * per-call scratch lives in the encoder. */
#ifndef PITH_TOK_INTERNAL_H
#define PITH_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pith/tokenizer.h"
#include "tokenizer/tok_map.h"

/* Token types, numbered as GGUF tokenizer.ggml.token_type (and SentencePiece's piece types). */
enum {
    TOK_NORMAL = 1,
    TOK_UNKNOWN = 2,
    TOK_CONTROL = 3,
    TOK_USER_DEFINED = 4,
    TOK_UNUSED = 5,
    TOK_BYTE = 6,
};

/* How symbols merge: SentencePiece picks the adjacent pair whose concatenation is the best-scoring
 * vocabulary entry; BPE picks the pair with the lowest merge rank. */
typedef enum tok_model_kind { TOK_MODEL_SPM, TOK_MODEL_BPE } tok_model_kind;

/* How token texts turn back into bytes. */
typedef enum tok_decode_kind {
    TOK_DECODE_SPM,        /* space marker -> ' ', <0xNN> pieces -> the byte */
    TOK_DECODE_BYTELEVEL,  /* each char of the GPT-2 byte alphabet -> its byte */
} tok_decode_kind;

typedef enum tok_norm_kind {
    TOK_NORM_PREPEND,      /* prepend `a` to a non-empty fragment */
    TOK_NORM_REPLACE,      /* replace every occurrence of `a` by `b` (or regex `re` by `b`) */
    TOK_NORM_NFC,
} tok_norm_kind;

typedef struct tok_norm_step {
    tok_norm_kind kind;
    char *a;
    size_t a_len;
    char *b;
    size_t b_len;
    void *re;              /* pcre2_code* for regex Replace, else NULL */
    int flags;
} tok_norm_step;

typedef enum tok_split_behavior {
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_MERGED_WITH_PREVIOUS,
    TOK_SPLIT_MERGED_WITH_NEXT,
    TOK_SPLIT_CONTIGUOUS,
} tok_split_behavior;

typedef enum tok_pre_kind {
    TOK_PRE_SPLIT,         /* split each piece by regex `re` (also Digits, WhitespaceSplit) */
    TOK_PRE_BYTELEVEL,     /* optional prefix space + optional GPT-2 regex split; marks byte-level */
    TOK_PRE_METASPACE,     /* ' ' -> replacement, optional prefix, optional split before it */
} tok_pre_kind;

typedef struct tok_pre_step {
    tok_pre_kind kind;
    void *re;              /* pcre2_code* (Split, and ByteLevel with use_regex) */
    tok_split_behavior behavior;
    bool invert;
    bool add_prefix_space; /* ByteLevel */
    char *repl;            /* Metaspace replacement (UTF-8) */
    size_t repl_len;
    int prepend_scheme;    /* Metaspace: 0 always, 1 first, 2 never */
    bool split;            /* Metaspace: split before each replacement */
} tok_pre_step;

/* An added/special token matched whole in the raw text. */
typedef struct tok_special {
    int32_t id;
    bool needs_parse_special; /* control tokens: only matched with PITH_TOK_PARSE_SPECIAL */
    bool lstrip, rstrip;      /* swallow whitespace on that side */
} tok_special;

/* Byte trie over the special tokens' texts: node 0 is the root; children are a sibling list. */
typedef struct tok_trie_node {
    int32_t child, sibling;
    int32_t special;        /* index into specials of the token ending here, or -1 */
    uint8_t byte;
} tok_trie_node;

/* A piece of the input after special-token matching: raw text, or one whole token. */
typedef struct tok_fragment {
    size_t off, len;        /* raw text span (len 0 for tokens) */
    int32_t id;             /* >= 0: a matched special token */
} tok_fragment;

typedef struct tok_fragments {
    tok_fragment *v;
    size_t n, cap;
} tok_fragments;

struct pith_tokenizer {
    tok_model_kind model;
    tok_decode_kind decode;
    int n_vocab;

    /* Token i's text is arena[off[i] .. off[i]+len[i]), followed by a NUL. */
    char *arena;
    size_t arena_len, arena_cap;
    uint64_t *off;
    uint32_t *len;
    float *scores;          /* SentencePiece merge priorities (0 for BPE vocabularies) */
    uint8_t *types;         /* TOK_* per token */
    bool *eog;              /* per token: ends generation */
    tok_strmap vocab;       /* text -> id (the last id wins on duplicate texts) */

    /* BPE: (left id, right id) -> rank and merged id. */
    tok_pairmap merges;

    int32_t byte_token[256];  /* <0xNN> tokens (SPM byte fallback), -1 where absent */
    int32_t bytelevel_token[256]; /* byte-level BPE: the token of each byte's GPT-2 char */
    bool byte_level;          /* BPE over GPT-2 byte-alphabet symbols */
    bool byte_fallback;       /* unknown chars become <0xNN> tokens (else unk) */
    bool ignore_merges;       /* BPE: a pre-token that is itself a token is emitted whole */
    bool ignore_merges_newlines; /* BPE: the same for a pre-token of newlines alone (llama.cpp's gemma4) */
    bool fuse_unk;
    bool add_space_prefix;    /* SPM: one ' ' before each raw fragment */
    /* The space marker of SentencePiece-style vocabularies ("▁", or ' ' in llama2.c files; for
     * tokenizer.json, what a Replace normalizer turns ' ' into). Merge results are vocabulary tokens,
     * so when no mergeable token holds the marker right after another character (and the marker is a
     * token itself, so unknown runs cannot fuse across it), no merge can cross the start of a marker
     * that follows a non-marker: text without a pre-tokenizer is then merged word by word there, and
     * words are cached. split_words says whether tok_finalize found that to hold. A few vocabularies
     * have such tokens (Gemma 3: ">▁</"); word_sticky marks each byte that some token holds right before
     * a marker that follows a non-marker, and words are never split after such a byte (a token can
     * only cross a boundary whose preceding byte it holds there). */
    char space_marker[4];
    size_t space_marker_len;
    bool split_words;
    bool word_sticky[256];
    bool strip_leading_space; /* decode: drop the first ' ' of the sequence */
    bool specials_leftmost;   /* HF: leftmost-longest special matching; else llama.cpp's order */
    bool no_special_matching; /* llama2.c files: special texts are never matched in input */

    int32_t bos, eos, unk, pad;
    int32_t fim[PITH_TOK_FIM_COUNT]; /* fill-in-the-middle ids a GGUF names (PITH_TOK_FIM_*), -1 where none */
    bool add_bos, add_eos;

    tok_norm_step *norm;
    int n_norm;
    tok_pre_step *pre;
    int n_pre;

    tok_special *specials;  /* sorted by text length, longest first */
    int n_specials;
    tok_trie_node *trie;
    int n_trie;
    int32_t trie_root[256];  /* root's child for each first byte, -1 where none */

    char *chat_template;    /* NUL-terminated, or NULL */
    size_t max_token_len;
};

/* --- vocabulary building (tok_vocab.c) --- */
pith_tokenizer *tok_alloc(int n_vocab, pith_err *err);
/* Sets token id's text/score/type; texts are copied. */
int tok_set_token(pith_tokenizer *t, int32_t id, const char *text, size_t len, float score, int type,
                  pith_err *err);
/* Builds the lookup tables that depend on the whole vocabulary (text map, byte tokens, specials,
 * end-of-generation set). Call once after every token, id and flag is set; merges come after. */
int tok_finalize(pith_tokenizer *t, pith_err *err);
/* Harmony (GPT-OSS): <|end|> closes one message and the reply goes on (analysis, then final); the reply
 * ends at <|return|> or <|call|>. So where both exist <|end|> is not end-of-generation, whatever marked
 * it (its name, a GGUF eot_token_id, generation_config.json); llama.cpp does the same. Phi-3's <|end|>
 * (no <|return|>) still ends generation. Called last by each loader. */
void tok_harmony_eog(pith_tokenizer *t);
/* Sizes the merge table for n merges; then tok_add_merge for each, best (lowest rank) first. */
int tok_reserve_merges(pith_tokenizer *t, size_t n, pith_err *err);
/* Adds the merge (a, b) with the given rank; a merge whose parts or result are not tokens is ignored
 * (it could never apply), as is a repeat of an earlier pair. */
void tok_add_merge(pith_tokenizer *t, const char *a, size_t a_len, const char *b, size_t b_len,
                   int32_t rank);
int32_t tok_lookup(const pith_tokenizer *t, const char *text, size_t len);
char *tok_strndup(const char *s, size_t n);

/* --- loaders --- */
/* What a tokenizer load reads: tokenizer.json, tokenizer.model and tokenizer.bin up to 64 MiB (the largest
 * published tokenizer.json, Gemma 3's, is 33 MB; a tokenizer.model is a few MB), the configs beside
 * tokenizer.json up to 16 MiB and 1 MiB. Files are read with pith_read_small_file (format/mapped_file.h):
 * only regular files, refused from their size before a byte is read. */
#define TOK_MAX_FILE_BYTES ((size_t)64 << 20)
#define TOK_MAX_CONFIG_BYTES ((size_t)16 << 20)
#define TOK_MAX_GENERATION_CONFIG_BYTES ((size_t)1 << 20)
/* tokenizer.json: ids the file leaves unnamed, beyond twice those it names (the tables hold every id up to
 * the largest). */
#define TOK_MAX_UNNAMED_IDS 65536
/* Reads a whole tokenizer file (up to TOK_MAX_FILE_BYTES) into a malloc'd, NUL-terminated buffer. */
int tok_read_file(const char *path, char **data, size_t *size, pith_err *err);
int tok_load_llama2c_data(const char *path, const unsigned char *d, size_t n, int n_vocab, pith_tokenizer **out,
                          pith_err *err);
/* tokenizer.json (+ tokenizer_config.json beside it when config_path is not NULL). */
int tok_load_hf_json(const char *json_path, const char *config_path, pith_tokenizer **out, pith_err *err);
/* SentencePiece model protobuf (tokenizer.model). */
int tok_load_spm_model(const char *path, pith_tokenizer **out, pith_err *err);

/* --- special tokens (tok_special.c) --- */
int tok_build_special_trie(pith_tokenizer *t, pith_err *err);
/* Sets lstrip/rstrip on a special token (Hugging Face added-token options). */
void tok_special_set_strip(pith_tokenizer *t, int32_t id, bool lstrip, bool rstrip);
/* Cuts text into raw fragments and whole special tokens. */
int tok_split_specials(const pith_tokenizer *t, const char *text, size_t n, bool parse_special,
                       tok_fragments *out);

/* --- pipeline pieces --- */
void tok_free_pipeline(pith_tokenizer *t);
/* GPT-2 byte alphabet: the UTF-8 encoding (1-2 bytes) of byte b's char; returns its length. */
int tok_bytelevel_encode(uint8_t b, char out[2]);
/* Inverse: the byte of code point cp, or -1 when cp is not in the alphabet. */
int tok_bytelevel_decode(uint32_t cp);
/* Compiles a pre-tokenizer regex (PCRE2, UTF + UCP, JIT when available). */
void *tok_regex_compile(const char *pattern, size_t len, bool caseless, pith_err *err);
void tok_regex_free(void *re);
/* Sets the pre-tokenizer of GGUF "gpt2" vocabularies from tokenizer.ggml.pre. */
int tok_set_gguf_pretokenizer(pith_tokenizer *t, const char *pre, size_t pre_len, pith_err *err);
/* Appends a normalizer step (Prepend a; Replace a by b; NFC). */
int tok_add_norm(pith_tokenizer *t, tok_norm_kind kind, const char *a, size_t a_len, const char *b, size_t b_len,
                 pith_err *err);
int tok_add_pre_split(pith_tokenizer *t, const char *pattern, size_t len, tok_split_behavior b,
                      bool invert, pith_err *err);

/* --- per-call scratch (tok_encode.c owns it; tok_merge.c and tok_pretok.c fill it) --- */
typedef struct tok_sym {
    int32_t start, n;      /* byte span in the text being merged; n == 0 once merged away */
    int32_t prev, next;    /* neighbours in the symbol chain, -1 at the ends */
    int32_t id;            /* token id, -1 unknown, -2 not yet looked up (SPM) */
} tok_sym;

/* A candidate merge of symbol `left` with its right neighbour. key orders the heap (smaller first):
 * the priority in the high 32 bits (rank, or the inverted score) and `left` in the low 32, so equal
 * priorities resolve leftmost first. */
typedef struct tok_bigram {
    uint64_t key;
    int32_t size;          /* left.n + right.n when pushed: a mismatch later means it is stale */
    int32_t result;
} tok_bigram;

typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;

typedef struct tok_piece {
    size_t off, len;
    bool at_origin;        /* begins at offset 0 of the caller's text (Metaspace "first") */
} tok_piece;

typedef struct tok_pieces {
    tok_piece *v;
    size_t n, cap;
} tok_pieces;

typedef struct tok_buf {
    char *p;
    size_t n, cap;
} tok_buf;

typedef struct tok_scratch {
    tok_sym *syms;
    size_t syms_cap;
    tok_bigram *heap;
    size_t heap_n, heap_cap;
    tok_buf tmp;           /* byte-level text of a word (ignore_merges lookups) */
    tok_buf norm[2];       /* normalizer ping-pong buffers */
    tok_buf pre[2];        /* pre-tokenizer ping-pong buffers */
    tok_pieces pieces[2];
    tok_pieces segs;       /* one regex split: matches and the gaps between them */
    void *match_data;      /* pcre2_match_data* */
    void *jit_stack;       /* pcre2_jit_stack* */
    void *match_ctx;       /* pcre2_match_context* */
    bool oom;
} tok_scratch;

int tok_ids_push(tok_ids *ids, int32_t id);
int tok_buf_reserve(tok_buf *b, size_t n);
int tok_buf_append(tok_buf *b, const char *s, size_t n);

/* Merges text[0..n) with SentencePiece scores and appends the ids. */
int tok_spm_encode(const pith_tokenizer *t, tok_scratch *s, const char *text, size_t n, tok_ids *out);
/* Runs BPE merges over one pre-token and appends the ids. */
int tok_bpe_encode(const pith_tokenizer *t, tok_scratch *s, const char *word, size_t n, tok_ids *out);
/* Applies the normalizer; *out points at text itself when nothing changes. */
int tok_normalize(const pith_tokenizer *t, tok_scratch *s, const char *text, size_t n, const char **out,
                  size_t *out_n);
/* Splits text into pre-tokens; the pieces refer to *base (text itself or a scratch buffer). */
int tok_pretokenize(const pith_tokenizer *t, tok_scratch *s, const char *text, size_t n, bool at_origin,
                    const char **base, tok_pieces **pieces);
/* Unicode NFC of text into out (appended). */
int tok_nfc(const char *text, size_t n, tok_buf *out);
/* True when text may change under NFC (a cheap conservative scan). */
bool tok_nfc_maybe_changes(const char *text, size_t n);

/* UTF-8 length implied by a lead byte (1 for continuation or invalid bytes, as llama.cpp counts). */
static inline int tok_utf8_len(unsigned char c) {
    static const uint8_t lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[c >> 4];
}

#endif
