/* The grammar of forced calls (tool_choice "required" or named) in the formats whose calls are not one
 * JSON object per tool: Qwen3-Coder / Qwen3.5's XML and GLM's arg_key/arg_value, whose parameters are
 * constrained one by one from the parameters schema, and the special-token framings of DeepSeek, Kimi K2
 * and Gemma 4 around JSON arguments. */
#ifndef PITH_SERVER_TOOLS_GRAMMAR_FORMATS_H
#define PITH_SERVER_TOOLS_GRAMMAR_FORMATS_H

#include "server/buf.h"
#include "server/tools.h"

/* Writes the rules of t's calls into g with start rule `calls` (up to max_calls of them). Returns 1 when
 * written, 0 when t's format is not one of these (g untouched), -1 with err (400 invalid_grammar naming
 * the parameters schema that cannot be compiled). */
/* Appends the GBNF string literal of s to g (shared with tools_grammar.c). */
void tools_gbnf_literal(buf *g, const char *s);
int tools_grammar_format_calls(const chat_tools *t, int max_calls, buf *g, api_error *err);

#endif
