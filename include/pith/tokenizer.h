/* Tokenizers: text to token ids and back.
 *
 * One pith_tokenizer type covers SentencePiece-style BPE (llama2.c tokenizer files, GGUF
 * tokenizer.ggml.model = "llama") and byte-level BPE (GGUF "gpt2" with its pre-tokenizer, Hugging Face
 * tokenizer.json). Encoding matches llama.cpp for GGUF vocabularies, llama2.c for its files and Hugging
 * Face tokenizers for tokenizer.json. A tokenizer is immutable after loading and safe to share between
 * threads (encode keeps its working memory per call); the streaming detokenizer (pith_detok) is
 * per-sequence state. */
#ifndef PITH_TOKENIZER_H
#define PITH_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pith/api.h"
#include "pith/gguf.h"
#include "pith/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pith_tokenizer pith_tokenizer;

/* llama2.c tokenizer file (tokenizer.bin / tok512.bin). n_vocab: how many entries to read (the model's
 * vocab size); the file must hold at least that many. BOS = 1, EOS = 2 as in llama2.c. */
PITH_API int pith_tokenizer_load_llama2c(const char *path, int n_vocab, pith_tokenizer **out, pith_err *err);
/* From GGUF metadata (tokenizer.ggml.*). */
PITH_API int pith_tokenizer_from_gguf(const pith_gguf *g, pith_tokenizer **out, pith_err *err);
/* Any supported tokenizer source by path: a GGUF file, a llama2.c tokenizer file (n_vocab as above, 0 to
 * read all), and with the tokenizer issue a tokenizer.json or a model directory. */
PITH_API int pith_tokenizer_load(const char *path, int n_vocab, pith_tokenizer **out, pith_err *err);
PITH_API void pith_tokenizer_free(pith_tokenizer *t);

enum {
    /* Add the special tokens the tokenizer's configuration asks for: BOS when it adds one (Llama: yes;
     * Qwen: no, as add_bos_token says), and EOS in the rare configurations that append it. */
    PITH_TOK_ADD_BOS = 1 << 0,
    /* Match control tokens (<|im_start|>, <s>...) as whole tokens in the text; without it their text is
     * plain text. Non-special added tokens are always matched, as Hugging Face and llama.cpp do. */
    PITH_TOK_PARSE_SPECIAL = 1 << 1,
};

/* Encodes len bytes of text (any bytes; invalid UTF-8 is handled, never crashes). On success *ids is a
 * malloc'd array of *n_ids ids that the caller frees. */
PITH_API int pith_tokenizer_encode(const pith_tokenizer *t, const char *text, size_t len, int flags,
                                   int32_t **ids, int *n_ids, pith_err *err);

PITH_API int pith_tokenizer_n_vocab(const pith_tokenizer *t);
PITH_API int pith_tokenizer_bos(const pith_tokenizer *t);   /* -1 when none */
PITH_API int pith_tokenizer_eos(const pith_tokenizer *t);   /* -1 when none */
/* True for tokens that end generation (EOS, and end-of-turn tokens such as <|eot_id|>, <|im_end|>). */
PITH_API bool pith_tokenizer_is_eog(const pith_tokenizer *t, int32_t id);
/* True for control/special tokens (BOS, EOS, <|im_start|>...), which detokenization skips by default. */
PITH_API bool pith_tokenizer_is_special(const pith_tokenizer *t, int32_t id);
/* The vocabulary entry's text as stored (not decoded); NULL for an out-of-range id. */
PITH_API const char *pith_tokenizer_token_text(const pith_tokenizer *t, int32_t id, size_t *len);
/* The id of the vocabulary entry whose stored text is exactly text[0..len) (as pith_tokenizer_token_text
 * gives it, not decoded: "yes", "<|im_end|>", "\xe2\x96\x81<PRE>"), or -1 when there is none. */
PITH_API int32_t pith_tokenizer_token_id(const pith_tokenizer *t, const char *text, size_t len);
/* Fill-in-the-middle tokens: the ids a GGUF names (tokenizer.ggml.fim_pre_token_id ... fim_sep_token_id,
 * or the older prefix/suffix/middle_token_id), else the first vocabulary entry found among the usual
 * spellings (Qwen2.5-Coder's <|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>, <|fim_pad|>, <|repo_name|>,
 * <|file_sep|>; StarCoder's <fim_prefix>...; CodeLlama's \u2581<PRE>, \u2581<SUF>, \u2581<MID>; DeepSeek
 * Coder's; CodeGemma's <|fim_prefix|>...). -1 when the vocabulary has none. */
typedef enum pith_tok_fim {
    PITH_TOK_FIM_PRE = 0,  /* before the prefix */
    PITH_TOK_FIM_SUF,      /* before the suffix */
    PITH_TOK_FIM_MID,      /* before the middle, which the model writes */
    PITH_TOK_FIM_PAD,
    PITH_TOK_FIM_REP,      /* repository name (repo-level context) */
    PITH_TOK_FIM_SEP,      /* file separator (repo-level context) */
    PITH_TOK_FIM_COUNT
} pith_tok_fim;
PITH_API int32_t pith_tokenizer_fim(const pith_tokenizer *t, pith_tok_fim which);
/* The model's chat template (GGUF tokenizer.chat_template, tokenizer_config.json chat_template), or NULL. */
PITH_API const char *pith_tokenizer_chat_template(const pith_tokenizer *t);

/* Streaming detokenizer: feed ids one at a time, get back only complete UTF-8. Bytes of an incomplete
 * sequence are held until a later token completes them (or flush emits them as U+FFFD). Handles
 * byte-fallback pieces (<0xNN>), the SentencePiece leading space (dropped after BOS / at the start, as
 * the reference tokenizers do) and skips special tokens unless keep_special. */
typedef struct pith_detok {
    const pith_tokenizer *tok;
    bool keep_special;
    bool at_start;          /* no text emitted yet for this sequence */
    unsigned char pending[8];
    int n_pending;
} pith_detok;

PITH_API void pith_detok_init(pith_detok *d, const pith_tokenizer *t, bool keep_special);
/* Writes the text `id` completes to out (NUL-terminated when cap > 0) and returns its length. Output is
 * always valid UTF-8: invalid sequences become U+FFFD. A character that does not fit in cap (with the
 * NUL) is dropped, never cut; cap >= pith_detok_max_piece(t) always suffices (512 does for the common
 * vocabularies, whose tokens are at most ~128 bytes). Out-of-range ids produce nothing. */
PITH_API size_t pith_detok_push(pith_detok *d, int32_t id, char *out, size_t cap);
/* Emits whatever is held back (incomplete UTF-8 becomes U+FFFD). */
PITH_API size_t pith_detok_flush(pith_detok *d, char *out, size_t cap);
/* Consumes ids without emitting them: call it with the prompt before pushing generated ids, so the
 * first generated token reads as a continuation (a SentencePiece " there" after "Once upon a time"
 * keeps its space; after a prompt of only BOS/special tokens the leading space is still dropped).
 * Bytes of a character the prompt leaves unfinished are discarded. */
PITH_API void pith_detok_skip(pith_detok *d, const int32_t *ids, int n);
PITH_API size_t pith_detok_max_piece(const pith_tokenizer *t);
/* The bytes token id stands for, as they are (the SentencePiece marker as a space, a <0xNN> piece as its
 * byte, GPT-2's byte alphabet undone, a special token's text; no space dropped, and possibly a part of a
 * UTF-8 character): llama.cpp's token piece. Written to out (NUL-terminated when cap > 0; cap >=
 * pith_detok_max_piece(t) suffices); returns the length. Out-of-range ids give 0. */
PITH_API size_t pith_tokenizer_token_bytes(const pith_tokenizer *t, int32_t id, char *out, size_t cap);

/* Convenience: decode a whole id sequence; *text is malloc'd and NUL-terminated. */
PITH_API int pith_tokenizer_decode(const pith_tokenizer *t, const int32_t *ids, int n_ids, bool keep_special,
                                   char **text, size_t *len, pith_err *err);

#ifdef __cplusplus
}
#endif

#endif
