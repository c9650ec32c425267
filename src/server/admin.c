/* POST /v1/admin/...: reload, pause, resume, sleep, wake, abort (see admin.h). */
#include "server/admin.h"

#include <stdio.h>
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <string.h>

#include "pith/dist.h"
#include "server/generate.h"
#include "server/params.h"

/* 503 before the model is in, 403 without admin keys, 401 for a wrong key; then the body (an object,
 * possibly empty). NULL when a response was queued (*rc set). */
static cJSON *admin_begin(http_request *r, enum MHD_Result *rc) {
    pith_server *srv = r->srv;
    api_error e;
    if (!auth_enabled(&srv->admin_keys))
        api_errorf(&e, 403, "admin_disabled", NULL, "the admin endpoints are disabled: start the server with --admin-key");
    else if (!auth_check(&srv->admin_keys, http_header(r, MHD_HTTP_HEADER_AUTHORIZATION)))
        api_errorf(&e, 401, "invalid_admin_key", NULL, "a valid admin key is required (Authorization: Bearer ADMIN_KEY)");
    else if (atomic_load(&srv->draining))
        api_errorf(&e, 503, "shutting_down", NULL, "the server is shutting down");
    else if (!atomic_load(&srv->ready))
        api_errorf(&e, 503, "model_not_ready", NULL, "the model is still loading; retry shortly");
    else {
        cJSON *body = r->body && r->body_len ? cJSON_ParseWithLength(r->body, r->body_len) : cJSON_CreateObject();
        if (body && cJSON_IsObject(body)) return body;
        cJSON_Delete(body);
        api_errorf(&e, 400, "invalid_json", NULL, "the request body must be a JSON object");
    }
    *rc = http_send_error(r, &e);
    return NULL;
}

static enum MHD_Result admin_fail(http_request *r, cJSON *body, int status, const char *code, const char *msg) {
    api_error e;
    api_errorf(&e, status, code, NULL, "%s", msg);
    cJSON_Delete(body);
    return http_send_error(r, &e);
}

/* An optional string field; -1 when present and not a string. */
static int opt_string(const cJSON *body, const char *name, const char **out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, name);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v)) return -1;
    *out = v->valuestring;
    return 0;
}

static int opt_timeout(const cJSON *body, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, "timeout_s");
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0) || v->valuedouble > 86400) return -1;
    *out = v->valuedouble;
    return 0;
}

/* Publishes the weights served now (NULL while asleep) with what handlers read from them. Their files are
 * read before the lock is taken; readers holding it finish before a caller frees the previous model. */
static void set_model(pith_server *srv, pith_model *m) {
    char why[sizeof srv->pooling_error] = "";
    int pooling = m ? server_model_pooling(m, why, sizeof why) : 0;
    if (m && !pooling) server_log(srv, PITH_LOG_WARN, "embeddings are unavailable: %s", why);
    pthread_rwlock_wrlock(&srv->model_lock);
    srv->model = m;
    if (m) { /* asleep: requests are held until the wake, which sets it again */
        srv->pooling = pooling;
        memcpy(srv->pooling_error, why, sizeof why);
    }
    pthread_rwlock_unlock(&srv->model_lock);
}

static cJSON *state_json(pith_server *srv) {
    cJSON *o = cJSON_CreateObject();
    pith_engine_stats st;
    pith_engine_get_stats(srv->engine, &st);
    char v[160];
    cJSON_AddStringToObject(o, "weight_version", server_weight_version(srv, st.weight_generation, v, sizeof v));
    cJSON_AddNumberToObject(o, "weight_generation", (double)st.weight_generation);
    cJSON_AddBoolToObject(o, "paused", st.paused);
    cJSON_AddBoolToObject(o, "asleep", st.asleep);
    cJSON_AddNumberToObject(o, "running", st.running);
    cJSON_AddNumberToObject(o, "waiting", st.waiting);
    return o;
}

enum MHD_Result handle_admin_reload(http_request *r) {
    enum MHD_Result rc;
    cJSON *body = admin_begin(r, &rc);
    if (!body) return rc;
    pith_server *srv = r->srv;
    const char *path = NULL, *mode = "drain", *label = NULL;
    double timeout_s = 0;
    if (opt_string(body, "path", &path) || opt_string(body, "mode", &mode) || opt_string(body, "version", &label) ||
        opt_timeout(body, &timeout_s))
        return admin_fail(r, body, 400, "invalid_type", "'path', 'mode' and 'version' must be strings, 'timeout_s' a positive number");
    if (!path || !*path) return admin_fail(r, body, 400, "missing_parameter", "'path' (the new weights: a GGUF file or a safetensors directory) is required");
    bool recompute = !strcmp(mode, "recompute"), abort_mode = !strcmp(mode, "abort");
    if (!recompute && !abort_mode && strcmp(mode, "drain"))
        return admin_fail(r, body, 400, "invalid_value", "'mode' must be \"drain\", \"recompute\" or \"abort\"");
    if (label && (!*label || strlen(label) > 128))
        return admin_fail(r, body, 400, "invalid_value", "'version' must hold 1 to 128 bytes");

    pthread_mutex_lock(&srv->admin_lock);
    pith_engine *e = srv->engine;
    if (pith_engine_asleep(e)) {
        pthread_mutex_unlock(&srv->admin_lock);
        return admin_fail(r, body, 409, "asleep", "the server is asleep: wake it first (/v1/admin/wake)");
    }
    /* Load while serving: the running requests keep going on the old weights. */
    double t0 = server_now();
    pith_model *m = NULL;
    pith_err err;
    if (admin_load_model(srv, path, &m, &err)) {
        pthread_mutex_unlock(&srv->admin_lock);
        server_log(srv, PITH_LOG_ERROR, "reload: cannot load %s: %s", path, err.msg);
        return admin_fail(r, body, 400, "load_failed", "the new weights cannot be loaded (the server log says why)");
    }
    if (admin_check_tokenizer(srv, path, &err)) {
        pith_model_free(m);
        pthread_mutex_unlock(&srv->admin_lock);
        char msg[700];
        snprintf(msg, sizeof msg, "the new weights do not fit the served model: %s", err.msg);
        return admin_fail(r, body, 400, "incompatible_weights", msg);
    }
    double load_s = server_now() - t0;
    pith_engine_stats before;
    pith_engine_get_stats(e, &before);
    double t_pause = server_now();
    pith_pause_mode pm = recompute ? PITH_PAUSE_KEEP : abort_mode ? PITH_PAUSE_ABORT : PITH_PAUSE_DRAIN;
    int prc = pith_engine_pause(e, pm, timeout_s, &err);
    if (prc) {
        if (!srv->admin_paused) pith_engine_resume(e, &err);
        pith_model_free(m);
        pthread_mutex_unlock(&srv->admin_lock);
        return admin_fail(r, body, 504, "drain_timeout", "requests were still running at timeout_s; nothing was changed");
    }
    /* The new generation's label goes in first: its first events may come as soon as the swap is done. */
    char auto_label[32];
    snprintf(auto_label, sizeof auto_label, "%llu", (unsigned long long)before.weight_generation + 1);
    pthread_mutex_lock(&srv->versions_lock);
    char **vs = realloc(srv->versions, (size_t)(srv->n_versions + 1) * sizeof *vs);
    char *copy = strdup(label ? label : auto_label);
    bool ok = vs && copy;
    if (vs) srv->versions = vs;
    if (ok) srv->versions[srv->n_versions++] = copy;
    else free(copy);
    pthread_mutex_unlock(&srv->versions_lock);
    pith_model *old = NULL;
    int src = ok ? pith_engine_swap_model(e, m, recompute ? PITH_SWAP_RECOMPUTE : PITH_SWAP_DRAIN, &old, &err) : -1;
    if (src) {
        if (ok) {
            pthread_mutex_lock(&srv->versions_lock);
            free(srv->versions[--srv->n_versions]);
            pthread_mutex_unlock(&srv->versions_lock);
        }
        if (!srv->admin_paused) pith_engine_resume(e, &err);
        pith_model_free(m);
        pthread_mutex_unlock(&srv->admin_lock);
        char msg[700];
        snprintf(msg, sizeof msg, "the new weights do not fit the served model: %s", ok ? err.msg : "out of memory");
        return admin_fail(r, body, 400, "incompatible_weights", msg);
    }
    if (!srv->admin_paused) pith_engine_resume(e, &err);
    double paused_s = server_now() - t_pause;
    set_model(srv, m);
    pith_model_free(old); /* nothing runs on it any more */
    char *p2 = strdup(path);
    if (p2) {
        free(srv->weights_path);
        srv->weights_path = p2;
    }
    pthread_mutex_lock(&srv->versions_lock);
    srv->reloads++;
    srv->last_pause_s = paused_s;
    srv->last_load_s = load_s;
    pthread_mutex_unlock(&srv->versions_lock);
    pith_engine_stats after;
    pith_engine_get_stats(e, &after);
    pthread_mutex_unlock(&srv->admin_lock);

    char v[160];
    server_log(srv, PITH_LOG_INFO, "reload (%s): weights %s, version %s, loaded in %.2f s, admission paused %.3f s", mode,
               path, server_weight_version(srv, after.weight_generation, v, sizeof v), load_s, paused_s);
    cJSON *o = state_json(srv);
    cJSON_AddStringToObject(o, "mode", mode);
    cJSON_AddNumberToObject(o, "load_s", load_s);
    cJSON_AddNumberToObject(o, "paused_s", paused_s);
    cJSON_AddNumberToObject(o, "restarted", (double)(after.requests_restarted - before.requests_restarted));
    cJSON_AddNumberToObject(o, "aborted", (double)(after.requests_cancelled - before.requests_cancelled));
    cJSON_Delete(body);
    return http_send_json(r, 200, o);
}

enum MHD_Result handle_admin_pause(http_request *r) {
    enum MHD_Result rc;
    cJSON *body = admin_begin(r, &rc);
    if (!body) return rc;
    pith_server *srv = r->srv;
    const char *mode = "drain";
    double timeout_s = 0;
    if (opt_string(body, "mode", &mode) || opt_timeout(body, &timeout_s))
        return admin_fail(r, body, 400, "invalid_type", "'mode' must be a string, 'timeout_s' a positive number");
    pith_pause_mode pm = !strcmp(mode, "drain") ? PITH_PAUSE_DRAIN : !strcmp(mode, "abort") ? PITH_PAUSE_ABORT
                         : !strcmp(mode, "keep") ? PITH_PAUSE_KEEP : (pith_pause_mode)-1;
    if ((int)pm < 0) return admin_fail(r, body, 400, "invalid_value", "'mode' must be \"drain\", \"abort\" or \"keep\"");
    pthread_mutex_lock(&srv->admin_lock);
    double t0 = server_now();
    pith_err err;
    int prc = pith_engine_asleep(srv->engine) ? 1 : pith_engine_pause(srv->engine, pm, timeout_s, &err);
    if (prc == 0) srv->admin_paused = true;
    pthread_mutex_unlock(&srv->admin_lock);
    if (prc > 0) return admin_fail(r, body, 409, "asleep", "the server is asleep: wake it first (/v1/admin/wake)");
    if (prc < 0) return admin_fail(r, body, 504, "drain_timeout", "requests were still running at timeout_s (admission stays paused)");
    cJSON *o = state_json(srv);
    cJSON_AddStringToObject(o, "mode", mode);
    cJSON_AddNumberToObject(o, "seconds", server_now() - t0);
    cJSON_Delete(body);
    return http_send_json(r, 200, o);
}

enum MHD_Result handle_admin_resume(http_request *r) {
    enum MHD_Result rc;
    cJSON *body = admin_begin(r, &rc);
    if (!body) return rc;
    pith_server *srv = r->srv;
    pthread_mutex_lock(&srv->admin_lock);
    pith_err err;
    int rrc = pith_engine_resume(srv->engine, &err);
    if (rrc == 0) srv->admin_paused = false;
    pthread_mutex_unlock(&srv->admin_lock);
    if (rrc) return admin_fail(r, body, 409, "asleep", "the server is asleep: wake it (/v1/admin/wake), which resumes");
    cJSON_Delete(body);
    return http_send_json(r, 200, state_json(srv));
}

enum MHD_Result handle_admin_sleep(http_request *r) {
    enum MHD_Result rc;
    cJSON *body = admin_begin(r, &rc);
    if (!body) return rc;
    pith_server *srv = r->srv;
    pthread_mutex_lock(&srv->admin_lock);
    double t0 = server_now();
    pith_err err;
    if (pith_engine_sleep(srv->engine, &err)) {
        pthread_mutex_unlock(&srv->admin_lock);
        return admin_fail(r, body, 409, "asleep", "the server is already asleep");
    }
    /* The engine no longer uses the model: its weights go too (mapped file, repacked copies); under --tp
     * on every rank, the model kept as the job's handle to load them again on wake. */
    pith_model *m = srv->model;
    set_model(srv, NULL);
    if (srv->comm && pith_dist_release(m, &err) == 0) srv->asleep_job = m;
    else pith_model_free(m);
#ifdef __GLIBC__
    malloc_trim(0); /* freed heap pages back to the system, so RSS shows the release */
#endif
    pthread_mutex_unlock(&srv->admin_lock);
    server_log(srv, PITH_LOG_INFO, "asleep: KV cache and weights released");
    cJSON *o = state_json(srv);
    cJSON_AddNumberToObject(o, "seconds", server_now() - t0);
    cJSON_Delete(body);
    return http_send_json(r, 200, o);
}

enum MHD_Result handle_admin_wake(http_request *r) {
    enum MHD_Result rc;
    cJSON *body = admin_begin(r, &rc);
    if (!body) return rc;
    pith_server *srv = r->srv;
    pthread_mutex_lock(&srv->admin_lock);
    if (!pith_engine_asleep(srv->engine)) {
        pthread_mutex_unlock(&srv->admin_lock);
        return admin_fail(r, body, 409, "not_asleep", "the server is not asleep");
    }
    double t0 = server_now();
    pith_model *m = NULL;
    pith_err err;
    if (admin_load_model(srv, srv->weights_path, &m, &err) || pith_engine_wake(srv->engine, m, &err)) {
        pith_model_free(m);
        pthread_mutex_unlock(&srv->admin_lock);
        server_log(srv, PITH_LOG_ERROR, "wake: %s", err.msg);
        return admin_fail(r, body, 500, "wake_failed", "the weights could not be loaded again (the server log says why)");
    }
    set_model(srv, m);
    pith_model_free(srv->asleep_job); /* the old handle: its ranks' places go (the new model has its own) */
    srv->asleep_job = NULL;
    if (srv->admin_paused) pith_engine_pause(srv->engine, PITH_PAUSE_KEEP, 0, &err); /* asleep while paused: stays paused */
    pthread_mutex_unlock(&srv->admin_lock);
    server_log(srv, PITH_LOG_INFO, "awake: weights loaded again in %.2f s", server_now() - t0);
    cJSON *o = state_json(srv);
    cJSON_AddNumberToObject(o, "seconds", server_now() - t0);
    cJSON_Delete(body);
    return http_send_json(r, 200, o);
}

enum MHD_Result handle_admin_abort(http_request *r) {
    enum MHD_Result rc;
    cJSON *body = admin_begin(r, &rc);
    if (!body) return rc;
    pith_server *srv = r->srv;
    int n = pith_engine_abort_all(srv->engine);
    cJSON *o = state_json(srv);
    cJSON_AddNumberToObject(o, "aborted", n);
    cJSON_Delete(body);
    return http_send_json(r, 200, o);
}
