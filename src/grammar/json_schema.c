#include "grammar/gr_internal.h"
int pith_grammar_json_schema_to_gbnf(const char *schema, size_t len, const char *root_name, char **gbnf,
                                     pith_err *err) {
    (void)schema; (void)len; (void)root_name; *gbnf = NULL;
    return pith_errf(err, "todo");
}
