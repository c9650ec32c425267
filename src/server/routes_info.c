/* GET /health, /health/live, /v1/models[/ID] and /metrics. */
#include <string.h>

#include "server/handlers.h"
#include "server/metrics.h"
#include "server/models.h"

/* Readiness (docs/api.md#health-and-readiness): 200 only when a request sent now would be served.
 * Checked from the most lasting state to the least: draining never ends, a model never unloads
 * before the drain, and sleep needs a loaded model. An admin pause (or a reload's swap) answers 200
 * with "paused": true: requests are accepted and held, not refused, and the pause lasts seconds,
 * shorter than a probe's failure threshold, so failing readiness would only drop the replica from the
 * pool after the pause is over and add it back later; the queue gauges already steer traffic away. */
enum MHD_Result handle_health(http_request *r) {
    pith_server *srv = r->srv;
    api_error e;
    if (atomic_load(&srv->draining)) {
        api_errorf(&e, 503, "shutting_down", NULL, "the server is shutting down");
        return http_send_error(r, &e);
    }
    if (!atomic_load(&srv->ready)) {
        api_errorf(&e, 503, "model_not_ready", NULL, "the model is still loading");
        return http_send_error(r, &e);
    }
    if (srv->models) { /* several models: they load on demand, so a server not draining takes requests */
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "status", "ok");
        return http_send_json(r, 200, o);
    }
    /* ready: the engine exists and outlives every sleep and reload */
    if (pith_engine_asleep(srv->engine)) {
        api_errorf(&e, 503, "sleeping", NULL, "the server is asleep (/v1/admin/sleep): requests are held until /v1/admin/wake");
        return http_send_error(r, &e);
    }
    cJSON *o = cJSON_CreateObject();
    pith_engine_stats st;
    pith_engine_get_stats(srv->engine, &st);
    cJSON_AddStringToObject(o, "status", "ok");
    if (st.paused) cJSON_AddBoolToObject(o, "paused", true);
    return http_send_json(r, 200, o);
}

/* Liveness: the process runs and answers HTTP, whatever its state (loading, asleep, paused, draining),
 * so that an orchestrator restarts only a process that hangs, never one that is busy loading. */
enum MHD_Result handle_health_live(http_request *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", "ok");
    return http_send_json(r, 200, o);
}

cJSON *server_model_json(pith_server *srv) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", srv->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)srv->created_unix);
    cJSON_AddStringToObject(m, "owned_by", "pith");
    if (atomic_load(&srv->ready)) {
        cJSON_AddNumberToObject(m, "max_model_len", srv->max_seq_len);
        char version[160]; /* the weights served now (docs/rl.md) */
        cJSON_AddStringToObject(m, "weight_version",
                                server_weight_version(srv, pith_engine_weight_generation(srv->engine), version, sizeof version));
    }
    return m;
}

enum MHD_Result handle_models(http_request *r) {
    pith_server *srv = r->srv;
    if (srv->models) return models_handle_list(srv->models, r);
    const char *prefix = "/v1/models/";
    if (!strncmp(r->url, prefix, strlen(prefix))) {
        const char *id = r->url + strlen(prefix);
        if (strcmp(id, srv->model_name)) {
            api_error e;
            api_errorf(&e, 404, "model_not_found", "model", "the model '%.200s' does not exist", id);
            return http_send_error(r, &e);
        }
        return http_send_json(r, 200, server_model_json(srv));
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    cJSON_AddItemToArray(data, server_model_json(srv));
    return http_send_json(r, 200, o);
}

enum MHD_Result handle_metrics(http_request *r) {
    pith_server *srv = r->srv;
    if (srv->models) return models_handle_metrics(srv->models, r);
    pith_engine_stats st;
    bool have = atomic_load(&srv->ready);
    if (have) pith_engine_get_stats(srv->engine, &st);
    char version[160];
    metrics_weights w = {.version = server_weight_version(srv, have ? st.weight_generation : 0, version, sizeof version)};
    pthread_mutex_lock(&srv->versions_lock);
    w.reloads = srv->reloads;
    w.last_pause_s = srv->last_pause_s;
    w.last_load_s = srv->last_load_s;
    pthread_mutex_unlock(&srv->versions_lock);
    metrics_model model = {.name = srv->model_name, .m = &srv->metrics, .st = have ? &st : NULL, .w = &w};
    buf out = {0};
    metrics_render_models(&model, 1, &out);
    enum MHD_Result rc = out.failed ? MHD_NO
                                    : http_send_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", out.data ? out.data : "", out.len);
    buf_free(&out);
    return rc;
}
