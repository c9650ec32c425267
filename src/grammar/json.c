/* Schema-free JSON as GBNF (response_format json_object), and the JSON primitives the JSON Schema
 * front end shares. Whitespace between tokens is bounded (one space, or a newline and up to 20 spaces
 * or tabs) so that a model cannot fill its whole budget with it. */
#include <stdlib.h>
#include <string.h>

#include "grammar/gr_internal.h"

void gr_json_primitives(gr_buf *b, const char *p) {
    gr_buf_printf(b, "%s-ws ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n", p);
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
    if (b.oom) { free(b.p); return pith_errf(err, "out of memory"); }
    *gbnf = b.p;
    return 0;
}
