/* Splitting a model's output into content, reasoning and tool calls, incrementally: the same parser
 * serves streamed responses (fed each event's text) and whole ones (fed everything, then finished).
 *
 * Formats (what each model family writes when it calls a tool):
 *   HERMES   Hermes / Qwen 2.5 / Qwen 3 / the ChatML fallback: <tool_call>{"name": N, "arguments": A}</tool_call>,
 *            one block per call.
 *   LLAMA3   Llama 3.1-3.3: the whole reply is {"name": N, "parameters": A} (calls separated by ";"),
 *            or <|python_tag|> followed by such JSON.
 *   MISTRAL  [TOOL_CALLS][{"name": N, "arguments": A}, ...] (v0.3) or [TOOL_CALLS]N[ARGS]A (v11 and later).
 *   HARMONY  GPT-OSS: messages <|channel|>C[ to=functions.N][ <|constrain|>json]<|message|>BODY ended by
 *            <|end|>, <|call|> or <|return|>; channel analysis is reasoning, final is content, a
 *            commentary message addressed to functions.N is a call whose BODY is the arguments.
 *   NONE     no tool calls (content, and <think> reasoning if enabled).
 * Reasoning: with `think`, text inside <think>...</think> is reasoning (in_think: the prompt already
 * opened the block, as DeepSeek-R1's and Qwen3's templates do); whitespace around it is trimmed.
 *
 * Guarantees: bytes that might still become a marker are held back until they are known not to be;
 * text that only looked like a call (a <tool_call> whose body is not a JSON object with a name, Llama's
 * reply starting with "{" that is not a call) comes out as content, never lost; a call is announced
 * (CALL_BEGIN with its name) only once its name is complete, and its arguments follow in pieces as they
 * arrive; arguments written as a JSON string are decoded to the string's text. Arguments are passed on
 * as the model wrote them (validity is the grammar's job). */
#ifndef PITH_SERVER_TOOL_PARSE_H
#define PITH_SERVER_TOOL_PARSE_H

#include <stdbool.h>
#include <stddef.h>

#include "server/buf.h"

typedef enum tp_format { TP_FMT_NONE, TP_FMT_HERMES, TP_FMT_LLAMA3, TP_FMT_MISTRAL, TP_FMT_HARMONY } tp_format;

typedef enum tp_event {
    TP_CONTENT,     /* s: content text */
    TP_REASONING,   /* s: reasoning text */
    TP_CALL_BEGIN,  /* s: the function's name */
    TP_CALL_ARGS,   /* s: the next piece of the arguments */
    TP_CALL_END,    /* s: empty */
} tp_event;

typedef void (*tp_sink)(void *user, tp_event ev, const char *s, size_t n);

typedef struct tp_config {
    tp_format format;
    bool tools;      /* parse tool calls (false: the format's markers are plain content) */
    bool parallel;   /* false: everything after the first call is dropped */
    bool think;      /* split <think>...</think> into reasoning */
    bool in_think;   /* the output starts inside a <think> block */
} tp_config;

enum { TP_MAX_NAME = 256 };

/* Incremental scanner of a JSON value (internal to the parser, here for its size). */
typedef struct tp_jscan {
    int depth;
    bool started, in_str, esc, done, scalar;
} tp_jscan;

typedef struct tp_parser {
    tp_config cfg;
    tp_sink sink;
    void *user;
    int mode;
    buf hold;          /* bytes not yet decided */
    buf raw;           /* the current call's text as written, for the fall-back to content */
    bool any_output;   /* something other than whitespace was seen */
    bool strip_ws;     /* drop leading whitespace of the next content/reasoning */
    bool tentative;    /* a Llama reply that may turn out not to be a call */
    bool begun;        /* CALL_BEGIN sent for the current call */
    int n_calls;
    int arr_start;     /* n_calls when a Mistral [TOOL_CALLS][ list opened */
    int wrap;          /* how the current call is framed (see tool_parse.c) */
    /* object scanner */
    int obj_state;
    buf key, name, args;
    bool args_is_str, args_seen, name_seen, first_key;
    tp_jscan js;
    int vkey;          /* which key's value is being read */
    /* harmony */
    int h_route;
    bool h_seen;       /* a message header was read: the output is harmony */
    bool failed;       /* out of memory */
} tp_parser;

void tp_init(tp_parser *p, const tp_config *cfg, tp_sink sink, void *user);
/* Returns -1 when out of memory (the parser is then failed). */
int tp_feed(tp_parser *p, const char *s, size_t n);
/* The output ended: flushes what was held back and closes an unfinished call. */
int tp_finish(tp_parser *p);
void tp_free(tp_parser *p);

#endif
