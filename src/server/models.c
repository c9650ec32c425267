/* Several models in one server: the registry, loading on demand, least-recently-used unloading and
 * routing (models.h). */
#include "server/models.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "server/job.h"

/* A model whose load failed is tried again by a request only after this long (an admin load tries at
 * once): a broken file must not cost every request a load. */
#define RETRY_AFTER_FAILURE_S 30.0
#define NAME_MAX_BYTES 200

typedef enum { SLOT_UNLOADED, SLOT_LOADING, SLOT_LOADED, SLOT_UNLOADING, SLOT_FAILED } slot_state;

static const char *const state_names[] = {"unloaded", "loading", "loaded", "unloading", "failed"};

typedef struct slot {
    char *name, *path;
    char *mmproj;         /* the projector given (-m NAME=PATH, --mmproj NAME=FILE), or NULL */
    char *dir;            /* a --models-dir directory the model came from (its mmproj*.gguf), or NULL */
    slot_state state;
    pith_server *srv;     /* LOADED and UNLOADING */
    int active;           /* requests holding srv */
    double last_used;     /* monotonic seconds: the last request's end (or start) */
    size_t bytes;         /* measured while loaded (and after), else the files' size */
    size_t charged;       /* what loaded_bytes / loading_bytes hold for this slot */
    double failed_at;
    double load_s;
    char error[sizeof(pith_err)];  /* FAILED: why, for the log and the admin reply (never a request's reply) */
} slot;

struct models {
    pith_server *front;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    slot **slots;
    int n, cap;
    char *dir;
    int max;
    size_t mem;
    double ttl_s, load_timeout_s;
    int n_loaded;          /* LOADED + UNLOADING */
    size_t loaded_bytes;
    int n_loading;
    size_t loading_bytes;
    size_t pool_bytes_seen; /* the largest memory pools a model took here (estimates for new ones) */
    int n_loaders;         /* loader threads still running */
    bool draining, stopping;
    bool reaper_started;
    pthread_t reaper;
    uint64_t loads, unloads, failures;
};

/* ---- the list ---- */

static slot *find(models *m, const char *name) {
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->slots[i]->name, name)) return m->slots[i];
    return NULL;
}

static bool name_ok(const char *name) {
    size_t n = strlen(name);
    if (!n || n > NAME_MAX_BYTES || name[0] == '.') return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f || name[i] == '/') return false;
    return true;
}

static void slot_free(slot *s) {
    if (!s) return;
    free(s->name);
    free(s->path);
    free(s->mmproj);
    free(s->dir);
    free(s);
}

static int add_slot(models *m, const char *name, const char *path, const char *mmproj, const char *dir, pith_err *err) {
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 8;
        slot **s = realloc(m->slots, (size_t)cap * sizeof *s);
        if (!s) return pith_errf(err, "out of memory");
        m->slots = s;
        m->cap = cap;
    }
    slot *s = calloc(1, sizeof *s);
    if (!s || !(s->name = strdup(name)) || !(s->path = strdup(path)) || (mmproj && !(s->mmproj = strdup(mmproj))) ||
        (dir && !(s->dir = strdup(dir)))) {
        slot_free(s);
        return pith_errf(err, "out of memory");
    }
    m->slots[m->n++] = s;
    return 0;
}

/* Whether a GGUF file name is a model's first (or only) file: NAME.gguf, or of a split model only the
 * first part, NAME-00001-of-0000N.gguf; *stem_len: the length of NAME. Projectors (mmproj*.gguf) are
 * never models. */
static bool gguf_first_file(const char *file, size_t *stem_len) {
    size_t n = strlen(file);
    if (n <= 5 || strcmp(file + n - 5, ".gguf") || server_is_mmproj_name(file)) return false;
    n -= 5;
    const char *split = n >= 15 ? file + n - 15 : NULL; /* "-00001-of-00003" */
    if (split && split[0] == '-' && !strncmp(split + 6, "-of-", 4)) {
        if (strncmp(split, "-00001", 6)) return false;
        n -= 15;
    }
    *stem_len = n;
    return true;
}

static int only_first_gguf(const struct dirent *de) {
    size_t n;
    return de->d_name[0] != '.' && gguf_first_file(de->d_name, &n);
}

/* The model file of a directory without config.json: its one model GGUF (of a split one the first part),
 * beside which its projector may lie (llama.cpp's router keeps multimodal and split models so), into
 * file. 0, or -1 when it holds none or several. */
static int dir_gguf(const char *dir, char *file, size_t cap) {
    struct dirent **entries = NULL;
    int n = scandir(dir, &entries, only_first_gguf, alphasort);
    if (n < 0) return -1;
    char p[4096];
    int found = 0;
    for (int i = 0; i < n; i++) {
        struct stat st;
        int w = snprintf(p, sizeof p, "%s/%s", dir, entries[i]->d_name);
        if (w > 0 && (size_t)w < sizeof p && (size_t)w < cap && !stat(p, &st) && S_ISREG(st.st_mode) && !found++)
            memcpy(file, p, (size_t)w + 1);
        free(entries[i]);
    }
    free(entries);
    return found == 1 ? 0 : -1;
}

/* The model a directory entry holds, named after it: NAME.gguf (of a split file, only the first part,
 * NAME-00001-of-0000N.gguf; never a projector, mmproj*.gguf), or a directory NAME with config.json (the
 * path is the directory) or one model's GGUF file(s) (the path is its file). "" when it holds none.
 * sub: the directory NAME's path, where a mmproj*.gguf is the model's projector (server_model_projector);
 * "" for a file. */
static void entry_model(const char *dir, const char *entry, char *name, size_t cap, char *path, char *sub, size_t pcap) {
    name[0] = sub[0] = 0;
    if (entry[0] == '.' || snprintf(path, pcap, "%s/%s", dir, entry) >= (int)pcap) return;
    struct stat st;
    if (stat(path, &st)) return;
    size_t n = strlen(entry);
    if (S_ISREG(st.st_mode) && gguf_first_file(entry, &n)) {
        if (n < cap) snprintf(name, cap, "%.*s", (int)n, entry);
    } else if (S_ISDIR(st.st_mode) && n < cap) {
        char cfg[4200];
        memcpy(sub, path, strlen(path) + 1);
        bool hf = snprintf(cfg, sizeof cfg, "%s/config.json", sub) < (int)sizeof cfg && !stat(cfg, &st) && S_ISREG(st.st_mode);
        if (hf || !dir_gguf(sub, path, pcap)) memcpy(name, entry, n + 1);
    }
    if (name[0] && !name_ok(name)) name[0] = 0;
}

/* Adds the directory's models not listed yet (models are never removed: a file gone fails its load). */
static int scan_dir(models *m, pith_err *err) {
    if (!m->dir) return 0;
    struct dirent **entries = NULL;
    int n = scandir(m->dir, &entries, NULL, alphasort); /* the listing in name order */
    if (n < 0) return pith_errf(err, "cannot read the models directory %s", m->dir);
    char name[NAME_MAX_BYTES + 1], path[4096], sub[4096];
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (!rc) {
            entry_model(m->dir, entries[i]->d_name, name, sizeof name, path, sub, sizeof path);
            if (name[0] && !find(m, name)) rc = add_slot(m, name, path, NULL, sub[0] ? sub : NULL, err);
        }
        free(entries[i]);
    }
    free(entries);
    return rc;
}

/* Bytes of a file, or of the files directly in a directory: what loading it maps, before its pools. */
static size_t files_size(const char *path) {
    struct stat st;
    if (stat(path, &st)) return 0;
    if (!S_ISDIR(st.st_mode)) return (size_t)st.st_size;
    DIR *d = opendir(path);
    if (!d) return 0;
    size_t total = 0;
    struct dirent *de;
    char p[4096];
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || snprintf(p, sizeof p, "%s/%s", path, de->d_name) >= (int)sizeof p) continue;
        if (!stat(p, &st) && S_ISREG(st.st_mode)) total += (size_t)st.st_size;
    }
    closedir(d);
    return total;
}

/* Bytes of a model's projector file beside its model's (0 for none, and for a vision tower inside the
 * model's own files, which files_size(path) counts already). */
static size_t projector_size(const char *model_path, const char *projector) {
    return projector && strcmp(projector, model_path) ? files_size(projector) : 0;
}

/* The same before the load, from the rule that load will apply (server_model_projector). */
static size_t projector_estimate(const slot *s) {
    char *proj = NULL;
    pith_err ignored; /* two projectors: the load fails and says so */
    size_t n = server_model_projector(s->path, s->mmproj, s->dir, &proj, &ignored) ? 0 : projector_size(s->path, proj);
    free(proj);
    return n;
}

/* ---- loading and unloading (under m->lock unless said otherwise) ---- */

static int check_locked(models *m, pith_err *err);
static void unload(models *m, slot *s, const char *why);
static slot *lru_idle_except(models *m, const slot *keep);

/* After each load and unload: the bookkeeping is checked (a few slots: cheap beside a load), and a
 * broken invariant is logged as an error, which the tests look for. */
static void verify(models *m) {
    pith_err err;
    if (check_locked(m, &err)) server_log(m->front, PITH_LOG_ERROR, "models: invariant broken: %s", err.msg);
}

typedef struct load_job {
    models *m;
    slot *s;
} load_job;

static void *load_thread(void *arg) {
    load_job *lj = arg;
    models *m = lj->m;
    slot *s = lj->s;
    free(lj);
    double t0 = server_now();
    pith_err err = {{0}};
    pith_server *srv = NULL;
    int rc = server_create_model(m->front, s->name, s->path, s->mmproj, s->dir, &srv, &err);
    if (!rc) rc = pith_server_load(srv, &err);
    size_t bytes = 0, files = 0;
    if (!rc) {
        pith_engine_stats st;
        pith_engine_get_stats(srv->engine, &st);
        files = files_size(s->path) + (srv->vision ? projector_size(s->path, srv->projector) : 0);
        bytes = files + st.mem_bytes;
    }
    pthread_mutex_lock(&m->lock);
    m->n_loading--;
    m->loading_bytes -= s->charged;
    s->charged = 0;
    s->load_s = server_now() - t0;
    if (rc || m->stopping) {
        if (rc) {
            snprintf(s->error, sizeof s->error, "%s", err.msg);
            s->state = SLOT_FAILED;
            s->failed_at = server_now();
            m->failures++;
        } else {
            s->state = SLOT_UNLOADED;
        }
        pthread_mutex_unlock(&m->lock);
        if (rc) server_log(m->front, PITH_LOG_ERROR, "model %s: cannot load: %s", s->name, err.msg);
        pith_server_free(srv);
        pthread_mutex_lock(&m->lock);
    } else {
        s->srv = srv;
        s->bytes = s->charged = bytes;
        s->state = SLOT_LOADED;
        s->last_used = server_now();
        if (m->draining) atomic_store(&srv->draining, true);
        m->n_loaded++;
        m->loaded_bytes += bytes;
        m->loads++;
        size_t pools = bytes - files;
        if (pools > m->pool_bytes_seen) m->pool_bytes_seen = pools;
        /* The load was admitted on an estimate; the measured size may be over --models-mem: idle
         * models go, least recently used first, until it holds (busy ones go once they are idle). */
        slot *victim;
        while (m->mem > 0 && m->loaded_bytes + m->loading_bytes > m->mem && (victim = lru_idle_except(m, s)))
            unload(m, victim, "to stay within --models-mem");
    }
    m->n_loaders--;
    verify(m);
    pthread_cond_broadcast(&m->changed);
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

/* Takes s from UNLOADING with no request holding it to UNLOADED; drops and retakes the lock. */
static void finish_unload(models *m, slot *s) {
    pith_server *srv = s->srv;
    pthread_mutex_unlock(&m->lock);
    pith_server_free(srv);
    pthread_mutex_lock(&m->lock);
    s->srv = NULL;
    s->state = SLOT_UNLOADED;
    m->n_loaded--;
    m->loaded_bytes -= s->charged;
    s->charged = 0;
    m->unloads++;
    verify(m);
    pthread_cond_broadcast(&m->changed);
    server_log(m->front, PITH_LOG_INFO, "model %s unloaded", s->name);
}

/* Unloads s (LOADED): new requests wait from now on, running ones finish first (bounded only by their
 * own limits). Drops and retakes the lock. */
static void unload(models *m, slot *s, const char *why) {
    s->state = SLOT_UNLOADING;
    server_log(m->front, PITH_LOG_INFO, "model %s: unloading (%s)", s->name, why);
    while (s->active > 0) pthread_cond_wait(&m->changed, &m->lock);
    finish_unload(m, s);
}

static bool over_limits(const models *m, size_t extra) {
    if (m->max > 0 && m->n_loaded + m->n_loading + 1 > m->max) return true;
    return m->mem > 0 && m->loaded_bytes + m->loading_bytes + extra > m->mem;
}

/* The least recently used loaded model no request holds, other than keep, or NULL. */
static slot *lru_idle_except(models *m, const slot *keep) {
    slot *best = NULL;
    for (int i = 0; i < m->n; i++) {
        slot *s = m->slots[i];
        if (s != keep && s->state == SLOT_LOADED && s->active == 0 && (!best || s->last_used < best->last_used)) best = s;
    }
    return best;
}

static slot *lru_idle(models *m) { return lru_idle_except(m, NULL); }

/* What loading s will take: its measured size when it was loaded before, else its files (its projector's
 * too) and the pools the engine options ask for (--kv-mem), or the largest pools a model here has taken
 * so far. */
static size_t estimate(const models *m, const slot *s) {
    if (s->bytes) return s->bytes;
    size_t kv = m->front->engine_opt.kv_mem_bytes;
    return files_size(s->path) + projector_estimate(s) + (kv ? kv : m->pool_bytes_seen);
}

typedef enum { START_STARTED, START_WAIT, START_NEVER, START_ERROR } start_result;

/* Starts loading s (UNLOADED or FAILED), unloading idle models to make room. START_WAIT: the room is
 * held by models in use (or loading/unloading): wait for a change. Drops and retakes the lock. */
static start_result start_load(models *m, slot *s) {
    size_t need = estimate(m, s);
    if (m->mem > 0 && need > m->mem) return START_NEVER;
    while (over_limits(m, need)) {
        slot *victim = lru_idle(m);
        if (!victim) return START_WAIT;
        unload(m, victim, "to make room");
        if (s->state != SLOT_UNLOADED && s->state != SLOT_FAILED) return START_WAIT; /* another thread took it */
    }
    load_job *lj = malloc(sizeof *lj);
    if (!lj) return START_ERROR;
    *lj = (load_job){m, s};
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    s->state = SLOT_LOADING;
    s->charged = need;
    m->n_loading++;
    m->loading_bytes += need;
    m->n_loaders++;
    if (pthread_create(&t, &attr, load_thread, lj)) {
        free(lj);
        s->state = SLOT_UNLOADED;
        m->n_loading--;
        m->loading_bytes -= need;
        s->charged = 0;
        m->n_loaders--;
        pthread_attr_destroy(&attr);
        return START_ERROR;
    }
    pthread_attr_destroy(&attr);
    server_log(m->front, PITH_LOG_INFO, "model %s: loading %s", s->name, s->path);
    return START_STARTED;
}

/* ---- the reaper: unloads models idle for longer than --models-ttl ---- */

static void *reaper_thread(void *arg) {
    models *m = arg;
    pthread_mutex_lock(&m->lock);
    while (!m->stopping) {
        server_cond_wait(&m->changed, &m->lock, 1.0);
        double now = server_now();
        for (int i = 0; i < m->n && !m->stopping; i++) {
            slot *s = m->slots[i];
            if (s->state == SLOT_LOADED && s->active == 0 && now - s->last_used >= m->ttl_s) unload(m, s, "idle");
        }
    }
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

/* ---- create, stop, free ---- */

int models_create(pith_server *front, const pith_server_options *o, models **out, pith_err *err) {
    *out = NULL;
    models *m = calloc(1, sizeof *m);
    if (!m) return pith_errf(err, "out of memory");
    m->front = front;
    pthread_mutex_init(&m->lock, NULL);
    pthread_cond_init(&m->changed, NULL);
    m->max = o->models_max;
    m->mem = o->models_mem;
    m->ttl_s = o->models_ttl_s;
    m->load_timeout_s = o->models_load_timeout_s > 0 ? o->models_load_timeout_s : 300;
    int rc = 0;
    for (int i = 0; i < o->n_models && !rc; i++) {
        const pith_server_model *pm = &o->models[i];
        if (!pm->name || !name_ok(pm->name))
            rc = pith_errf(err, "model name '%.200s' is not usable (1 to %d bytes, no '/', no control characters, "
                           "not starting with '.')", pm->name ? pm->name : "", NAME_MAX_BYTES);
        else if (!pm->path || !*pm->path) rc = pith_errf(err, "model '%s' has no path", pm->name);
        else if (find(m, pm->name)) rc = pith_errf(err, "model name '%s' is given twice", pm->name);
        else rc = add_slot(m, pm->name, pm->path, pm->mmproj_path && *pm->mmproj_path ? pm->mmproj_path : NULL, NULL, err);
    }
    if (!rc && o->models_dir && *o->models_dir) {
        struct stat st;
        if (!(m->dir = strdup(o->models_dir))) rc = pith_errf(err, "out of memory");
        else if (stat(m->dir, &st) || !S_ISDIR(st.st_mode)) rc = pith_errf(err, "--models-dir %s is not a directory", m->dir);
        else rc = scan_dir(m, err);
    }
    if (!rc && m->n == 0) rc = pith_errf(err, "no models: the models directory holds no NAME.gguf file and no directory with config.json or a model's GGUF file");
    if (!rc && m->ttl_s > 0) {
        if (pthread_create(&m->reaper, NULL, reaper_thread, m)) rc = pith_errf(err, "cannot start the idle-model thread");
        else m->reaper_started = true;
    }
    if (rc) {
        models_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

void models_stop(models *m, bool stopping) {
    if (!m) return;
    pthread_mutex_lock(&m->lock);
    m->draining = true;
    for (int i = 0; i < m->n; i++) {
        pith_server *srv = m->slots[i]->srv;
        if (!srv) continue;
        atomic_store(&srv->draining, true);
        if (stopping) atomic_store(&srv->stopping, true);
    }
    pthread_cond_broadcast(&m->changed);
    pthread_mutex_unlock(&m->lock);
}

int models_wait_idle(models *m, double until) {
    pthread_mutex_lock(&m->lock);
    int busy;
    for (;;) {
        busy = 0;
        for (int i = 0; i < m->n; i++) busy += m->slots[i]->active;
        double left = until - server_now();
        if (!busy || left <= 0) break;
        server_cond_wait(&m->changed, &m->lock, left < 0.1 ? left : 0.1);
    }
    pthread_mutex_unlock(&m->lock);
    return busy;
}

void models_cancel_all(models *m) {
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < m->n; i++)
        if (m->slots[i]->srv) jobs_cancel_all(m->slots[i]->srv);
    pthread_mutex_unlock(&m->lock);
}

void models_free(models *m) {
    if (!m) return;
    pthread_mutex_lock(&m->lock);
    m->stopping = m->draining = true;
    pthread_cond_broadcast(&m->changed);
    while (m->n_loaders > 0) pthread_cond_wait(&m->changed, &m->lock); /* a load cannot be interrupted */
    pthread_mutex_unlock(&m->lock);
    if (m->reaper_started) pthread_join(m->reaper, NULL);
    for (int i = 0; i < m->n; i++) {
        pith_server_free(m->slots[i]->srv);
        slot_free(m->slots[i]);
    }
    free(m->slots);
    free(m->dir);
    pthread_cond_destroy(&m->changed);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* ---- routing ---- */

/* "a, b, c" (cut short past a few hundred bytes), for a 404's message. */
static void list_names(models *m, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < m->n && len + 8 < cap; i++) {
        int w = snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", m->slots[i]->name);
        if (w < 0 || (size_t)w >= cap - len) {
            snprintf(buf + (cap > 5 ? cap - 5 : 0), 5, "...");
            return;
        }
        len += (size_t)w;
    }
}

static enum MHD_Result unknown_model(models *m, http_request *r, const char *name) {
    char names[600];
    list_names(m, names, sizeof names);
    pthread_mutex_unlock(&m->lock);
    api_error e;
    api_errorf(&e, 404, "model_not_found", "model", "the model '%.200s' does not exist; this server serves: %s", name, names);
    return http_send_error(r, &e);
}

static enum MHD_Result refuse(models *m, http_request *r, int status, const char *code, const char *fmt, const char *name) {
    pthread_mutex_unlock(&m->lock);
    api_error e;
    api_errorf(&e, status, code, status == 400 ? "model" : NULL, fmt, name);
    return http_send_error(r, &e);
}

/* The "model" of r's JSON body: its string, "" when absent, NULL when the body is not a JSON object. */
static char *body_model(http_request *r) {
    cJSON *b = r->body && r->body_len ? cJSON_ParseWithLength(r->body, r->body_len) : cJSON_CreateObject();
    char *name = NULL;
    if (b && cJSON_IsObject(b)) {
        cJSON *v = cJSON_GetObjectItemCaseSensitive(b, "model");
        name = strdup(cJSON_IsString(v) && v->valuestring ? v->valuestring : "");
    }
    cJSON_Delete(b);
    return name;
}

/* Waits for s to reach LOADED (or fail), starting its load when it has none; with the lock held.
 * Returns 0 when loaded, else the status to answer with (*code, *fmt set), or -1 when r's client went. */
static int wait_loaded(models *m, slot *s, http_request *r, double until, const char **code, const char **fmt) {
    double t_entry = server_now();
    for (;;) {
        if (m->draining) {
            *code = "shutting_down";
            *fmt = "the server is shutting down (model '%s' not served)";
            return 503;
        }
        if (s->state == SLOT_LOADED) return 0;
        /* a load this wait saw fail, or (for a request) one that failed recently */
        if (s->state == SLOT_FAILED && (s->failed_at >= t_entry || (r && server_now() - s->failed_at < RETRY_AFTER_FAILURE_S))) {
            *code = "model_load_failed";
            *fmt = "the model '%s' could not be loaded; the server log says why";
            return r ? 503 : 500;
        }
        if (s->state == SLOT_UNLOADED || s->state == SLOT_FAILED) {
            start_result sr = start_load(m, s);
            if (sr == START_NEVER) {
                *code = "model_too_large";
                *fmt = "the model '%s' is larger than --models-mem allows";
                return 503;
            }
            if (sr == START_ERROR) {
                *code = "server_error";
                *fmt = "cannot start loading the model '%s'";
                return 500;
            }
            if (sr == START_STARTED) continue;
        }
        double left = until - server_now();
        if (left <= 0) {
            *code = "model_load_timeout";
            *fmt = "the model '%s' is not loaded yet (waited for it, or for room beside the models in use); retry shortly";
            return 503;
        }
        server_cond_wait(&m->changed, &m->lock, left < 0.1 ? left : 0.1);
        if (r && http_client_gone(r)) return -1;
    }
}

bool models_route(models *m, http_request *r, enum MHD_Result *rc) {
    char *name = body_model(r);
    /* A GET has no body (GET /v1/admin/kv_cache): ?model=NAME names the model instead */
    const char *query = name && !*name ? MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "model") : NULL;
    if (query && *query) {
        free(name);
        name = strdup(query);
        if (!name) {
            api_error e;
            api_errorf(&e, 500, "server_error", NULL, "out of memory");
            *rc = http_send_error(r, &e);
            return false;
        }
    }
    if (!name) {
        api_error e;
        api_errorf(&e, 400, "invalid_json", NULL, "the request body must be a JSON object");
        *rc = http_send_error(r, &e);
        return false;
    }
    pthread_mutex_lock(&m->lock);
    slot *s = NULL;
    if (!*name) {
        if (m->n != 1) {
            free(name);
            *rc = refuse(m, r, 400, "model_required", "%s",
                         "this server serves several models: name one in \"model\" (GET /v1/models lists them)");
            return false;
        }
        s = m->slots[0];
    } else if (!(s = find(m, name))) {
        pith_err ignored;
        scan_dir(m, &ignored); /* a model added to the directory since */
        s = find(m, name);
    }
    if (!s) {
        *rc = unknown_model(m, r, name);
        free(name);
        return false;
    }
    free(name);
    /* Admin calls (sleep, reload...) act on a loaded model and never load one: they are checked
     * against the admin keys only once routed. */
    if (!strncmp(r->url, "/v1/admin/", 10) && s->state != SLOT_LOADED) {
        *rc = refuse(m, r, 409, "model_not_loaded", "the model '%s' is not loaded (POST /v1/admin/models/load loads it)", s->name);
        return false;
    }
    const char *code, *fmt;
    int status = wait_loaded(m, s, r, server_now() + m->load_timeout_s, &code, &fmt);
    if (status < 0) {
        pthread_mutex_unlock(&m->lock);
        *rc = http_client_cancelled(r);
        return false;
    }
    if (status) {
        *rc = refuse(m, r, status, code, fmt, s->name);
        return false;
    }
    s->active++;
    s->last_used = server_now();
    r->slot = s;
    r->srv = s->srv;
    pthread_mutex_unlock(&m->lock);
    return true;
}

void models_release(models *m, http_request *r) {
    slot *s = r->slot;
    pthread_mutex_lock(&m->lock);
    s->active--;
    s->last_used = server_now();
    pthread_cond_broadcast(&m->changed);
    pthread_mutex_unlock(&m->lock);
    r->slot = NULL;
    r->srv = r->home;
}

/* ---- the front's own routes ---- */

static cJSON *slot_json(models *m, slot *s) {
    cJSON *o;
    if (s->state == SLOT_LOADED) {
        o = server_model_json(s->srv);
    } else {
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", s->name);
        cJSON_AddStringToObject(o, "object", "model");
        cJSON_AddNumberToObject(o, "created", (double)m->front->created_unix);
        cJSON_AddStringToObject(o, "owned_by", "pith");
    }
    cJSON *st = cJSON_AddObjectToObject(o, "status");
    cJSON_AddStringToObject(st, "value", state_names[s->state]);
    if (s->state == SLOT_FAILED) cJSON_AddBoolToObject(st, "failed", true);
    return o;
}

enum MHD_Result models_handle_list(models *m, http_request *r) {
    const char *prefix = "/v1/models/";
    pthread_mutex_lock(&m->lock);
    pith_err ignored;
    scan_dir(m, &ignored);
    if (!strncmp(r->url, prefix, strlen(prefix))) {
        const char *id = r->url + strlen(prefix);
        slot *s = find(m, id);
        if (!s) return unknown_model(m, r, id);
        cJSON *o = slot_json(m, s);
        pthread_mutex_unlock(&m->lock);
        return http_send_json(r, 200, o);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    for (int i = 0; i < m->n; i++) cJSON_AddItemToArray(data, slot_json(m, m->slots[i]));
    pthread_mutex_unlock(&m->lock);
    return http_send_json(r, 200, o);
}

enum MHD_Result models_handle_admin(models *m, http_request *r, bool load) {
    pith_server *front = r->home;
    api_error e;
    if (!auth_enabled(&front->admin_keys)) {
        api_errorf(&e, 403, "admin_disabled", NULL, "the admin endpoints are disabled: start the server with --admin-key");
        return http_send_error(r, &e);
    }
    if (!auth_check(&front->admin_keys, http_header(r, MHD_HTTP_HEADER_AUTHORIZATION))) {
        api_errorf(&e, 401, "invalid_admin_key", NULL, "a valid admin key is required (Authorization: Bearer ADMIN_KEY)");
        return http_send_error(r, &e);
    }
    char *name = body_model(r);
    if (!name || !*name) {
        free(name);
        api_errorf(&e, 400, name ? "invalid_request_error" : "invalid_json", "model", "the body must be a JSON object naming the model: {\"model\": NAME}");
        return http_send_error(r, &e);
    }
    pthread_mutex_lock(&m->lock);
    slot *s = find(m, name);
    if (!s) {
        pith_err ignored;
        scan_dir(m, &ignored);
        s = find(m, name);
    }
    if (!s) {
        enum MHD_Result rc = unknown_model(m, r, name);
        free(name);
        return rc;
    }
    free(name);
    double t0 = server_now();
    if (load) {
        const char *code, *fmt;
        int status = wait_loaded(m, s, NULL, t0 + m->load_timeout_s, &code, &fmt);
        if (status) {
            if (s->state == SLOT_FAILED) {
                /* the caller is the operator: the reason helps, and it holds no other client's data */
                char msg[sizeof s->error + 40];
                snprintf(msg, sizeof msg, "cannot load the model: %s", s->error);
                pthread_mutex_unlock(&m->lock);
                api_errorf(&e, 500, "model_load_failed", "model", "%s", msg);
                return http_send_error(r, &e);
            }
            return refuse(m, r, status, code, fmt, s->name);
        }
    } else {
        for (;;) {
            if (s->state == SLOT_LOADED) {
                unload(m, s, "admin request");
                break;
            }
            if (s->state == SLOT_UNLOADED || s->state == SLOT_FAILED) break;
            server_cond_wait(&m->changed, &m->lock, 0.1); /* loading or unloading: wait for the end */
            if (http_client_gone(r)) {
                pthread_mutex_unlock(&m->lock);
                return http_client_cancelled(r);
            }
        }
    }
    cJSON *o = slot_json(m, s);
    cJSON_AddStringToObject(o, "model", s->name);
    cJSON_AddNumberToObject(o, "waited_s", server_now() - t0);
    pthread_mutex_unlock(&m->lock);
    return http_send_json(r, 200, o);
}

static enum MHD_Result admin_models(http_request *r, bool load) {
    if (!r->home->models) {
        api_error e;
        api_errorf(&e, 404, "not_found", NULL, "this server serves one model (several need --models-dir or -m NAME=PATH)");
        return http_send_error(r, &e);
    }
    return models_handle_admin(r->home->models, r, load);
}

enum MHD_Result handle_admin_models_load(http_request *r) { return admin_models(r, true); }
enum MHD_Result handle_admin_models_unload(http_request *r) { return admin_models(r, false); }

/* ---- checks ---- */

int models_check(models *m, pith_err *err) {
    pthread_mutex_lock(&m->lock);
    int rc = check_locked(m, err);
    pthread_mutex_unlock(&m->lock);
    return rc;
}

static int check_locked(models *m, pith_err *err) {
    int n_loaded = 0, n_loading = 0, rc = 0;
    size_t loaded = 0, loading = 0;
    for (int i = 0; i < m->n && !rc; i++) {
        slot *s = m->slots[i];
        bool has = s->state == SLOT_LOADED || s->state == SLOT_UNLOADING;
        if ((s->srv != NULL) != has) rc = pith_errf(err, "model %s: %s with%s a server", s->name, state_names[s->state], s->srv ? "" : "out");
        else if (s->active < 0 || (s->active > 0 && !has)) rc = pith_errf(err, "model %s: %d requests while %s", s->name, s->active, state_names[s->state]);
        if (has) n_loaded++, loaded += s->charged;
        if (s->state == SLOT_LOADING) n_loading++, loading += s->charged;
    }
    if (!rc && (n_loaded != m->n_loaded || loaded != m->loaded_bytes || n_loading != m->n_loading || loading != m->loading_bytes))
        rc = pith_errf(err, "counts: %d loaded (%zu bytes), %d loading (%zu bytes); registry says %d (%zu), %d (%zu)", n_loaded,
                       loaded, n_loading, loading, m->n_loaded, m->loaded_bytes, m->n_loading, m->loading_bytes);
    if (!rc && m->max > 0 && n_loaded + n_loading > m->max && !m->stopping)
        rc = pith_errf(err, "%d models loaded or loading, over --models-max %d", n_loaded + n_loading, m->max);
    return rc;
}

/* ---- /metrics ---- */

enum MHD_Result models_handle_metrics(models *m, http_request *r) {
    buf out = {0};
    pthread_mutex_lock(&m->lock);
    int known = m->n, loaded = m->n_loaded;
    size_t bytes = m->loaded_bytes;
    uint64_t loads = m->loads, unloads = m->unloads, failures = m->failures;
    /* the loaded models' own series; each held (active) so that it cannot unload while being read */
    size_t cap = (size_t)(m->n ? m->n : 1);
    metrics_model *mm = calloc(cap, sizeof *mm);
    pith_engine_stats *st = calloc(cap, sizeof *st);
    metrics_weights *w = calloc(cap, sizeof *w);
    slot **held = calloc(cap, sizeof *held);
    char (*versions)[160] = calloc(cap, sizeof *versions);
    int n = 0;
    for (int i = 0; mm && st && w && held && versions && i < m->n; i++) {
        slot *s = m->slots[i];
        if (s->state != SLOT_LOADED) continue;
        s->active++;
        held[n++] = s;
    }
    pthread_mutex_unlock(&m->lock);
    for (int i = 0; i < n; i++) {
        pith_server *srv = held[i]->srv;
        pith_engine_get_stats(srv->engine, &st[i]);
        w[i].version = server_weight_version(srv, st[i].weight_generation, versions[i], sizeof versions[i]);
        pthread_mutex_lock(&srv->versions_lock);
        w[i].reloads = srv->reloads;
        w[i].last_pause_s = srv->last_pause_s;
        w[i].last_load_s = srv->last_load_s;
        pthread_mutex_unlock(&srv->versions_lock);
        mm[i] = (metrics_model){.name = held[i]->name, .m = &srv->metrics, .st = &st[i], .w = &w[i]};
    }
    if (n > 0) metrics_render_models(mm, n, &out);
    buf_printf(&out, "# HELP pith_models_known Models this server can serve (--models-dir, -m NAME=PATH).\n"
                     "# TYPE pith_models_known gauge\npith_models_known %d\n", known);
    buf_printf(&out, "# HELP pith_models_loaded Models loaded now (and unloading).\n"
                     "# TYPE pith_models_loaded gauge\npith_models_loaded %d\n", loaded);
    buf_printf(&out, "# HELP pith_models_loaded_bytes Bytes the loaded models take: weight files and memory pools.\n"
                     "# TYPE pith_models_loaded_bytes gauge\npith_models_loaded_bytes %zu\n", bytes);
    buf_printf(&out, "# HELP pith_model_loads_total Models loaded since start.\n"
                     "# TYPE pith_model_loads_total counter\npith_model_loads_total %llu\n", (unsigned long long)loads);
    buf_printf(&out, "# HELP pith_model_unloads_total Models unloaded since start (least recently used, idle, admin).\n"
                     "# TYPE pith_model_unloads_total counter\npith_model_unloads_total %llu\n", (unsigned long long)unloads);
    buf_printf(&out, "# HELP pith_model_load_failures_total Model loads that failed.\n"
                     "# TYPE pith_model_load_failures_total counter\npith_model_load_failures_total %llu\n",
               (unsigned long long)failures);
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < n; i++) held[i]->active--;
    pthread_cond_broadcast(&m->changed);
    pthread_mutex_unlock(&m->lock);
    free(mm);
    free(st);
    free(w);
    free(held);
    free(versions);
    enum MHD_Result rc = out.failed ? MHD_NO
                                    : http_send_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", out.data ? out.data : "", out.len);
    buf_free(&out);
    return rc;
}
