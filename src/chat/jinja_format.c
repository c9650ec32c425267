/* String formatting for chat templates: Python's printf-style `fmt % args` (also behind jinja2's
 * `format` filter) and str.format() with plain fields.
 *
 * printf-style supports %s %r %d %i %u %f %F %e %E %g %G %x %X %o %c and %%, with flags (-+ 0#), width,
 * precision and %(key)s mapping keys; numbers go through C's printf, whose output matches Python's for
 * these conversions. str.format supports {} {0} {name}, !s/!r and {{ }} escapes but no format specs or
 * attribute/index lookups in fields, which fail as unsupported. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "chat/jinja.h"

static int pad_str(jctx *c, jbuf *b, jstr s, int64_t width, int64_t prec, bool left) {
    if (prec >= 0) s.n = ju_offset(s, (size_t)prec);
    int64_t len = (int64_t)ju_count(s);
    if (width > (int64_t)c->lim.max_output_bytes) return jerr(c, "output limit of %zu bytes exceeded", c->lim.max_output_bytes);
    if (!left)
        for (int64_t i = len; i < width; i++)
            if (jbuf_putc(c, b, ' ') < 0) return -1;
    if (jbuf_put(c, b, s.p, s.n) < 0) return -1;
    if (left)
        for (int64_t i = len; i < width; i++)
            if (jbuf_putc(c, b, ' ') < 0) return -1;
    return 0;
}

static int format_number(jctx *c, jbuf *b, char conv, const char *flags, int64_t width, int64_t prec, jv v) {
    if (!jv_is_number(v)) return jerr(c, "%%%c format: a real number is required, not %s", conv, jv_type_name(v));
    if (width > 4096 || prec > 4096) return jerr(c, "format width or precision too large");
    bool left = strchr(flags, '-') != NULL, zero = strchr(flags, '0') != NULL;
    char out[8400];
    if (!strchr("diuxXoc", conv)) {
        char spec[32];
        snprintf(spec, sizeof spec, "%%%s%d.%d%c", flags, (int)width, (int)(prec >= 0 ? prec : 6), conv);
        snprintf(out, sizeof out, spec, jv_as_double(v));
        return jbuf_puts(c, b, out);
    }
    int64_t x;
    if (v.kind == JV_FLOAT) {
        if (conv != 'd' && conv != 'i' && conv != 'u') return jerr(c, "%%%c format: an integer is required, not float", conv);
        if (!(v.u.f > -9.2e18 && v.u.f < 9.2e18)) return jerr(c, "integer overflow");
        x = (int64_t)v.u.f;
    } else {
        x = v.kind == JV_BOOL ? v.u.b : v.u.i;
    }
    if (conv == 'c') {
        if (x < 0 || x > 0x10FFFF) return jerr(c, "%%c arg not in range(0x110000)");
        char enc[4];
        int w = ju_encode((uint32_t)x, enc);
        return pad_str(c, b, (jstr){enc, (size_t)w}, width, -1, left);
    }
    bool neg = x < 0;
    uint64_t mag = neg ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
    char digits[4200];
    if (conv == 'x') snprintf(digits, 64, "%" PRIx64, mag);
    else if (conv == 'X') snprintf(digits, 64, "%" PRIX64, mag);
    else if (conv == 'o') snprintf(digits, 64, "%" PRIo64, mag);
    else snprintf(digits, 64, "%" PRIu64, mag);
    size_t nd = strlen(digits);
    if (prec > (int64_t)nd) { /* precision pads the digits with zeros */
        memmove(digits + (prec - (int64_t)nd), digits, nd + 1);
        memset(digits, '0', (size_t)prec - nd);
        nd = (size_t)prec;
    }
    const char *sign = neg ? "-" : strchr(flags, '+') ? "+" : strchr(flags, ' ') ? " " : "";
    const char *prefix = !strchr(flags, '#') ? "" : conv == 'x' ? "0x" : conv == 'X' ? "0X" : conv == 'o' ? "0o" : "";
    int64_t len = (int64_t)(strlen(sign) + strlen(prefix) + nd);
    int64_t pad = width > len ? width - len : 0;
    jbuf *o = b;
    for (int64_t i = 0; !left && !zero && i < pad; i++)
        if (jbuf_putc(c, o, ' ') < 0) return -1;
    if (jbuf_puts(c, o, sign) < 0 || jbuf_puts(c, o, prefix) < 0) return -1;
    for (int64_t i = 0; !left && zero && i < pad; i++)
        if (jbuf_putc(c, o, '0') < 0) return -1;
    if (jbuf_put(c, o, digits, nd) < 0) return -1;
    for (int64_t i = 0; left && i < pad; i++)
        if (jbuf_putc(c, o, ' ') < 0) return -1;
    return 0;
}

int jinja_printf(jctx *c, jstr fmt, jv args, jv *out) {
    const jv *list = &args;
    size_t n_args = 1, next = 0;
    const jdict *mapping = NULL;
    /* Python treats any non-tuple argument with __getitem__ (dict, list, undefined) as a possible
     * mapping: it may go unused without the "not all arguments converted" error. */
    bool mapping_like = args.kind == JV_DICT || args.kind == JV_UNDEF || (args.kind == JV_LIST && !args.u.list->tuple);
    if (args.kind == JV_LIST && args.u.list->tuple) {
        list = args.u.list->items;
        n_args = args.u.list->n;
    } else if (args.kind == JV_DICT) {
        mapping = args.u.dict;
    }
    jbuf b = {0};
    for (size_t i = 0; i < fmt.n;) {
        const char *pct = memchr(fmt.p + i, '%', fmt.n - i);
        size_t lit = pct ? (size_t)(pct - fmt.p) - i : fmt.n - i;
        if (jbuf_put(c, &b, fmt.p + i, lit) < 0) return -1;
        i += lit;
        if (!pct) break;
        i++;
        if (i >= fmt.n) return jerr(c, "incomplete format");
        jv arg;
        bool have = false;
        if (fmt.p[i] == '(') {
            size_t close = i + 1;
            while (close < fmt.n && fmt.p[close] != ')') close++;
            if (close >= fmt.n) return jerr(c, "incomplete format key");
            if (!mapping) return jerr(c, "format requires a mapping");
            const jv *v = jdict_get_str(mapping, (jstr){fmt.p + i + 1, close - i - 1});
            if (!v) return jerr(c, "format key '%.*s' not found", (int)(close - i - 1), fmt.p + i + 1);
            arg = *v;
            have = true;
            i = close + 1;
        }
        char flags[8];
        int nf = 0;
        while (i < fmt.n && strchr("-+ 0#", fmt.p[i]) && fmt.p[i]) {
            if (nf < 6 && !memchr(flags, fmt.p[i], (size_t)nf)) flags[nf++] = fmt.p[i];
            i++;
        }
        flags[nf] = 0;
        int64_t width = 0, prec = -1;
        if (i < fmt.n && fmt.p[i] == '*') return jerr(c, "unsupported '*' width in format");
        while (i < fmt.n && fmt.p[i] >= '0' && fmt.p[i] <= '9' && width < 100000) width = width * 10 + (fmt.p[i++] - '0');
        if (i < fmt.n && fmt.p[i] == '.') {
            prec = 0;
            i++;
            while (i < fmt.n && fmt.p[i] >= '0' && fmt.p[i] <= '9' && prec < 100000) prec = prec * 10 + (fmt.p[i++] - '0');
        }
        while (i < fmt.n && strchr("hlL", fmt.p[i]) && fmt.p[i]) i++;
        if (i >= fmt.n) return jerr(c, "incomplete format");
        char conv = fmt.p[i++];
        if (conv == '%') {
            if (jbuf_putc(c, &b, '%') < 0) return -1;
            continue;
        }
        if (!have) {
            if (next >= n_args) return jerr(c, "not enough arguments for format string");
            arg = list[next++];
        }
        bool left = strchr(flags, '-') != NULL;
        if (conv == 's' || conv == 'r' || conv == 'a') {
            jstr s;
            if (conv == 's') {
                if (jv_to_str(c, arg, &s) < 0) return -1;
            } else {
                jbuf r = {0};
                if (jv_repr(c, &r, arg) < 0) return -1;
                s = jbuf_str(&r);
            }
            if (pad_str(c, &b, s, width, prec, left) < 0) return -1;
        } else if (strchr("diuxXofFeEgGc", conv)) {
            if (format_number(c, &b, conv, flags, width, prec, arg) < 0) return -1;
        } else {
            return jerr(c, "unsupported format character '%c'", conv);
        }
    }
    if (!mapping_like && next < n_args) return jerr(c, "not all arguments converted during string formatting");
    *out = jv_str(jbuf_str(&b));
    return 0;
}

int jinja_str_format(jctx *c, jstr fmt, const jargs *a, jv *out) {
    jbuf b = {0};
    int auto_index = 0;
    bool used_auto = false, used_manual = false;
    for (size_t i = 0; i < fmt.n;) {
        char ch = fmt.p[i];
        if (ch == '}') {
            if (i + 1 < fmt.n && fmt.p[i + 1] == '}') {
                if (jbuf_putc(c, &b, '}') < 0) return -1;
                i += 2;
                continue;
            }
            return jerr(c, "Single '}' encountered in format string");
        }
        if (ch != '{') {
            if (jbuf_putc(c, &b, ch) < 0) return -1;
            i++;
            continue;
        }
        if (i + 1 < fmt.n && fmt.p[i + 1] == '{') {
            if (jbuf_putc(c, &b, '{') < 0) return -1;
            i += 2;
            continue;
        }
        size_t close = i + 1;
        while (close < fmt.n && fmt.p[close] != '}') close++;
        if (close >= fmt.n) return jerr(c, "Single '{' encountered in format string");
        jstr field = {fmt.p + i + 1, close - i - 1};
        i = close + 1;
        char conv = 's';
        const char *bang = memchr(field.p, '!', field.n);
        const char *colon = memchr(field.p, ':', field.n);
        if (colon && (!bang || colon < bang)) {
            if ((size_t)(field.p + field.n - colon) > 1) return jerr(c, "unsupported format spec in str.format");
            field.n = (size_t)(colon - field.p);
        }
        if (bang) {
            if (bang + 2 != field.p + field.n || (bang[1] != 's' && bang[1] != 'r'))
                return jerr(c, "unsupported conversion in str.format");
            conv = bang[1];
            field.n = (size_t)(bang - field.p);
        }
        jv arg;
        if (field.n == 0) {
            if (used_manual) return jerr(c, "cannot switch from manual field specification to automatic field numbering");
            used_auto = true;
            if (auto_index >= a->n_pos) return jerr(c, "Replacement index %d out of range for positional args tuple", auto_index);
            arg = a->pos[auto_index++];
        } else if (field.p[0] >= '0' && field.p[0] <= '9') {
            if (used_auto) return jerr(c, "cannot switch from automatic field numbering to manual field specification");
            used_manual = true;
            int k = 0;
            for (size_t j = 0; j < field.n; j++) {
                if (field.p[j] < '0' || field.p[j] > '9' || k > 1000) return jerr(c, "unsupported field in str.format");
                k = k * 10 + (field.p[j] - '0');
            }
            if (k >= a->n_pos) return jerr(c, "Replacement index %d out of range for positional args tuple", k);
            arg = a->pos[k];
        } else {
            int k;
            for (k = 0; k < a->n_kw && !jstr_eq(a->kw_names[k], field); k++) {}
            for (size_t j = 0; j < field.n; j++)
                if (field.p[j] == '.' || field.p[j] == '[') return jerr(c, "unsupported field in str.format");
            if (k == a->n_kw) return jerr(c, "str.format: no argument '%.*s'", (int)field.n, field.p);
            arg = a->kw_vals[k];
        }
        if (conv == 'r') {
            if (jv_repr(c, &b, arg) < 0) return -1;
        } else {
            jstr s;
            if (jv_to_str(c, arg, &s) < 0 || jbuf_put(c, &b, s.p, s.n) < 0) return -1;
        }
    }
    *out = jv_str(jbuf_str(&b));
    return 0;
}
