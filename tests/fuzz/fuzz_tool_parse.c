/* The tool-call / reasoning output parser (src/server/tool_parse.h): byte 0 picks the format and the
 * flags (tools, parallel, think, in_think), byte 1 the piece size of a second, streamed run (and whether the
 * output was cut off, and forced); the rest is
 * model output. The whole text fed at once and fed in pieces must give the same content, reasoning and
 * calls, and events must come in a legal order (a call's arguments only between its begin and end). */
#include "fuzz_util.h"
#include "server/tool_parse.h"

typedef struct out {
    buf text;        /* every event, tagged, in order */
    bool in_call;
} out;

static void sink(void *user, tp_event ev, const char *s, size_t n) {
    out *o = user;
    if ((ev == TP_CALL_ARGS || ev == TP_CALL_END) && !o->in_call) abort();
    if (ev == TP_CALL_BEGIN && (o->in_call || n == 0)) abort();
    if ((ev == TP_CONTENT || ev == TP_REASONING) && o->in_call) abort();
    if (ev == TP_CALL_BEGIN) o->in_call = true;
    if (ev == TP_CALL_END) o->in_call = false;
    /* Consecutive text pieces of one kind are one: compare the merged stream. */
    char tag = (char)('A' + ev);
    buf_append(&o->text, &tag, 1);
    buf_append(&o->text, &n, sizeof n);
    buf_append(&o->text, s, n);
}

/* The events as (kind, text) with adjacent pieces of the same kind merged. */
static void normalise(const buf *in, buf *out) {
    char last = 0;
    for (size_t i = 0; i < in->len;) {
        char tag = in->data[i++];
        size_t n;
        memcpy(&n, in->data + i, sizeof n);
        i += sizeof n;
        bool merge = tag == last && (tag == 'A' + TP_CONTENT || tag == 'A' + TP_REASONING || tag == 'A' + TP_CALL_ARGS);
        if (!merge) {
            buf_append(out, "|", 1);
            buf_append(out, &tag, 1);
        }
        for (size_t k = 0; k < n; k++) { /* escape the separator */
            char c = in->data[i + k];
            if (c == '|' || c == '\\') buf_append(out, "\\", 1);
            buf_append(out, &c, 1);
        }
        i += n;
        last = tag;
    }
}

static void run(const tp_config *cfg, const char *s, size_t n, size_t piece, bool cut, buf *events) {
    out o = {0};
    tp_parser p;
    tp_init(&p, cfg, sink, &o);
    for (size_t at = 0; at < n; at += piece) tp_feed(&p, s + at, n - at < piece ? n - at : piece);
    if (cut) tp_finish_truncated(&p);
    else tp_finish(&p);
    if (o.in_call) abort(); /* finish closes every call */
    tp_free(&p);
    normalise(&o.text, events);
    buf_free(&o.text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    tp_config cfg = {
        .format = (tp_format)(data[0] % TP_FMT_COUNT), .tools = data[0] & 8, .parallel = data[0] & 16,
        .think = data[0] & 32, .in_think = data[0] & 64,
    };
    size_t piece = data[1] % 17 + 1;
    bool cut = data[1] & 128; /* cut off by max_tokens (tp_finish_truncated) */
    cfg.forced = data[1] & 64;
    const char *s = (const char *)data + 2;
    size_t n = size - 2;
    buf whole = {0}, pieces = {0};
    run(&cfg, s, n, n ? n : 1, cut, &whole);
    run(&cfg, s, n, piece, cut, &pieces);
    if (whole.len != pieces.len || (whole.len && memcmp(whole.data, pieces.data, whole.len))) abort();
    buf_free(&whole);
    buf_free(&pieces);
    return 0;
}
