/* Tool calling and reasoning on the request side of /v1/chat/completions (and /v1/responses, which
 * maps onto it): reading and checking `tools`, `tool_choice`, `parallel_tool_calls` and the
 * `reasoning_format` extension, choosing how the model's output is parsed (tool_parse.h) from its chat
 * template, and the tool-call history of the messages.
 *
 * A request gets a chat_tools when its output needs parsing: it has tools (and tool_choice is not
 * "none"), or the model's template writes <think> reasoning. Otherwise it gets none and its output is
 * returned as it always was. */
#ifndef PITH_SERVER_TOOLS_H
#define PITH_SERVER_TOOLS_H

#include <cjson/cJSON.h>

#include "server/api_error.h"
#include "server/server_internal.h"
#include "server/tool_parse.h"

#define TOOLS_MAX 128

typedef enum tool_choice { TOOL_CHOICE_AUTO, TOOL_CHOICE_NONE, TOOL_CHOICE_REQUIRED, TOOL_CHOICE_NAMED } tool_choice;

typedef struct chat_tools {
    tp_config parse;             /* how the output is split */
    tool_choice choice;
    char named[TP_MAX_NAME + 1]; /* TOOL_CHOICE_NAMED: the function */
    cJSON *tools;                /* the request's tools (owned copy); NULL when none */
    bool constrained;            /* decoding follows the tools' grammar (tools_grammar.c) */
    cJSON *echo;                 /* /v1/responses: the request fields its response object repeats */
} chat_tools;

/* The output format of the model's family, from its chat template (HERMES when it shows none of the
 * others, the ChatML fallback included). */
tp_format tools_format_of(const pith_server *srv);

/* Reads the request's tool and reasoning fields. *out is NULL when the output needs no parsing. On a bad
 * field fills err (400) and returns -1. */
int tools_request(const pith_server *srv, const cJSON *body, chat_tools **out, api_error *err);
/* Checks the messages' tool-call history (assistant tool_calls, role "tool") and rewrites, in the copy
 * the template renders, each tool call's arguments string into the JSON object it holds, and an
 * assistant's content null into "" (templates test or search it as a string; harmony's has dropped it
 * before, tools_prepare_harmony), as templates expect. msgs is that copy. */
int tools_prepare_messages(cJSON *msgs, api_error *err);
/* Looks at the rendered prompt: one that ends inside an open <think> starts the output in reasoning. */
void tools_note_prompt(chat_tools *t, const char *prompt, size_t len);
/* For a harmony template (GPT-OSS), in the copy it renders: an assistant message's reasoning, as this
 * server returns it (reasoning_content, or vLLM's reasoning) and no `thinking` of its own, becomes
 * `thinking`, the field the template reads; a null content beside tool_calls is left out (the template
 * cannot test a null for "<|channel|>", and OpenAI clients send one with every tool call). */
void tools_prepare_harmony(cJSON *msgs);
/* For a Mistral template, in the copy it renders: each tool call id and tool_call_id that is not 9
 * letters or digits (OpenAI clients send "call_..." ids; Mistral's templates raise on them) becomes 9
 * such characters, the same for a call and its result. */
void tools_prepare_mistral(cJSON *msgs);
/* tools_polyfill.c: whether a chat template renders tools at all (it mentions them); NULL (ChatML
 * fallback) counts as knowing them. */
bool tools_template_knows_tools(const char *source);
/* For a template that does not: in the copy it renders, the tools described in the system message,
 * assistant tool_calls written as <tool_call> text, each round of tool results one user turn. */
int tools_polyfill(cJSON *msgs, const cJSON *tools, api_error *err);
void chat_tools_free(chat_tools *t);

/* tools_grammar.c: with tool_choice "required" or a named function, sets p's grammar source to the
 * grammar of the call (compiled next by gen_params_compile), setting aside a response_format (it is for
 * the final answer, a later turn); with "auto" and a json_object / json_schema response_format, to
 * "calls or that answer". 400 when another constraint (grammar, guided_*) is given with a forced call,
 * or a schema cannot be compiled. */
struct gen_params;
int tools_constrain(pith_server *srv, struct gen_params *p, api_error *err);

#endif
