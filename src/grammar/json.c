/* Schema-free JSON as GBNF (response_format json_object), and the JSON primitives the JSON Schema
 * front end shares. Whitespace between tokens is bounded (one space, or a newline and up to 16 spaces
 * or tabs) so that a model cannot fill its whole budget with it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gr_internal.h"

/* Every use of PREFIX-ws becomes its own copy of the whitespace group: then each copy is used from one
 * place only, the automaton knows statically what follows it, and its precomputed masks need not treat
 * every token that begins with a space as depending on the stack (shared, the rule would). Returns a new
 * text, or NULL when out of memory. */
char *gr_json_inline_ws(const char *text, const char *prefix) {
    char word[200];
    snprintf(word, sizeof word, "%s-ws", prefix);
    size_t wl = strlen(word);
    static const char WS[] = "( \" \" | \"\\n\" [ \\t]{0,16} )?";
    gr_buf b = {0};
    const char *q = text;
    for (const char *hit; (hit = strstr(q, word));) {
        char after = hit[wl];
        bool word_end = !(after == '-' || after == '_' || (after >= 'a' && after <= 'z') || (after >= 'A' && after <= 'Z') ||
                          (after >= '0' && after <= '9'));
        bool word_start = hit == text || hit[-1] == ' ' || hit[-1] == '(' || hit[-1] == '\n';
        bool definition = word_start && strncmp(hit + wl, " ::=", 4) == 0;
        gr_buf_put(&b, q, (size_t)(hit - q));
        if (word_end && word_start && !definition) gr_buf_puts(&b, WS);
        else gr_buf_put(&b, hit, wl);
        q = hit + wl;
    }
    gr_buf_puts(&b, q);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

void gr_json_primitives(gr_buf *b, const char *p) {
    gr_buf_printf(b, "%s-ws ::= ( \" \" | \"\\n\" [ \\t]{0,16} )?\n", p);
    gr_buf_printf(b, "%s-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )\n", p);
    gr_buf_printf(b, "%s-string ::= \"\\\"\" %s-char* \"\\\"\"\n", p, p);
    gr_buf_printf(b, "%s-number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? "
                     "( [eE] [-+]? [0-9]{1,2} )?\n", p);
    gr_buf_printf(b, "%s-integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n", p);
    gr_buf_printf(b, "%s-boolean ::= \"true\" | \"false\"\n", p);
    gr_buf_printf(b, "%s-null ::= \"null\"\n", p);
    gr_buf_printf(b, "%s-value ::= %s-object | %s-array | %s-string | %s-number | %s-boolean | %s-null\n", p, p, p,
                  p, p, p, p);
    gr_buf_printf(b, "%s-object ::= \"{\" %s-ws ( %s-string %s-ws \":\" %s-ws %s-value %s-ws "
                     "( \",\" %s-ws %s-string %s-ws \":\" %s-ws %s-value %s-ws )* )? \"}\"\n",
                  p, p, p, p, p, p, p, p, p, p, p, p, p);
    gr_buf_printf(b, "%s-array ::= \"[\" %s-ws ( %s-value %s-ws ( \",\" %s-ws %s-value %s-ws )* )? \"]\"\n", p, p,
                  p, p, p, p, p);
}

int pith_grammar_json_to_gbnf(bool object_only, const char *root_name, char **gbnf, pith_err *err) {
    *gbnf = NULL;
    if (!root_name || !*root_name) root_name = "root";
    gr_buf b = {0};
    gr_buf_printf(&b, "%s ::= %s-%s\n", root_name, root_name, object_only ? "object" : "value");
    gr_json_primitives(&b, root_name);
    char *t = b.oom ? NULL : gr_json_inline_ws(b.p, root_name);
    free(b.p);
    if (!t) return pith_errf(err, "out of memory");
    *gbnf = t;
    return 0;
}
