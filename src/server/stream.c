#include "server/stream.h"

#include "server/generate.h"

#include <stdlib.h>
#include <string.h>

#include "server/messages_out.h"
#include "server/responses_out.h"
#include "server/tools_out.h"

typedef struct gen_stream {
    http_request *r;
    job *job;
    gen_params params;
    gen_output out;
    buf pending;
    resp_items *resp;  /* /v1/responses: its output items and event numbering */
    bool resp_opened;  /* its opening events sent */
    msg_out *msg;      /* /v1/messages: its content blocks; msg_opened as resp_opened */
    bool msg_opened;
    bool opened;     /* chat role chunks sent (with the first event) */
    bool ended;      /* nothing more to add after pending */
    double last_write;
    double heartbeat_s;
} gen_stream;

static void stream_free(void *p) {
    gen_stream *st = p;
    out_free(&st->out);
    gen_params_free(&st->params);
    buf_free(&st->pending);
    resp_items_free(st->resp);
    msg_out_free(st->msg);
    free(st);
}

static void put_json(gen_stream *st, cJSON *j) {
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!s) {
        st->pending.failed = true;
        return;
    }
    buf_puts(&st->pending, "data: ");
    buf_puts(&st->pending, s);
    buf_puts(&st->pending, "\n\n");
    cJSON_free(s);
}

static void put_json_cb(void *ctx, cJSON *j) { put_json(ctx, j); }

/* A Responses API event: `event: TYPE` then its data. */
static void put_event(void *ctx, cJSON *j) {
    gen_stream *st = ctx;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (cJSON_IsString(type)) {
        buf_puts(&st->pending, "event: ");
        buf_puts(&st->pending, type->valuestring);
        buf_puts(&st->pending, "\n");
    }
    put_json(st, j);
}

static void put_error(gen_stream *st, int status, const char *code, const char *msg) {
    api_error e;
    api_errorf(&e, status, code, NULL, "%s", msg);
    metrics_error(&st->r->srv->metrics, status);
    if (st->resp) resp_stream_error(st->resp, code, msg, put_event, st);
    else if (st->msg) msg_stream_error(st->msg, status, msg, put_event, st);
    else put_json(st, api_error_json(&e));
    st->ended = true;
}

/* Turns the queued events into SSE text in st->pending. */
static void pump(gen_stream *st) {
    job_event *evs;
    int n;
    bool all_done, oom;
    job_take(st->job, 50, &evs, &n, &all_done, &oom);
    if (!st->opened && n > 0) {
        /* The role chunks wait for the first event, so they carry the weight version the choices run
         * with (a request held through a reload starts on the new weights). */
        st->opened = true;
        for (int i = 0; st->out.kind == GEN_CHAT && i < st->out.n_choices; i++)
            put_json(st, out_role_chunk(&st->out, i, evs[0].weight_generation));
    }
    for (int i = 0; i < n && !st->ended; i++) {
        const job_event *ev = &evs[i];
        if (ev->final && ev->finish != PITH_FINISH_STOP && ev->finish != PITH_FINISH_LENGTH) {
            job_cancel(st->job);
            if (ev->finish == PITH_FINISH_CANCELLED) {
                api_error e;
                gen_cancelled_error(st->r->srv, &e);
                put_error(st, e.status, e.code, e.message);
            }
            else {
                api_error e;
                server_model_error(st->r->srv, &e);
                put_error(st, e.status, e.code, e.message);
            }
            break;
        }
        if (st->resp) {
            if (resp_stream_event(st->resp, ev, put_event, st)) oom = true;
            continue;
        }
        if (st->msg) {
            if (msg_stream_event(st->msg, ev, put_event, st)) oom = true;
            continue;
        }
        if (st->out.tools) {
            if (tools_out_chat_stream(&st->out, ev, put_json_cb, st)) oom = true;
            continue;
        }
        bool chunk_oom = false;
        cJSON *chunk = out_chunk(&st->out, ev, &chunk_oom);
        if (chunk) put_json(st, chunk);
        if (chunk_oom) oom = true;
    }
    job_events_free(evs, n);
    if (st->ended) return;
    if (oom || st->pending.failed) {
        job_cancel(st->job);
        buf_free(&st->pending);
        put_error(st, 500, "internal_error", "out of memory");
        return;
    }
    if (all_done && st->resp) {
        resp_stream_close(st->resp, put_event, st);
        st->ended = true;
    } else if (all_done && st->msg) {
        msg_stream_close(st->msg, put_event, st);
        st->ended = true;
    } else if (all_done) {
        if (st->params.include_usage) put_json(st, out_usage_chunk(&st->out));
        buf_puts(&st->pending, "data: [DONE]\n\n");
        st->ended = true;
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    gen_stream *st = cls;
    for (;;) {
        if (st->pending.len) {
            size_t n = st->pending.len < max ? st->pending.len : max;
            memcpy(out, st->pending.data, n);
            buf_consume(&st->pending, n);
            st->last_write = server_now();
            return (ssize_t)n;
        }
        if (st->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        if (http_client_gone(st->r)) {
            http_client_cancelled(st->r);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (st->resp && !st->resp_opened) { /* response.created and in_progress at once */
            st->resp_opened = true;
            resp_stream_open(st->resp, put_event, st);
            continue;
        }
        if (st->msg && !st->msg_opened) { /* message_start and a ping at once */
            st->msg_opened = true;
            msg_stream_open(st->msg, put_event, st);
            continue;
        }
        pump(st);
        if (!st->pending.len && !st->ended && server_now() - st->last_write > st->heartbeat_s)
            buf_puts(&st->pending, ": keep-alive\n\n");
    }
}

enum MHD_Result stream_start(http_request *r, gen_kind kind, gen_params *p) {
    gen_stream *st = calloc(1, sizeof *st);
    if (!st) {
        gen_params_free(p);
        return MHD_NO;
    }
    st->r = r;
    st->job = r->job;
    st->params = *p;
    memset(p, 0, sizeof *p);
    st->last_write = server_now();
    st->heartbeat_s = r->srv->idle_timeout_s / 2.0 < 15 ? r->srv->idle_timeout_s / 2.0 : 15;
    if (out_init(&st->out, r->srv, kind, &st->params, r->job->n_choices) ||
        (kind == GEN_RESPONSES && !(st->resp = resp_items_new(&st->out))) ||
        (kind == GEN_MESSAGES && !(st->msg = msg_out_new(&st->out)))) {
        stream_free(st);
        return MHD_NO;
    }
    r->stream = st;
    r->stream_free = stream_free;
    return http_send_stream(r, stream_read);
}
