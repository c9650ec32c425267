/* Chat templates: turn a conversation into the exact prompt text a model was trained on.
 *
 * A model ships its own template (GGUF `tokenizer.chat_template`, or `chat_template` in Hugging Face
 * tokenizer_config.json), written in Jinja2. This module owns a small interpreter for the subset of Jinja2
 * those templates use and renders them the way Hugging Face transformers' apply_chat_template does:
 * jinja2 with trim_blocks and lstrip_blocks on, keep_trailing_newline off, break/continue, the globals
 * raise_exception(msg), strftime_now(fmt), range, namespace and dict, and a tojson filter that keeps
 * non-ASCII text and key order (json.dumps(ensure_ascii=False)). docs/chat-templates.md lists what is
 * supported and the known differences.
 *
 * Invariants:
 * - A model without a template (tmpl NULL or "") uses ChatML, PITH_CHAT_TEMPLATE_CHATML below.
 * - Rendering never crashes or hangs on any template or conversation: memory, output size, evaluation
 *   steps and nesting depth are bounded (pith_chat_limits). Exceeding one is an error, not a truncation.
 * - A template the interpreter cannot render fails with one line naming the construct and line, e.g.
 *   "chat template: unsupported filter 'foo' at line 3"; raise_exception(msg) fails with msg.
 * - A compiled template is immutable and may be rendered from several threads at once.
 * - Output is malloc'd, NUL-terminated, owned by the caller. */
#ifndef PITH_CHAT_H
#define PITH_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "pith/api.h"
#include "pith/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The fallback for models without a template: ChatML as Hugging Face transformers writes it, extended in
 * the Hermes / Qwen style for tools. Plain role/content conversations render exactly as HF's ChatML
 * (`<|im_start|>ROLE\nCONTENT<|im_end|>\n`). With `tools`, a system message lists them inside
 * <tools></tools> (any system message of the request first) and asks for
 * `<tool_call>{"name": ..., "arguments": ...}</tool_call>`; an assistant message's tool_calls render in
 * that form (arguments as given when a string, else as JSON); content null or absent renders as empty;
 * a "tool" message renders its content inside <tool_response></tool_response>. */
#define PITH_CHAT_TEMPLATE_CHATML                                                                          \
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"                                                      \
    "{%- if messages and messages[0].role == 'system' and messages[0].content is string %}"              \
    "{{- messages[0].content + '\\n\\n' }}{%- endif %}"                                                    \
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"            \
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"            \
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"                                \
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments " \
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": " \
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' }}{%- endif %}"                                      \
    "{%- for message in messages %}"                                                                     \
    "{%- if not (tools and loop.first and message.role == 'system' and message.content is string) %}"    \
    "{%- set content = message.content if message.content is string else '' %}"                          \
    "{%- if message.role == 'tool' %}"                                                                   \
    "{{- '<|im_start|>tool\\n<tool_response>\\n' + content + '\\n</tool_response><|im_end|>\\n' }}"       \
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + content }}"                                   \
    "{%- if message.tool_calls is defined and message.tool_calls %}"                                     \
    "{%- for tc in message.tool_calls %}{%- set f = tc.function if tc.function is defined else tc %}"    \
    "{%- if content or not loop.first %}{{- '\\n' }}{%- endif %}"                                        \
    "{{- '<tool_call>\\n{\"name\": \"' + f.name + '\", \"arguments\": ' }}"                              \
    "{%- if f.arguments is string %}{{- f.arguments }}{%- else %}{{- f.arguments | tojson }}{%- endif %}" \
    "{{- '}\\n</tool_call>' }}{%- endfor %}{%- endif %}"                                                  \
    "{{- '<|im_end|>\\n' }}{%- endif %}{%- endif %}{%- endfor %}"                                         \
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"

typedef struct pith_chat_message {
    const char *role;
    const char *content; /* NULL renders as none */
} pith_chat_message;

/* Zero fields take the defaults in brackets. */
typedef struct pith_chat_limits {
    size_t max_output_bytes; /* [8 MiB] longest rendered text (and any intermediate string) */
    size_t max_memory_bytes; /* [256 MiB] working memory of one render */
    uint64_t max_steps;      /* [20,000,000] expression/statement evaluations and loop iterations */
    int max_depth;           /* [100] nesting of template syntax, data and macro calls */
} pith_chat_limits;

typedef struct pith_chat_options {
    bool add_generation_prompt;
    const char *bos_token;   /* NULL: bos_token is undefined in the template */
    const char *eos_token;   /* NULL: eos_token is undefined */
    const cJSON *vars;       /* optional JSON object: more variables (tools, enable_thinking, ...) */
    pith_chat_limits limits;
} pith_chat_options;

typedef struct pith_chat_template pith_chat_template;

/* Parses a template once (tmpl NULL or "" gives ChatML). Syntax errors and unknown filters or tests are
 * reported here, so a model's template can be checked when the model loads. */
PITH_API int pith_chat_template_compile(const char *tmpl, pith_chat_template **out, pith_err *err);
PITH_API void pith_chat_template_free(pith_chat_template *t);
/* The text the template was compiled from (the ChatML fallback's when it was given none). */
PITH_API const char *pith_chat_template_source(const pith_chat_template *t);

/* Renders with `messages`, a JSON array of objects (role, content: a string, null, absent, or a list of
 * parts such as {"type": "text", "text": ...}; any other keys such as tool_calls are visible too).
 * opts may be NULL (no generation prompt, no tokens). *out_len (if not NULL) gets the length. */
PITH_API int pith_chat_template_render(const pith_chat_template *t, const cJSON *messages,
                                       const pith_chat_options *opts, char **out, size_t *out_len,
                                       pith_err *err);

/* One-shot convenience: compile and render plain role/content messages. */
PITH_API int pith_chat_render(const char *tmpl, const pith_chat_message *msgs, int n,
                              bool add_generation_prompt, const char *bos_token, const char *eos_token,
                              char **out, pith_err *err);

/* One-shot with a JSON messages array and full options. */
PITH_API int pith_chat_render_json(const char *tmpl, const cJSON *messages, const pith_chat_options *opts,
                                   char **out, size_t *out_len, pith_err *err);

#ifdef __cplusplus
}
#endif

#endif
