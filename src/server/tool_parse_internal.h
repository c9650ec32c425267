/* Internals shared by the parts of the output parser (tool_parse.c: the mode machine, text, JSON call
 * objects, Mistral and harmony; tool_parse_xml.c: the XML call bodies of Qwen3-Coder / Qwen3.5 and GLM;
 * tool_parse_section.c: the special-token sections of DeepSeek, Kimi K2 and Gemma 4). */
#ifndef PITH_SERVER_TOOL_PARSE_INTERNAL_H
#define PITH_SERVER_TOOL_PARSE_INTERNAL_H

#include <stdint.h>

#include "server/tool_parse.h"

enum tp_mode {
    M_TEXT, M_THINK, M_CALL_OBJ, M_CALL_VAL, M_AFTER_CALL, M_MISTRAL_START, M_MISTRAL_ARR, M_MISTRAL_NAME,
    M_H_HEADER, M_H_BODY, M_H_BETWEEN, M_DISCARD,
    M_TC_SNIFF, M_XML,                     /* tool_parse_xml.c */
    M_SEC, M_SEC_HEADER, M_SEC_ARGS,       /* tool_parse_section.c */
};
/* How the current call is framed: what follows its end. */
enum tp_wrap { W_HERMES, W_LLAMA, W_MISTRAL_ARR, W_MISTRAL_V11, W_SECTION, W_GEMMA };

bool tp_is_ws(char c);
void tp_emit(tp_parser *p, tp_event ev, const char *s, size_t n);
/* Where the earliest of the markers starts in b (SIZE_MAX: none); *which gets its index. */
size_t tp_find_marker(const buf *b, const char *const *m, int n, int *which);
/* The longest suffix of b that is a proper prefix of one of the markers. */
size_t tp_partial_len(const buf *b, const char *const *m, int n);
size_t tp_trailing_ws(const char *s, size_t n);
/* 1: the held bytes start with marker m; 0: they do not; -1: they are a proper prefix of it (undecided). */
int tp_starts(const tp_parser *p, const char *m);
void tp_consume(tp_parser *p, size_t n);
/* Moves n held bytes into the current call's raw text (for the fall-back). */
void tp_take(tp_parser *p, size_t n);

void tp_call_reset(tp_parser *p, int wrap, const char *opening);
void tp_begin_call(tp_parser *p);
void tp_end_call(tp_parser *p);
/* The call is unfinished at the end of the output: ended as far as it got (a cut-off call) or, if its
 * name is not complete, its text is content (or dropped when the output was cut off: tool_parse.h). */
void tp_close_unfinished(tp_parser *p);
/* The call's text turned out not to be a call: it is content (reasoning inside a think block). */
void tp_fall_back(tp_parser *p);
void tp_after_call_mode(tp_parser *p);
/* Back to the text (or reasoning) the call interrupted. */
void tp_resume_text(tp_parser *p);
/* A name as tools name functions: letters, digits, '_', '-', '.', ':' or '/'. */
bool tp_name_char(char c);

/* Appends s as the inside of a JSON string (escaped) to b. */
void tp_json_escape(buf *b, const char *s, size_t n);

/* Appends s as the inside of a JSON string (escaped) to b. */
void tp_json_escape(buf *b, const char *s, size_t n);

/* tool_parse_xml.c */
bool tp_sniff_mode(tp_parser *p, bool final);
bool tp_xml_mode(tp_parser *p, bool final);
/* tool_parse_section.c: the markers that open a call in text, and the section modes. */
int tp_section_openers(const tp_parser *p, const char **m);
void tp_section_start(tp_parser *p, int which);
bool tp_sec_mode(tp_parser *p, bool final);
bool tp_sec_header_mode(tp_parser *p, bool final);
bool tp_sec_args_mode(tp_parser *p, bool final);

#endif
