/* Filters shared between jinja_filters.c (the table, string and number filters) and
 * jinja_filters_seq.c (sequence filters). Internal to src/chat. */
#ifndef PITH_CHAT_JINJA_FILTERS_H
#define PITH_CHAT_JINJA_FILTERS_H

#include "chat/jinja.h"

/* Argument `pos` or keyword `name`, else def. */
jv jf_arg(jctx *c, const jargs *a, int pos, const char *name, jv def);
int jf_want_str(jctx *c, jv v, const char *what, jstr *out);
int jf_want_int(jctx *c, jv v, const char *what, int64_t *out);

#define JF(name) int jf_##name(jctx *c, jv self, const jargs *a, jv *out)
JF(join); JF(list); JF(items); JF(dictsort); JF(sort); JF(reverse); JF(unique); JF(min); JF(max); JF(sum);
JF(map); JF(select); JF(reject); JF(selectattr); JF(rejectattr);
#undef JF

#endif
