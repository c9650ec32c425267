#include "grammar/gr_internal.h"
int pith_grammar_regex_to_gbnf(const char *regex, size_t len, const char *root_name, char **gbnf,
                               pith_err *err) {
    (void)regex; (void)len; (void)root_name; *gbnf = NULL;
    return pith_errf(err, "todo");
}
