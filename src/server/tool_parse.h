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
 *   QWEN3_XML  Qwen3-Coder / Qwen3.5: <tool_call>\n<function=N>\n<parameter=P>\nVALUE\n</parameter>\n...
 *            </function>\n</tool_call>; (a Hermes JSON body inside <tool_call> is read too).
 *   GLM      GLM-4.5 / 4.6 / 4.7: <tool_call>N\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>...</tool_call>
 *            (4.7 writes no newlines; whitespace between the tags is free); a Hermes JSON body too.
 *            For both XML forms the arguments become a JSON object: a parameter whose schema (in
 *            tool_defs) says string, or that the schema does not describe, is a JSON string of the
 *            value's text; any other is the value's text when that is JSON, else a string of it.
 *   DEEPSEEK DeepSeek V3.1 / V3.2-Exp: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>N<｜tool▁sep｜>A<｜tool▁call▁end｜>
 *            ...<｜tool▁calls▁end｜>; V3 / R1: function<｜tool▁sep｜>N\n```json\nA\n```<｜tool▁call▁end｜>.
 *   KIMI_K2  <|tool_calls_section_begin|><|tool_call_begin|>functions.N:I<|tool_call_argument_begin|>A
 *            <|tool_call_end|>...<|tool_calls_section_end|>.
 *   GEMMA4   <|tool_call>call:N{k:<|"|>text<|"|>,n:1}<tool_call|>: bare keys and <|"|>-quoted strings,
 *            rewritten to JSON as they stream (JSON written inside the braces passes through).
 *   NONE     no tool calls (content, and <think> reasoning if enabled).
 * Reasoning: with `think`, text inside <think>...</think> is reasoning (in_think: the prompt already
 * opened the block, as DeepSeek-R1's and Qwen3's templates do); whitespace around it is trimmed. A call
 * written inside the think block (Qwen3, Qwen3.5 and GLM sometimes call before closing it) is a call:
 * the reasoning before it is reasoning, and after the call the block goes on (its </think> closes it);
 * text there that only looked like a call stays reasoning.
 *
 * Guarantees: bytes that might still become a marker are held back until they are known not to be;
 * text that only looked like a call (a <tool_call> whose body is not a JSON object with a name, Llama's
 * reply starting with "{" that is not a call) comes out as content, never lost; a call is announced
 * (CALL_BEGIN with its name) only once its name is complete, and its arguments follow in pieces as they
 * arrive; arguments written as a JSON string are decoded to the string's text. Arguments are passed on
 * as the model wrote them (validity is the grammar's job).
 *
 * The end of the output (tp_finish): a call whose name is complete is ended with its arguments as far as
 * they got. With tp_finish_truncated (the output was cut off: max_tokens) nothing is completed ("{}" is
 * not supplied for arguments never started), and a call cut off before its name was complete is dropped,
 * not returned as content: its text is kept in `dropped` (TP_NOTE_DROPPED); a Llama reply that merely
 * starts with "{" is content unless `forced`. What the parser did to malformed or cut-off output is
 * recorded in `notes` (TP_NOTE_*), for the response to say. */
#ifndef PITH_SERVER_TOOL_PARSE_H
#define PITH_SERVER_TOOL_PARSE_H

#include <stdbool.h>
#include <stddef.h>

#include "server/buf.h"

struct cJSON;

typedef enum tp_format {
    TP_FMT_NONE, TP_FMT_HERMES, TP_FMT_LLAMA3, TP_FMT_MISTRAL, TP_FMT_HARMONY,
    TP_FMT_QWEN3_XML, TP_FMT_GLM, TP_FMT_DEEPSEEK, TP_FMT_KIMI_K2, TP_FMT_GEMMA4,
    TP_FMT_COUNT
} tp_format;

/* What the parser did about output that was not a well-formed call (tp_parser.notes). */
enum {
    TP_NOTE_FELL_BACK = 1,   /* text that opened a call was not one: it was returned as content/reasoning */
    TP_NOTE_CUT_CALL = 2,    /* the output ended inside a call: it was returned with partial arguments */
    TP_NOTE_DROPPED = 4,     /* the output was cut off before a call's name was complete: text dropped */
    TP_NOTE_IN_REASONING = 8 /* a call was written inside the think block */
};

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
    bool forced;     /* decoding was constrained to calls (tool_choice required / named) */
    const struct cJSON *tool_defs; /* the request's tools (not owned): XML parameter types; may be NULL */
} tp_config;

/* Whether a parameter with this JSON schema (NULL: not described) takes an XML value's text as a string. */
bool tp_param_is_string(const struct cJSON *schema);
/* The schema of parameter `key` of function `name` in tools (an OpenAI tools array); NULL when none. */
const struct cJSON *tp_param_schema(const struct cJSON *tools, const char *name, const char *key);

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
    /* XML bodies (tool_parse_xml.c) and special-token sections (tool_parse_section.c) */
    int x_state, x_vtype, sec_state, sec_first;
    bool x_lead, x_params, think_resume, truncated, final_run;
    unsigned g_stack;  /* Gemma 4: one bit per open container, 1 = object */
    int g_depth, g_state;
    bool g_key, g_esc;
    buf xval;          /* a typed XML value gathered whole */
    unsigned notes;    /* TP_NOTE_* */
    buf dropped;       /* the text of a call cut off before its name was complete */
} tp_parser;

void tp_init(tp_parser *p, const tp_config *cfg, tp_sink sink, void *user);
/* Returns -1 when out of memory (the parser is then failed). */
int tp_feed(tp_parser *p, const char *s, size_t n);
/* The output ended: flushes what was held back and closes an unfinished call. */
int tp_finish(tp_parser *p);
/* The output was cut off (finish_reason "length"): as tp_finish, but see above for unfinished calls. */
int tp_finish_truncated(tp_parser *p);
void tp_free(tp_parser *p);

#endif
