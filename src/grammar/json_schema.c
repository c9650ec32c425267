/* JSON Schema -> GBNF.
 *
 * Supported (docs/api.md#structured-output): type (one or a list), enum, const, anyOf, oneOf (as
 * anyOf, exact when its branches provably exclude each other, schema_disjoint.c; in strict mode other
 * oneOfs are errors), allOf of one schema, $ref to "#", "#/$defs/..." or
 * "#/definitions/..." (recursion allowed), nullable (OpenAPI), boolean schemas (true), objects
 * (properties in their order, required, additionalProperties false / true / a schema; keys of
 * additional properties never repeat a declared name), arrays (items, minItems, maxItems), strings
 * (minLength, maxLength, pattern, format date / time / date-time / uuid / email / ipv4 / hostname),
 * integers with minimum / maximum / exclusive bounds, numbers with non-negative integral bounds.
 * Annotations (title, description, default, examples, $schema, $id, $comment, deprecated, readOnly,
 * writeOnly, x-*) are ignored. Any other keyword is an error naming it and its path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "grammar/gr_internal.h"

#define NAME_CAP 160
#define MAX_DEPTH 64
#define MAX_INT_DIGITS 16

typedef struct ref_memo {
    char *ref;
    char name[NAME_CAP];
} ref_memo;

typedef struct conv {
    const cJSON *root;
    const char *P;
    gr_buf out;
    int counter;
    pith_err *err;
    int failed;
    ref_memo *refs;
    int n_refs, cap_refs;
    int depth;
    int regex_counter;
    bool strict; /* a oneOf whose branches may overlap is an error */
} conv;

static int cfail(conv *c, const char *path, const char *fmt, const char *arg) {
    if (!c->failed) {
        char what[700];
        snprintf(what, sizeof what, fmt, arg);
        pith_errf(c->err, "JSON Schema: %s at %s", what, *path ? path : "the root");
    }
    c->failed = 1;
    return -1;
}

static void new_name(conv *c, char *name) { snprintf(name, NAME_CAP, "%s-s%d", c->P, ++c->counter); }

static const char *ANNOTATIONS[] = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                    "deprecated", "readOnly", "writeOnly", "$defs", "definitions",
                                    "discriminator", "example", "strict", "$anchor", "contentEncoding",
                                    "contentMediaType", NULL};
static const char *SUPPORTED[] = {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "nullable",
                                  "properties", "required", "additionalProperties", "items", "minItems",
                                  "maxItems", "minLength", "maxLength", "pattern", "format", "minimum",
                                  "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};

static bool in_list(const char *k, const char *const *list) {
    for (int i = 0; list[i]; i++)
        if (strcmp(k, list[i]) == 0) return true;
    return false;
}

static void sub_path(char *out, const char *path, const char *a, const char *b) {
    snprintf(out, 512, "%s/%s%s%s", path, a, b ? "/" : "", b ? b : "");
}

static int gen(conv *c, const cJSON *s, const char *path, char *name);

/* A JSON value's text as a GBNF literal. */
static void put_json_literal(conv *c, const cJSON *v) {
    char *t = cJSON_PrintUnformatted(v);
    if (!t) { c->out.oom = true; return; }
    gr_buf_literal(&c->out, t, strlen(t));
    free(t);
}

static bool get_count(conv *c, const cJSON *s, const char *key, const char *path, long *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!v) return false;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble) || v->valuedouble > 10000) {
        cfail(c, path, "'%s' must be an integer from 0 to 10000", key);
        return false;
    }
    *out = (long)v->valuedouble;
    return true;
}

/* ---- integers in a range ---- */

static void pow10s(int64_t *p) {
    p[0] = 1;
    for (int i = 1; i <= MAX_INT_DIGITS + 1; i++) p[i] = p[i - 1] * 10;
}

static int ndigits(int64_t v) {
    int n = 1;
    while (v >= 10) { v /= 10; n++; }
    return n;
}

/* Alternatives (joined by " | ") for the digit strings from A to B, both n digits. */
static void same_len(gr_buf *b, const char *A, const char *B, int n) {
    if (n == 1) {
        if (A[0] == B[0]) gr_buf_printf(b, "\"%c\"", A[0]);
        else gr_buf_printf(b, "[%c-%c]", A[0], B[0]);
        return;
    }
    if (A[0] == B[0]) {
        gr_buf_printf(b, "\"%c\" (", A[0]);
        same_len(b, A + 1, B + 1, n - 1);
        gr_buf_puts(b, ")");
        return;
    }
    bool lo_full = true, hi_full = true;
    for (int i = 1; i < n; i++) {
        if (A[i] != '0') lo_full = false;
        if (B[i] != '9') hi_full = false;
    }
    char lo_mid = lo_full ? A[0] : (char)(A[0] + 1), hi_mid = hi_full ? B[0] : (char)(B[0] - 1);
    bool first = true;
    if (!lo_full) {
        char nines[MAX_INT_DIGITS + 2];
        memset(nines, '9', (size_t)n - 1);
        gr_buf_printf(b, "\"%c\" (", A[0]);
        same_len(b, A + 1, nines, n - 1);
        gr_buf_puts(b, ")");
        first = false;
    }
    if (lo_mid <= hi_mid) {
        if (!first) gr_buf_puts(b, " | ");
        if (lo_mid == hi_mid) gr_buf_printf(b, "\"%c\"", lo_mid);
        else gr_buf_printf(b, "[%c-%c]", lo_mid, hi_mid);
        gr_buf_printf(b, " [0-9]{%d}", n - 1);
        first = false;
    }
    if (!hi_full) {
        char zeros[MAX_INT_DIGITS + 2];
        memset(zeros, '0', (size_t)n - 1);
        if (!first) gr_buf_puts(b, " | ");
        gr_buf_printf(b, "\"%c\" (", B[0]);
        same_len(b, zeros, B + 1, n - 1);
        gr_buf_puts(b, ")");
    }
}

/* Non-negative integers in [a, b] (b < 0: unbounded), as alternatives. */
static void nonneg_range(gr_buf *out, int64_t a, int64_t b) {
    int64_t p[MAX_INT_DIGITS + 2];
    pow10s(p);
    bool first = true;
    int da = ndigits(a), db = b < 0 ? MAX_INT_DIGITS : ndigits(b);
    for (int n = da; n <= db; n++) {
        int64_t lo = n == da ? a : p[n - 1], hi = (b >= 0 && n == db) ? b : p[n] - 1;
        if (n == 1 && lo == 0 && hi == 0) {
            if (!first) gr_buf_puts(out, " | ");
            gr_buf_puts(out, "\"0\"");
            first = false;
            continue;
        }
        if (b < 0 && n > da) break; /* longer ones: one alternative below */
        char A[MAX_INT_DIGITS + 2], B[MAX_INT_DIGITS + 2];
        snprintf(A, sizeof A, "%0*lld", n, (long long)lo);
        snprintf(B, sizeof B, "%0*lld", n, (long long)hi);
        if (!first) gr_buf_puts(out, " | ");
        gr_buf_puts(out, "(");
        same_len(out, A, B, n);
        gr_buf_puts(out, ")");
        first = false;
    }
    if (b < 0 && da < MAX_INT_DIGITS) gr_buf_printf(out, " | [1-9] [0-9]{%d,%d}", da, MAX_INT_DIGITS - 1);
}

/* Integers in [lo, hi]; has_lo / has_hi false: unbounded on that side. */
static void int_range(gr_buf *out, bool has_lo, int64_t lo, bool has_hi, int64_t hi) {
    bool first = true;
    /* negative part */
    if (!has_lo || lo < 0) {
        if (!has_hi || hi >= 0) { /* -1 .. lo (or unbounded) */
            gr_buf_puts(out, "\"-\" (");
            nonneg_range(out, 1, has_lo ? -lo : -1);
        } else {
            gr_buf_puts(out, "\"-\" (");
            nonneg_range(out, -hi, has_lo ? -lo : -1);
        }
        gr_buf_puts(out, ")");
        first = false;
    }
    if (!has_hi || hi >= 0) {
        if (!first) gr_buf_puts(out, " | ");
        gr_buf_puts(out, "(");
        nonneg_range(out, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1);
        gr_buf_puts(out, ")");
    }
}

static int get_bound(conv *c, const cJSON *s, const char *key, const char *path, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!x) return 0;
    if (cJSON_IsBool(x)) return cfail(c, path, "'%s' as a boolean (draft 4) is not supported", key);
    if (!cJSON_IsNumber(x)) return cfail(c, path, "'%s' must be a number", key);
    *v = x->valuedouble;
    return 1;
}

static int gen_number(conv *c, const cJSON *s, const char *path, bool integer, char *name) {
    double mn, mx, xmn, xmx;
    int has_mn = get_bound(c, s, "minimum", path, &mn), has_mx = get_bound(c, s, "maximum", path, &mx);
    int has_xmn = get_bound(c, s, "exclusiveMinimum", path, &xmn), has_xmx = get_bound(c, s, "exclusiveMaximum", path, &xmx);
    if (has_mn < 0 || has_mx < 0 || has_xmn < 0 || has_xmx < 0) return -1;
    if (!has_mn && !has_mx && !has_xmn && !has_xmx) {
        snprintf(name, NAME_CAP, "%s-%s", c->P, integer ? "integer" : "number");
        return 0;
    }
    const double LIM = 1e15;
    bool has_lo = false, has_hi = false;
    double lo = 0, hi = 0;
    if (integer) {
        if (has_mn) { lo = ceil(mn); has_lo = true; }
        if (has_xmn) { double l = floor(xmn) + 1; if (!has_lo || l > lo) lo = l; has_lo = true; }
        if (has_mx) { hi = floor(mx); has_hi = true; }
        if (has_xmx) { double h = ceil(xmx) - 1; if (!has_hi || h < hi) hi = h; has_hi = true; }
    } else {
        if (has_xmn || has_xmx)
            return cfail(c, path, "%s on a number is not supported (use integer, or minimum / maximum)",
                         has_xmn ? "exclusiveMinimum" : "exclusiveMaximum");
        if ((has_mn && (mn != floor(mn) || mn < 0)) || (has_mx && mx != floor(mx)) || !has_mn)
            return cfail(c, path, "%s", "number bounds other than a non-negative integral minimum (and an integral "
                                        "maximum) are not supported");
        lo = mn;
        has_lo = true;
        if (has_mx) { hi = mx; has_hi = true; }
    }
    if ((has_lo && fabs(lo) > LIM) || (has_hi && fabs(hi) > LIM))
        return cfail(c, path, "%s", "bounds beyond 1e15 are not supported");
    if (has_lo && has_hi && lo > hi) return cfail(c, path, "%s", "the bounds leave no number");
    new_name(c, name);
    gr_buf_printf(&c->out, "%s ::= ", name);
    if (integer) {
        int_range(&c->out, has_lo, (int64_t)lo, has_hi, (int64_t)hi);
    } else {
        /* lo <= x <= hi, lo >= 0 integral: integer part in [lo, hi - 1] with any fraction, or hi itself */
        if (!has_hi || hi > lo) {
            gr_buf_puts(&c->out, "(");
            int_range(&c->out, true, (int64_t)lo, has_hi, has_hi ? (int64_t)hi - 1 : 0);
            gr_buf_puts(&c->out, ") ( \".\" [0-9]{1,16} )?");
        }
        if (has_hi) {
            if (!has_hi || hi > lo) gr_buf_puts(&c->out, " | ");
            gr_buf_printf(&c->out, "\"%lld\" ( \".\" \"0\"{1,16} )?", (long long)hi);
        }
    }
    gr_buf_puts(&c->out, "\n");
    return 0;
}

/* ---- strings ---- */

/* Whether the rule P-fmt-WHAT was already written (every rule is written once, after a newline). */
static bool fmt_written(conv *c, const char *what) {
    char probe[NAME_CAP + 16];
    snprintf(probe, sizeof probe, "\n%s-fmt-%s ::=", c->P, what);
    return c->out.p && strstr(c->out.p, probe);
}

static int gen_format(conv *c, const char *fmt, const char *path, char *name) {
    const char *P = c->P;
    snprintf(name, NAME_CAP, "%s-fmt-%s", P, fmt);
    /* emitted once per name, and the helpers (d, t, label, oct) once whichever formats share them */
    if (fmt_written(c, fmt)) return 0;
    gr_buf *b = &c->out;
    gr_buf_puts(b, "\n");
    if ((strcmp(fmt, "date") == 0 || strcmp(fmt, "date-time") == 0) && !fmt_written(c, "d")) {
        gr_buf_printf(b, "%s-fmt-d ::= [0-9]{4} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) "
                         "| ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) "
                         "| \"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) )\n", P);
    }
    if ((strcmp(fmt, "time") == 0 || strcmp(fmt, "date-time") == 0) && !fmt_written(c, "t")) {
        gr_buf_printf(b, "%s-fmt-t ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? "
                         "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n", P);
    }
    if (strcmp(fmt, "date") == 0) gr_buf_printf(b, "%s ::= \"\\\"\" %s-fmt-d \"\\\"\"\n", name, P);
    else if (strcmp(fmt, "time") == 0) gr_buf_printf(b, "%s ::= \"\\\"\" %s-fmt-t \"\\\"\"\n", name, P);
    else if (strcmp(fmt, "date-time") == 0) gr_buf_printf(b, "%s ::= \"\\\"\" %s-fmt-d \"T\" %s-fmt-t \"\\\"\"\n", name, P, P);
    else if (strcmp(fmt, "uuid") == 0)
        gr_buf_printf(b, "%s ::= \"\\\"\" [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12} \"\\\"\"\n", name);
    else if (strcmp(fmt, "email") == 0 || strcmp(fmt, "hostname") == 0) {
        if (!fmt_written(c, "label"))
            gr_buf_printf(b, "%s-fmt-label ::= [a-zA-Z0-9]{1,20} ( \"-\" [a-zA-Z0-9]{1,20} )?\n", P);
        if (fmt[0] == 'e')
            gr_buf_printf(b, "%s ::= \"\\\"\" [a-zA-Z0-9_%%+-]{1,30} ( \".\" [a-zA-Z0-9_%%+-]{1,30} ){0,3} \"@\" %s-fmt-label ( \".\" %s-fmt-label ){1,3} \"\\\"\"\n", name, P, P);
        else
            gr_buf_printf(b, "%s ::= \"\\\"\" %s-fmt-label ( \".\" %s-fmt-label ){0,4} \"\\\"\"\n", name, P, P);
    } else if (strcmp(fmt, "ipv4") == 0) {
        gr_buf_printf(b, "%s-fmt-oct ::= \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9]? [0-9]\n", P);
        gr_buf_printf(b, "%s ::= \"\\\"\" %s-fmt-oct \".\" %s-fmt-oct \".\" %s-fmt-oct \".\" %s-fmt-oct \"\\\"\"\n", name, P, P, P, P);
    } else {
        return cfail(c, path, "format '%s' is not supported (date, time, date-time, uuid, email, ipv4, hostname are)", fmt);
    }
    return 0;
}

static int gen_string(conv *c, const cJSON *s, const char *path, char *name) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    long mn = 0, mx = -1;
    bool has_mn = get_count(c, s, "minLength", path, &mn), has_mx = get_count(c, s, "maxLength", path, &mx);
    if (c->failed) return -1;
    if ((pat || fmt) && (has_mn || has_mx))
        return cfail(c, path, "%s", "minLength / maxLength together with pattern or format are not supported");
    if (pat && fmt) return cfail(c, path, "%s", "pattern together with format is not supported");
    if (fmt) {
        if (!cJSON_IsString(fmt)) return cfail(c, path, "%s", "'format' must be a string");
        return gen_format(c, fmt->valuestring, path, name);
    }
    if (pat) {
        if (!cJSON_IsString(pat)) return cfail(c, path, "%s", "'pattern' must be a string");
        char rx[NAME_CAP];
        new_name(c, rx);
        gr_buf rb = {0};
        pith_err rerr = {{0}};
        if (gr_regex_to_gbnf(pat->valuestring, strlen(pat->valuestring), rx, true, &rb, &c->regex_counter, &rerr)) {
            free(rb.p);
            return cfail(c, path, "pattern: %s", rerr.msg);
        }
        gr_buf_put(&c->out, rb.p, rb.n);
        free(rb.p);
        new_name(c, name);
        gr_buf_printf(&c->out, "%s ::= \"\\\"\" %s \"\\\"\"\n", name, rx);
        return 0;
    }
    if (!has_mn && !has_mx) {
        snprintf(name, NAME_CAP, "%s-string", c->P);
        return 0;
    }
    if (has_mx && mx < mn) return cfail(c, path, "%s", "maxLength is below minLength");
    new_name(c, name);
    if (has_mx) gr_buf_printf(&c->out, "%s ::= \"\\\"\" %s-char{%ld,%ld} \"\\\"\"\n", name, c->P, mn, mx);
    else gr_buf_printf(&c->out, "%s ::= \"\\\"\" %s-char{%ld,} \"\\\"\"\n", name, c->P, mn);
    return 0;
}

/* ---- arrays ---- */

static int gen_array(conv *c, const cJSON *s, const char *path, char *name) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    long mn = 0, mx = -1;
    get_count(c, s, "minItems", path, &mn);
    get_count(c, s, "maxItems", path, &mx);
    if (c->failed) return -1;
    if (mx >= 0 && mx < mn) return cfail(c, path, "%s", "maxItems is below minItems");
    char item[NAME_CAP];
    if (items) {
        if (cJSON_IsArray(items)) return cfail(c, path, "%s", "'items' as an array (tuples) is not supported");
        char p[512];
        sub_path(p, path, "items", NULL);
        if (gen(c, items, p, item)) return -1;
    } else {
        snprintf(item, NAME_CAP, "%s-value", c->P);
    }
    const char *P = c->P;
    new_name(c, name);
    gr_buf *b = &c->out;
    if (mx == 0) {
        gr_buf_printf(b, "%s ::= \"[\" %s-ws \"]\"\n", name, P);
        return 0;
    }
    gr_buf_printf(b, "%s ::= \"[\" %s-ws %s%s %s-ws ( \",\" %s-ws %s %s-ws )", name, P, mn == 0 ? "( " : "", item, P,
                  P, item, P);
    long lo = mn > 0 ? mn - 1 : 0;
    if (mx < 0) gr_buf_printf(b, "{%ld,}", lo);
    else gr_buf_printf(b, "{%ld,%ld}", lo, mx - 1);
    gr_buf_printf(b, "%s \"]\"\n", mn == 0 ? " )?" : "");
    return 0;
}

/* ---- objects ---- */

typedef struct prop {
    const char *key;
    char rule[NAME_CAP];
    bool required;
} prop;

/* Additional keys: any string without escapes that is none of the declared keys. Built as a trie of
 * the declared keys' bytes: at each node, end the key (unless a declared key ends there), go on with a
 * child's byte, or leave the trie with any other character and continue freely. */
static void key_trie(conv *c, const prop *props, int n, const char *name, const char *prefix, size_t plen) {
    const char *P = c->P;
    gr_buf *b = &c->out;
    bool terminal = false;
    unsigned char kids[256];
    int nk = 0;
    bool non_ascii_kid = false;
    for (int i = 0; i < n; i++) {
        size_t kl = strlen(props[i].key);
        if (kl < plen || memcmp(props[i].key, prefix, plen) != 0) continue;
        if (kl == plen) { terminal = true; continue; }
        unsigned char ch = (unsigned char)props[i].key[plen];
        if (ch >= 0x80) { non_ascii_kid = true; continue; } /* such keys are simply never generated */
        if (ch == '"' || ch == '\\' || ch < 0x20) continue; /* additional keys hold no escapes */
        bool seen = false;
        for (int k = 0; k < nk; k++) seen |= kids[k] == ch;
        if (!seen) kids[nk++] = ch;
    }
    gr_buf_printf(b, "%s ::= ", name);
    bool first = true;
    if (!terminal) { gr_buf_puts(b, "\"\\\"\""); first = false; }
    /* leave the trie: an unescaped ASCII char that is no child's byte, or any non-ASCII char */
    gr_buf_printf(b, "%s[^\"\\\\\\x00-\\x1F", first ? "" : " | ");
    for (int k = 0; k < nk; k++) {
            if (kids[k] == ']' || kids[k] == '-' || kids[k] == '^' || kids[k] == '\\') gr_buf_printf(b, "\\%c", kids[k]);
            else gr_buf_printf(b, "%c", kids[k]);
        }
    if (non_ascii_kid) gr_buf_puts(b, "\\x80-\\U0010FFFF");
    gr_buf_printf(b, "] %s-kchar* \"\\\"\"", P);
    for (int k = 0; k < nk; k++) {
        char child[NAME_CAP];
        new_name(c, child);
        gr_buf_printf(b, " | \"\\x%02X\" %s", kids[k], child);
    }
    gr_buf_puts(b, "\n");
    /* children (definitions after this rule) */
    char *np = malloc(plen + 2);
    if (!np) { b->oom = true; return; }
    int base = c->counter - nk;
    for (int k = 0; k < nk; k++) {
        memcpy(np, prefix, plen);
        np[plen] = (char)kids[k];
        np[plen + 1] = 0;
        char child[NAME_CAP];
        snprintf(child, NAME_CAP, "%s-s%d", P, base + k + 1);
        key_trie(c, props, n, child, np, plen + 1);
    }
    free(np);
}

static int gen_object(conv *c, const cJSON *s, const char *path, char *name) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return cfail(c, path, "%s", "'properties' must be an object");
    if (req && !cJSON_IsArray(req)) return cfail(c, path, "%s", "'required' must be an array");
    int n = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next) n++;
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) n++;
    prop *pr = calloc((size_t)n + 1, sizeof *pr);
    if (!pr) return cfail(c, path, "%s", "out of memory");
    int np = 0;
    int rc = 0;
    for (const cJSON *p = props ? props->child : NULL; p && !rc; p = p->next) {
        for (int i = 0; i < np; i++)
            if (strcmp(pr[i].key, p->string) == 0) rc = cfail(c, path, "property '%s' appears twice", p->string);
        pr[np].key = p->string;
        char sp[512];
        sub_path(sp, path, "properties", p->string);
        if (!rc) rc = gen(c, p, sp, pr[np].rule);
        np++;
    }
    for (const cJSON *r = req ? req->child : NULL; r && !rc; r = r->next) {
        if (!cJSON_IsString(r)) { rc = cfail(c, path, "%s", "'required' must list strings"); break; }
        int i = 0;
        while (i < np && strcmp(pr[i].key, r->valuestring) != 0) i++;
        if (i == np) { /* required but not described: any value */
            pr[np].key = r->valuestring;
            snprintf(pr[np].rule, NAME_CAP, "%s-value", c->P);
            np++;
        }
        pr[i].required = true;
    }
    /* additional properties */
    char addl_val[NAME_CAP] = "", addl_kv[NAME_CAP] = "";
    if (!rc) {
        if (!addl || cJSON_IsTrue(addl)) {
            /* JSON Schema's default; with properties declared, OpenAI strict mode wants false */
            snprintf(addl_val, NAME_CAP, "%s-value", c->P);
        } else if (cJSON_IsObject(addl)) {
            char sp[512];
            sub_path(sp, path, "additionalProperties", NULL);
            rc = gen(c, addl, sp, addl_val);
        } else if (!cJSON_IsFalse(addl)) {
            rc = cfail(c, path, "%s", "'additionalProperties' must be a boolean or a schema");
        }
    }
    const char *P = c->P;
    gr_buf *b = &c->out;
    if (!rc && addl_val[0]) {
        char key[NAME_CAP];
        new_name(c, key);
        key_trie(c, pr, np, key, "", 0);
        /* key_trie's rule expects the opening quote already matched */
        new_name(c, addl_kv);
        gr_buf_printf(b, "%s ::= \"\\\"\" %s %s-ws \":\" %s-ws %s\n", addl_kv, key, P, P, addl_val);
    }
    if (!rc) {
        /* A_i: the rest from property i after something was written; B_i: nothing written yet */
        int base = c->counter;
        c->counter += 2 * (np + 1);
        char A[NAME_CAP], B[NAME_CAP], A1[NAME_CAP], B1[NAME_CAP];
        for (int i = 0; i <= np; i++) {
            snprintf(A, NAME_CAP, "%s-s%d", P, base + 2 * i + 1);
            snprintf(B, NAME_CAP, "%s-s%d", P, base + 2 * i + 2);
            snprintf(A1, NAME_CAP, "%s-s%d", P, base + 2 * i + 3);
            snprintf(B1, NAME_CAP, "%s-s%d", P, base + 2 * i + 4);
            if (i == np) {
                if (addl_kv[0]) {
                    gr_buf_printf(b, "%s ::= ( \",\" %s-ws %s %s-ws )*\n", A, P, addl_kv, P);
                    gr_buf_printf(b, "%s ::= ( %s %s-ws ( \",\" %s-ws %s %s-ws )* )?\n", B, addl_kv, P, P, addl_kv, P);
                } else {
                    gr_buf_printf(b, "%s ::= \"\"\n%s ::= \"\"\n", A, B);
                }
                continue;
            }
            char kv[NAME_CAP * 2 + 512];
            cJSON *ks = cJSON_CreateString(pr[i].key);
            char *kt = ks ? cJSON_PrintUnformatted(ks) : NULL;
            cJSON_Delete(ks);
            if (!kt) { rc = cfail(c, path, "%s", "out of memory"); break; }
            gr_buf lit = {0};
            gr_buf_literal(&lit, kt, strlen(kt));
            free(kt);
            snprintf(kv, sizeof kv, "%s %s-ws \":\" %s-ws %s %s-ws", lit.p ? lit.p : "\"\"", P, P, pr[i].rule, P);
            free(lit.p);
            if (pr[i].required) {
                gr_buf_printf(b, "%s ::= \",\" %s-ws %s %s\n", A, P, kv, A1);
                gr_buf_printf(b, "%s ::= %s %s\n", B, kv, A1);
            } else {
                gr_buf_printf(b, "%s ::= \",\" %s-ws %s %s | %s\n", A, P, kv, A1, A1);
                gr_buf_printf(b, "%s ::= %s %s | %s\n", B, kv, A1, B1);
            }
        }
        if (!rc) {
            new_name(c, name);
            gr_buf_printf(b, "%s ::= \"{\" %s-ws %s-s%d \"}\"\n", name, P, P, base + 2);
        }
    }
    free(pr);
    return rc;
}

/* ---- $ref ---- */

static const cJSON *resolve(conv *c, const char *ref, const char *path) {
    if (strcmp(ref, "#") == 0) return c->root;
    const char *rest = NULL;
    const cJSON *defs = NULL;
    if (strncmp(ref, "#/$defs/", 8) == 0) { rest = ref + 8; defs = cJSON_GetObjectItemCaseSensitive(c->root, "$defs"); }
    else if (strncmp(ref, "#/definitions/", 14) == 0) { rest = ref + 14; defs = cJSON_GetObjectItemCaseSensitive(c->root, "definitions"); }
    if (!rest) {
        cfail(c, path, "$ref '%s' is not supported (only '#', '#/$defs/NAME' and '#/definitions/NAME')", ref);
        return NULL;
    }
    const cJSON *t = defs ? cJSON_GetObjectItemCaseSensitive(defs, rest) : NULL;
    if (!t) cfail(c, path, "$ref '%s' points nowhere", ref);
    return t;
}

static int gen_ref(conv *c, const char *ref, const char *path, char *name) {
    for (int i = 0; i < c->n_refs; i++)
        if (strcmp(c->refs[i].ref, ref) == 0) {
            memcpy(name, c->refs[i].name, NAME_CAP);
            return 0;
        }
    const cJSON *t = resolve(c, ref, path);
    if (!t) return -1;
    if (c->n_refs == c->cap_refs) {
        int cap = c->cap_refs ? c->cap_refs * 2 : 8;
        ref_memo *q = realloc(c->refs, (size_t)cap * sizeof *q);
        if (!q) return cfail(c, path, "%s", "out of memory");
        c->refs = q;
        c->cap_refs = cap;
    }
    ref_memo *m = &c->refs[c->n_refs];
    m->ref = strdup(ref);
    if (!m->ref) return cfail(c, path, "%s", "out of memory");
    new_name(c, m->name);
    c->n_refs++;
    char mine[NAME_CAP];
    memcpy(mine, c->refs[c->n_refs - 1].name, NAME_CAP);
    char body[NAME_CAP];
    if (gen(c, t, ref + 1, body)) return -1;
    gr_buf_printf(&c->out, "%s ::= %s\n", mine, body);
    memcpy(name, mine, NAME_CAP);
    return 0;
}

/* ---- any schema ---- */

static int gen_type(conv *c, const cJSON *s, const char *t, const char *path, char *name) {
    if (strcmp(t, "string") == 0) return gen_string(c, s, path, name);
    if (strcmp(t, "integer") == 0) return gen_number(c, s, path, true, name);
    if (strcmp(t, "number") == 0) return gen_number(c, s, path, false, name);
    if (strcmp(t, "boolean") == 0) { snprintf(name, NAME_CAP, "%s-boolean", c->P); return 0; }
    if (strcmp(t, "null") == 0) { snprintf(name, NAME_CAP, "%s-null", c->P); return 0; }
    if (strcmp(t, "object") == 0) return gen_object(c, s, path, name);
    if (strcmp(t, "array") == 0) return gen_array(c, s, path, name);
    return cfail(c, path, "unknown type '%s'", t);
}

static int gen_alts(conv *c, const cJSON *list, const char *key, const char *path, char *name) {
    if (!cJSON_IsArray(list) || !list->child) return cfail(c, path, "'%s' must be a non-empty array", key);
    int n = cJSON_GetArraySize(list);
    char (*names)[NAME_CAP] = calloc((size_t)n, NAME_CAP);
    if (!names) return cfail(c, path, "%s", "out of memory");
    int i = 0;
    for (const cJSON *x = list->child; x; x = x->next, i++) {
        char sp[512], idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        sub_path(sp, path, key, idx);
        if (gen(c, x, sp, names[i])) { free(names); return -1; }
    }
    new_name(c, name);
    gr_buf_printf(&c->out, "%s ::= ", name);
    for (i = 0; i < n; i++) gr_buf_printf(&c->out, "%s%s", i ? " | " : "", names[i]);
    gr_buf_puts(&c->out, "\n");
    free(names);
    return 0;
}

/* Strict mode: the branches of a oneOf must exclude each other pairwise, or the output (generated as
 * from an anyOf) might match two of them. */
static int check_one_of(conv *c, const cJSON *list, const char *path) {
    int i = 0;
    for (const cJSON *a = list->child; a; a = a->next, i++) {
        int j = i + 1;
        for (const cJSON *b = a->next; b; b = b->next, j++)
            if (!gr_schema_disjoint(c->root, a, b)) {
                char why[300];
                snprintf(why, sizeof why,
                         "oneOf branches %d and %d may both match one value (strict mode needs branches that "
                         "exclude each other: different types, or a property both require with different const or "
                         "enum values; use anyOf otherwise)", i, j);
                return cfail(c, path, "%s", why);
            }
    }
    return 0;
}

static bool has_any(const cJSON *s, const char *const *keys) {
    for (int i = 0; keys[i]; i++)
        if (cJSON_GetObjectItemCaseSensitive(s, keys[i])) return true;
    return false;
}

static int gen(conv *c, const cJSON *s, const char *path, char *name) {
    if (c->failed) return -1;
    if (cJSON_IsTrue(s)) { snprintf(name, NAME_CAP, "%s-value", c->P); return 0; }
    if (cJSON_IsFalse(s)) return cfail(c, path, "%s", "the schema false matches nothing");
    if (!cJSON_IsObject(s)) return cfail(c, path, "%s", "a schema must be an object or a boolean");
    if (++c->depth > MAX_DEPTH) return cfail(c, path, "%s", "schema nested too deeply");
    int rc = 0;
    for (const cJSON *k = s->child; k; k = k->next)
        if (!in_list(k->string, SUPPORTED) && !in_list(k->string, ANNOTATIONS) && strncmp(k->string, "x-", 2) != 0) {
            rc = cfail(c, path, "keyword '%s' is not supported", k->string);
            break;
        }
    const cJSON *nullable = cJSON_GetObjectItemCaseSensitive(s, "nullable");
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    const cJSON *cnst = cJSON_GetObjectItemCaseSensitive(s, "const");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    char inner[NAME_CAP];
    static const char *const TYPE_KEYS[] = {"properties", "required", "additionalProperties", "items", "minItems",
                                            "maxItems", "minLength", "maxLength", "pattern", "format", "minimum",
                                            "maximum", "exclusiveMinimum", "exclusiveMaximum", "type", NULL};
    int combos = !!ref + !!cnst + !!en + !!any + !!one + !!all;
    if (!rc && combos > 1)
        rc = cfail(c, path, "%s", "combining $ref, const, enum, anyOf, oneOf and allOf in one schema is not supported");
    if (!rc && combos == 1 && has_any(s, TYPE_KEYS) && (ref || any || one || all))
        rc = cfail(c, path, "%s", "$ref, anyOf, oneOf or allOf beside type keywords is not supported (move them into the branches)");
    if (!rc) {
        if (ref) {
            if (!cJSON_IsString(ref)) rc = cfail(c, path, "%s", "'$ref' must be a string");
            else rc = gen_ref(c, ref->valuestring, path, inner);
        } else if (cnst) {
            new_name(c, inner);
            gr_buf_printf(&c->out, "%s ::= ", inner);
            put_json_literal(c, cnst);
            gr_buf_puts(&c->out, "\n");
        } else if (en) {
            if (!cJSON_IsArray(en) || !en->child) rc = cfail(c, path, "%s", "'enum' must be a non-empty array");
            else {
                new_name(c, inner);
                gr_buf_printf(&c->out, "%s ::= ", inner);
                for (const cJSON *x = en->child; x; x = x->next) {
                    if (x != en->child) gr_buf_puts(&c->out, " | ");
                    put_json_literal(c, x);
                }
                gr_buf_puts(&c->out, "\n");
            }
        } else if (any || one) {
            rc = gen_alts(c, any ? any : one, any ? "anyOf" : "oneOf", path, inner);
            if (!rc && one && c->strict) rc = check_one_of(c, one, path);
        } else if (all) {
            if (!cJSON_IsArray(all) || cJSON_GetArraySize(all) != 1)
                rc = cfail(c, path, "%s", "allOf with more than one schema is not supported");
            else {
                char sp[512];
                sub_path(sp, path, "allOf", "0");
                rc = gen(c, all->child, sp, inner);
            }
        } else if (type) {
            if (cJSON_IsString(type)) rc = gen_type(c, s, type->valuestring, path, inner);
            else if (cJSON_IsArray(type) && type->child) {
                int n = cJSON_GetArraySize(type), i = 0;
                char (*names)[NAME_CAP] = calloc((size_t)n, NAME_CAP);
                if (!names) rc = cfail(c, path, "%s", "out of memory");
                for (const cJSON *t = type->child; t && !rc; t = t->next, i++) {
                    if (!cJSON_IsString(t)) rc = cfail(c, path, "%s", "'type' must list strings");
                    else rc = gen_type(c, s, t->valuestring, path, names[i]);
                }
                if (!rc) {
                    new_name(c, inner);
                    gr_buf_printf(&c->out, "%s ::= ", inner);
                    for (i = 0; i < n; i++) gr_buf_printf(&c->out, "%s%s", i ? " | " : "", names[i]);
                    gr_buf_puts(&c->out, "\n");
                }
                free(names);
            } else {
                rc = cfail(c, path, "%s", "'type' must be a string or a non-empty array of strings");
            }
        } else {
            static const char *const OBJ[] = {"properties", "required", "additionalProperties", NULL};
            static const char *const ARR[] = {"items", "minItems", "maxItems", NULL};
            static const char *const STR[] = {"minLength", "maxLength", "pattern", "format", NULL};
            static const char *const NUM[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
            int kinds = has_any(s, OBJ) + has_any(s, ARR) + has_any(s, STR) + has_any(s, NUM);
            if (kinds > 1) rc = cfail(c, path, "%s", "keywords of several types without 'type' are not supported");
            else if (has_any(s, OBJ)) rc = gen_object(c, s, path, inner);
            else if (has_any(s, ARR)) rc = gen_array(c, s, path, inner);
            else if (has_any(s, STR)) rc = gen_string(c, s, path, inner);
            else if (has_any(s, NUM)) rc = gen_number(c, s, path, false, inner);
            else snprintf(inner, NAME_CAP, "%s-value", c->P);
        }
    }
    if (!rc && nullable && cJSON_IsTrue(nullable)) {
        new_name(c, name);
        gr_buf_printf(&c->out, "%s ::= %s | %s-null\n", name, inner, c->P);
    } else if (!rc) {
        memcpy(name, inner, NAME_CAP);
    }
    c->depth--;
    return rc ? -1 : 0;
}

int pith_grammar_json_schema_to_gbnf(const char *schema, size_t len, const char *root_name, char **gbnf,
                                     pith_err *err) {
    return pith_grammar_json_schema_to_gbnf_strict(schema, len, root_name, false, gbnf, err);
}

int pith_grammar_json_schema_to_gbnf_strict(const char *schema, size_t len, const char *root_name, bool strict,
                                            char **gbnf, pith_err *err) {
    *gbnf = NULL;
    if (!root_name || !*root_name) root_name = "root";
    if (!schema) return pith_errf(err, "JSON Schema: no schema");
    cJSON *j = cJSON_ParseWithLength(schema, len);
    if (!j) return pith_errf(err, "JSON Schema: not valid JSON");
    conv c = {.root = j, .P = root_name, .err = err, .strict = strict};
    char top[NAME_CAP];
    int rc = gen(&c, j, "", top);
    if (!rc) {
        gr_buf_printf(&c.out, "%s ::= %s\n", root_name, top);
        gr_json_primitives(&c.out, root_name);
        gr_buf_printf(&c.out, "%s-kchar ::= [^\"\\\\\\x00-\\x1F]\n", root_name);
        if (c.out.oom) rc = pith_errf(err, "JSON Schema: out of memory (or the grammar is too large)");
    }
    for (int i = 0; i < c.n_refs; i++) free(c.refs[i].ref);
    free(c.refs);
    cJSON_Delete(j);
    if (rc) {
        free(c.out.p);
        return -1;
    }
    *gbnf = gr_json_inline_ws(c.out.p, root_name);
    free(c.out.p);
    if (!*gbnf) return pith_errf(err, "out of memory");
    return 0;
}
