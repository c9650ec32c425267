/* Internal interface of the chat-template interpreter (a Jinja2 subset).
 *
 * Pipeline: jinja_lex.c turns template text into tokens (applying whitespace control, trim_blocks and
 * lstrip_blocks exactly as jinja2's lexer does), jinja_parse.c builds an AST, jinja_eval.c walks it.
 * Values (jv) are small structs passed by value; everything they point at lives in an arena that is
 * freed in one go, so no value is ever freed early and nothing leaks on error paths. Strings are
 * immutable byte views (UTF-8, not NUL-terminated); lists and dicts are immutable once built, except
 * namespace objects, the only thing a template may mutate (`{% set ns.x = ... %}`), as in jinja2's
 * immutable sandbox.
 *
 * Errors: every fallible function returns 0 or -1; on -1 the context's pith_err holds one line that
 * ends with "at line N" where a template line is known. */
#ifndef PITH_CHAT_JINJA_H
#define PITH_CHAT_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pith/chat.h"
#include "pith/status.h"

/* ---- arena ---- */

typedef struct jarena_chunk jarena_chunk;
typedef struct jarena {
    jarena_chunk *head;
    size_t used_total; /* bytes handed out plus chunk overhead, checked against limit */
    size_t limit;
} jarena;

void jarena_init(jarena *a, size_t limit);
void *jarena_alloc(jarena *a, size_t n); /* NULL when over the limit or out of memory; zeroed */
void jarena_free(jarena *a);

/* ---- strings ---- */

typedef struct jstr {
    const char *p;
    size_t n;
} jstr;

#define JSTR_LIT(s) ((jstr){(s), sizeof(s) - 1})
bool jstr_eq(jstr a, jstr b);
bool jstr_eq_c(jstr a, const char *c);

/* ---- values ---- */

typedef enum {
    JV_UNDEF,  /* u.s: the name that was looked up, for error messages */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,   /* also tuples (list->tuple) */
    JV_DICT,
    JV_NS,     /* namespace(): a mutable dict with attribute syntax */
    JV_LOOP,   /* the `loop` variable of a for loop */
    JV_FUNC,   /* builtin global function, u.fn = JFN_* */
    JV_METHOD, /* bound method: receiver and method name */
    JV_MACRO,
} jv_kind;

struct jlist;
struct jdict;
struct jloop;
struct jmethod;
struct jnode;

typedef struct jv {
    jv_kind kind;
    union {
        bool b;
        int64_t i;
        double f;
        jstr s;
        struct jlist *list;
        struct jdict *dict;
        struct jloop *loop;
        int fn;
        struct jmethod *method;
        const struct jnode *macro;
    } u;
} jv;

/* A list, a tuple, or a dict view (d.keys() / values() / items()), which iterate like lists but print,
 * index and serialize as Python's view objects do. */
enum { JVIEW_NONE, JVIEW_KEYS, JVIEW_VALUES, JVIEW_ITEMS };
typedef struct jlist {
    size_t n;
    bool tuple;
    int view;
    jv *items;
} jlist;

/* Insertion-ordered; string keys are also hashed (index, open addressing, slot = entry + 1) once a
 * dict grows past a few entries, so large JSON objects build and look up in linear time. */
typedef struct jdict {
    size_t n, cap;
    jv *keys;
    jv *vals;
    uint32_t *index;
    size_t index_cap;
} jdict;

typedef struct jloop {
    size_t index0, length;
    const jv *items;
    int depth; /* 1 for an outermost loop */
} jloop;

typedef struct jmethod {
    jv self;
    jstr name;
} jmethod;

enum { JFN_RANGE, JFN_NAMESPACE, JFN_RAISE, JFN_DICT, JFN_STRFTIME, JFN_COUNT };

static inline jv jv_undef(jstr name) { jv v = {.kind = JV_UNDEF}; v.u.s = name; return v; }
static inline jv jv_none(void) { return (jv){.kind = JV_NONE}; }
static inline jv jv_bool(bool b) { jv v = {.kind = JV_BOOL}; v.u.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {.kind = JV_INT}; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {.kind = JV_FLOAT}; v.u.f = f; return v; }
static inline jv jv_str(jstr s) { jv v = {.kind = JV_STR}; v.u.s = s; return v; }

/* ---- AST ---- */

typedef enum {
    /* expressions */
    N_LIT, N_NAME, N_LIST, N_TUPLE, N_DICT, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_FILTER, N_TEST,
    N_NEG, N_POS, N_NOT, N_AND, N_OR, N_BINOP, N_COMPARE, N_COND,
    /* statements */
    N_BODY, N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_BREAK, N_CONTINUE, N_MACRO,
    N_WITH, N_FILTERBLOCK,
} jnode_type;

typedef enum {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN,
} jop;

/* One node type for everything keeps the parser and walker small; each type documents which fields
 * it uses in jinja_parse.c. */
typedef struct jnode {
    jnode_type type;
    int line;
    int op;                /* jop; N_TEST: 1 when negated; N_FILTER/N_TEST: table index */
    jstr name;             /* N_NAME, N_ATTR, N_FILTER, N_TEST, N_MACRO */
    jv lit;                /* N_LIT */
    struct jnode *a, *b, *c, *d, *e;
    struct jnode **kids;   /* list items, positional args, body statements, compare operands */
    int n_kids;
    jstr *kw_names;        /* keyword args (N_CALL, N_FILTER, N_TEST), macro parameter names */
    struct jnode **kw_vals;
    int n_kw;
    int *ops;              /* N_COMPARE: n_kids - 1 operators */
} jnode;

/* ---- lexer ---- */

typedef enum {
    T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
    T_NAME, T_STRING, T_INT, T_FLOAT, T_OP, T_EOF,
} jtok_type;

typedef struct jtok {
    jtok_type type;
    int line;
    jstr s; /* text, name, operator spelling, or decoded string literal */
    int64_t i;
    double f;
} jtok;

typedef struct jtokens {
    jtok *v;
    size_t n;
} jtokens;

int jinja_lex(jarena *a, const char *src, size_t len, jtokens *out, pith_err *err);

/* ---- parser ---- */

/* Parses into the arena; *root is an N_BODY. */
int jinja_parse(jarena *a, const jtokens *toks, int max_depth, jnode **root, pith_err *err);

/* Filter and test tables (jinja_filters.c / jinja_tests.c): index by name, -1 when unknown. */
int jinja_filter_index(jstr name);
int jinja_test_index(jstr name);

/* ---- evaluation ---- */

typedef struct jbuf {
    char *p;
    size_t n, cap;
} jbuf;

/* A scope: names to values, in a dict so that lookups stay O(1) however many variables a template sets. */
typedef struct jframe {
    struct jframe *parent;
    jdict vars;
} jframe;

typedef struct jargs {
    const jv *pos;
    int n_pos;
    const jstr *kw_names;
    const jv *kw_vals;
    int n_kw;
} jargs;

enum { CTL_NONE, CTL_BREAK, CTL_CONTINUE };

typedef struct jctx {
    jarena *arena;
    pith_err *err;
    pith_chat_limits lim;
    uint64_t steps;
    int depth;       /* current nesting of evaluation (expressions, statements, macro calls) */
    int loop_depth;
    int line;        /* line of the node being evaluated, for error messages */
    int ctl;         /* pending break/continue */
    jbuf *out;       /* where output goes now (captures redirect it) */
    jframe *frame;   /* innermost scope */
    jframe *root;    /* template-level scope; macros run on top of it */
} jctx;

/* Error helpers: format "chat template: <msg> at line N" into c->err and return -1. */
int jerr(jctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void *jalloc(jctx *c, size_t n);                      /* sets the memory-limit error on failure */
/* Charges `units` evaluation steps for work proportional to data size (items visited, or bytes / 64
 * scanned), so repeating cheap-looking operations on huge values cannot run unbounded. */
int jcharge(jctx *c, size_t units);
void *jalloc_array(jctx *c, size_t n, size_t size);   /* overflow-checked */
int jbuf_put(jctx *c, jbuf *b, const char *s, size_t n);
int jbuf_putc(jctx *c, jbuf *b, char ch);
int jbuf_puts(jctx *c, jbuf *b, const char *s);
int jbuf_printf(jctx *c, jbuf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline jstr jbuf_str(const jbuf *b) { return (jstr){b->p ? b->p : "", b->n}; }
int jstr_dup(jctx *c, const char *s, size_t n, jstr *out);
int jstr_cat(jctx *c, jstr a, jstr b, jstr *out);

/* Lists and dicts */
int jlist_new(jctx *c, size_t n, bool tuple, jv *out);   /* n items, all none */
int jdict_new(jctx *c, jv *out);
int jdict_set(jctx *c, jdict *d, jv key, jv val);        /* replaces an existing equal key */
const jv *jdict_get(const jdict *d, jv key);
const jv *jdict_get_str(const jdict *d, jstr key);

/* Python semantics (jinja_value.c) */
bool jv_truthy(jv v);
bool jv_equal(jv a, jv b);                           /* for small values (dict keys, numbers) */
int jv_eq(jctx *c, jv a, jv b, bool *out);            /* ==, charging steps for the elements compared */
int jv_compare(jctx *c, jv a, jv b, int *cmp);       /* <, <=, >, >= ordering; error if unorderable */
int jv_to_str(jctx *c, jv v, jstr *out);              /* str(v) */
int jv_repr(jctx *c, jbuf *b, jv v);                  /* repr(v) appended to b */
int jv_format_float(char *buf, size_t cap, double f); /* Python repr of a float */
const char *jv_type_name(jv v);
bool jv_is_number(jv v); /* int, float or bool */
int jv_check_hashable(jctx *c, jv v); /* Python's TypeError for lists and dicts used as keys */
double jv_as_double(jv v);
int jv_iterate(jctx *c, jv v, const jlist **out);            /* list(v): items of lists, keys of dicts, chars */
int jv_length(jctx *c, jv v, int64_t *n);
int jv_getattr(jctx *c, jv obj, jstr name, jv *out);  /* obj.name */
int jv_getitem(jctx *c, jv obj, jv key, jv *out);     /* obj[key] */
int jv_binop(jctx *c, int op, jv a, jv b, jv *out);
int jv_contains(jctx *c, jv container, jv item, bool *out);

/* UTF-8 and Python string helpers (jinja_unicode.c) */
size_t ju_decode(const char *s, size_t n, size_t i, uint32_t *cp); /* bytes consumed (>= 1) */
size_t ju_decode_back(const char *s, size_t end, uint32_t *cp);     /* the code point ending at end (> 0) */
int ju_encode(uint32_t cp, char out[4]);
bool ju_is_space(uint32_t cp);       /* Python str.isspace() */
uint32_t ju_upper(uint32_t cp);
uint32_t ju_lower(uint32_t cp);
bool ju_is_alpha(uint32_t cp);
bool ju_is_digit(uint32_t cp);
bool ju_is_linebreak(uint32_t cp);   /* str.splitlines() boundaries */
size_t ju_count(jstr s);             /* code points */
/* byte offset of code point index i (clamped to [0, n]) */
size_t ju_offset(jstr s, size_t cp_index);
int ju_map_case(jctx *c, jstr s, int mode, jstr *out); /* mode: 0 lower, 1 upper, 2 capitalize, 3 title (filter), 4 str.title */
int ju_strip(jstr s, const jstr *chars, bool left, bool right, jstr *out);

/* Evaluation entry points (jinja_eval.c) */
int jinja_eval(jctx *c, const jnode *n, jv *out);
int jinja_exec(jctx *c, const jnode *body);
int jinja_call(jctx *c, jv callee, const jargs *args, jv *out);
int jframe_set(jctx *c, jframe *f, jstr name, jv val);
void jframe_clear(jframe *f); /* empties a scope for reuse (next loop iteration) */
int jinja_lookup(jctx *c, jstr name, jv *out);

/* Filters, tests, methods, globals (jinja_filters.c, jinja_tests.c, jinja_methods.c) */
int jinja_apply_filter(jctx *c, int index, jv self, const jargs *args, jv *out);
int jinja_apply_test(jctx *c, int index, jv self, const jargs *args, bool *out);
int jinja_call_method(jctx *c, jv self, jstr name, const jargs *args, jv *out);
bool jinja_has_method(jv self, jstr name);
int jinja_call_global(jctx *c, int fn, const jargs *args, jv *out);
int jinja_global_index(jstr name);
/* Python str.replace (count < 0: all) and str.center/ljust/rjust (how 0 / -1 / 1). */
int jinja_str_replace(jctx *c, jstr s, jstr old, jstr new_, int64_t count, jstr *out);
int jinja_str_pad(jctx *c, jstr s, int64_t width, jstr fill, int how, jstr *out);
/* Python `fmt % args` (args: a tuple, a mapping for %(key)s, or one value) and fmt.format(...) (jinja_format.c). */
int jinja_printf(jctx *c, jstr fmt, jv args, jv *out);
int jinja_str_format(jctx *c, jstr fmt, const jargs *a, jv *out);

/* Argument helpers: fetch parameter `pos` (positional index) or keyword `name`; *found false if absent. */
int jargs_get(jctx *c, const jargs *a, int pos, const char *name, jv *out, bool *found);
int jargs_check(jctx *c, const jargs *a, int max_pos, const char *const *kw_allowed, const char *what);

/* JSON (jinja_json.c) */
struct cJSON;
int jv_from_cjson(jctx *c, const struct cJSON *j, int depth, jv *out);
typedef struct jjson_opts {
    int indent;        /* < 0: none */
    jstr item_sep, key_sep;
    bool sort_keys;
    bool ensure_ascii;
} jjson_opts;
int jv_to_json(jctx *c, jbuf *b, jv v, const jjson_opts *o, int level);

#endif
