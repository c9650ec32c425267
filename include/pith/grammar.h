/* Structured output: grammars that constrain which tokens may be sampled.
 *
 * A grammar (GBNF, a JSON Schema, a regular expression, or schema-free JSON) is compiled once against a
 * vocabulary into a pith_grammar: a pushdown automaton over bytes (rules over byte ranges; the matcher's
 * state is a set of stacks) plus, for every position of the automaton, a precomputed token mask for the
 * tokens whose acceptance does not depend on what lies below the top of the stack (xgrammar's adaptive
 * token masks). A matcher follows one sequence: it gives the mask of tokens allowed next (the
 * precomputed masks of its stack tops, plus a check of each remaining, context-dependent token against
 * the full stack) or checks one token alone (cheaper when the sampled token is usually allowed), and
 * accepts the sampled token's bytes.
 *
 * Special tokens are never allowed, except the end-of-generation tokens (EOS, <|eot_id|>...) at a state
 * where the grammar may end. A pith_grammar is reference counted and shared by any number of matchers
 * (and engine requests); its lazily filled caches are guarded by a mutex, so matchers of one grammar may
 * run on different threads. A matcher is per sequence and not thread-safe.
 *
 * Front ends (docs/api.md#structured-output lists what each supports): GBNF as llama.cpp's `grammar`
 * parameter takes it, JSON Schema (OpenAI strict mode and common real-world schemas), a regular
 * expression, schema-free JSON and a list of choices. Anything unsupported fails with an error that
 * names it: a grammar never silently becomes unconstrained. */
#ifndef PITH_GRAMMAR_H
#define PITH_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pith/api.h"
#include "pith/status.h"
#include "pith/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- vocabulary: every token's bytes, built once per tokenizer and shared by its grammars ---- */
typedef struct pith_grammar_vocab pith_grammar_vocab;

enum {
    PITH_GRAMMAR_TOKEN_NORMAL = 0,  /* its bytes are matched against the grammar */
    PITH_GRAMMAR_TOKEN_SPECIAL = 1, /* never allowed */
    PITH_GRAMMAR_TOKEN_END = 2,     /* ends generation: allowed only where the grammar may end */
};

/* The bytes each token decodes to (SentencePiece space markers and <0xNN> pieces, GPT-2 byte-level
 * characters), special tokens from pith_tokenizer_is_special and end tokens from pith_tokenizer_is_eog.
 * n_rows: the model's logits rows (0: the tokenizer's size). Published checkpoints often pad their
 * embedding past the tokenizer (Qwen2.5/Qwen3: 151,936 rows for 151,669 tokens): the vocabulary then has
 * n_rows entries and each row with no token is never allowed; with fewer rows than tokens, the tokens
 * past the last row (which the model cannot produce) are left out. */
PITH_API int pith_grammar_vocab_from_tokenizer(const pith_tokenizer *t, int n_rows, pith_grammar_vocab **out,
                                               pith_err *err);
/* From explicit byte strings (tests, other tokenizers): bytes[i] of lens[i] bytes, kinds[i] one of
 * PITH_GRAMMAR_TOKEN_* (kinds may be NULL: all normal). Everything is copied. */
PITH_API int pith_grammar_vocab_new(int n_vocab, const char *const *bytes, const size_t *lens,
                                    const uint8_t *kinds, pith_grammar_vocab **out, pith_err *err);
PITH_API void pith_grammar_vocab_free(pith_grammar_vocab *v);
PITH_API int pith_grammar_vocab_size(const pith_grammar_vocab *v);

/* ---- compiled grammars ---- */
typedef struct pith_grammar pith_grammar;

typedef enum pith_grammar_kind {
    PITH_GRAMMAR_GBNF = 0,       /* llama.cpp GBNF; the start rule is `root` */
    PITH_GRAMMAR_JSON_SCHEMA,    /* a JSON Schema document (text) */
    PITH_GRAMMAR_REGEX,          /* a regular expression, matched whole */
    PITH_GRAMMAR_JSON,           /* any JSON object (response_format json_object); source ignored */
    PITH_GRAMMAR_CHOICE,         /* a JSON array of strings: the output is exactly one of them */
    PITH_GRAMMAR_JSON_SCHEMA_STRICT, /* a JSON Schema under strict mode: a oneOf must be exact (below) */
} pith_grammar_kind;

/* Compiles src (len bytes; need not be NUL-terminated) for vocabulary v, which must outlive the
 * grammar. Fills err with one line naming the problem (a GBNF syntax error with its line and column,
 * an unsupported JSON Schema keyword with its path, ...). *out holds one reference. */
PITH_API int pith_grammar_compile(const pith_grammar_vocab *v, pith_grammar_kind kind, const char *src,
                                  size_t len, pith_grammar **out, pith_err *err);
PITH_API pith_grammar *pith_grammar_retain(pith_grammar *g);
PITH_API void pith_grammar_release(pith_grammar *g); /* frees at the last reference; NULL is fine */
PITH_API const pith_grammar_vocab *pith_grammar_get_vocab(const pith_grammar *g);
/* The bytes the grammar holds now (its tables grow as matchers visit new states). A grammar expands to
 * at most 1048576 elements (repetitions unrolled; compile refuses more, naming the limit), and everything
 * it allocates, per element or grown lazily, counts against a limit of 512 MiB: at compile time that
 * is a refusal, later pith_grammar_outgrown. */
PITH_API size_t pith_grammar_bytes(pith_grammar *g);

/* Text front ends: each writes GBNF (malloc'd, NUL-terminated, *gbnf) whose start rule is named
 * `root_name` and whose other rules all begin with `root_name` followed by '-', so the output of several
 * calls with different names can be concatenated into one grammar (a tool call wrapping the schema of
 * its arguments, for example) with a hand-written `root` rule referring to them. */
PITH_API int pith_grammar_json_schema_to_gbnf(const char *schema, size_t len, const char *root_name,
                                              char **gbnf, pith_err *err);
/* oneOf is compiled as anyOf. That is exact when its branches provably match no common value (different
 * JSON types; enumerations with no common value; a property both require with disjoint schemas, the
 * discriminator pattern; a property one requires and the other forbids): a value generated from one
 * branch then fails the others. Otherwise the output may match two branches, which oneOf forbids: with
 * strict true that is an error naming the schema path (use anyOf), with strict false it is allowed
 * (the one place an output may not validate). pith_grammar_json_schema_to_gbnf is strict false. */
PITH_API int pith_grammar_json_schema_to_gbnf_strict(const char *schema, size_t len, const char *root_name,
                                                     bool strict, char **gbnf, pith_err *err);
PITH_API int pith_grammar_regex_to_gbnf(const char *regex, size_t len, const char *root_name, char **gbnf,
                                        pith_err *err);
/* Schema-free JSON: any value (object_only false) or any object. */
PITH_API int pith_grammar_json_to_gbnf(bool object_only, const char *root_name, char **gbnf, pith_err *err);

/* ---- matchers: one per sequence ---- */
typedef struct pith_grammar_matcher pith_grammar_matcher;

PITH_API int pith_grammar_matcher_new(pith_grammar *g, pith_grammar_matcher **out, pith_err *err);
PITH_API void pith_grammar_matcher_free(pith_grammar_matcher *m);
/* Words of a mask: one bit per token, bit (id % 32) of word (id / 32); 1 = allowed. */
PITH_API size_t pith_grammar_mask_words(const pith_grammar *g);
/* Writes the mask of tokens allowed next into mask[pith_grammar_mask_words]. Returns the number of
 * tokens allowed, or -1 with err filled (the automaton outgrew its limits). */
PITH_API int pith_grammar_matcher_fill_mask(pith_grammar_matcher *m, uint32_t *mask, pith_err *err);
/* Whether one token is allowed next (no mask is built). False also where taking the token would make
 * the automaton outgrow its memory limit (pith_grammar_outgrown): so a mask filled just before may
 * allow a token that allows() and accept then refuse, and only then. */
PITH_API bool pith_grammar_matcher_allows(pith_grammar_matcher *m, int32_t token);
/* Advances over the token's bytes. Returns 0, or -1 with err filled when the token is not allowed (the
 * matcher is then unchanged). An end token is accepted only where the grammar may end, and the matcher
 * is then finished. */
PITH_API int pith_grammar_matcher_accept(pith_grammar_matcher *m, int32_t token, pith_err *err);
/* Advances over raw bytes (tests, prefilled text); same contract as accept. */
PITH_API int pith_grammar_matcher_accept_bytes(pith_grammar_matcher *m, const char *bytes, size_t len,
                                               pith_err *err);
/* The grammar's automaton outgrew its memory limit (stacks that multiply without bound, e.g. a rule
 * that recurses before a choice it never closes). From then on fill_mask fails for every matcher of the
 * grammar and allows / accept refuse every step not computed before; the process is unaffected. */
PITH_API bool pith_grammar_outgrown(pith_grammar *g);
/* The grammar may end here (an end token is allowed). */
PITH_API bool pith_grammar_matcher_can_end(const pith_grammar_matcher *m);
/* The grammar has ended: an end token was accepted, or the input is complete and nothing else may
 * follow (generation should stop). */
PITH_API bool pith_grammar_matcher_is_done(const pith_grammar_matcher *m);

#ifdef __cplusplus
}
#endif

#endif
