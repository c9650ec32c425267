/* KV-cache events over ZeroMQ in vLLM's format (kv_events.h, docs/kv-events.md).
 *
 * Wire format, as vLLM's ZmqEventPublisher sends and llm-d's KV indexer decodes it: each message is
 * three frames [topic, seq (8 bytes, big endian), payload], payload the msgpack of a KVEventBatch in
 * msgspec's array_like form with tagged events:
 *   [ts (float64), [event...], data_parallel_rank (0)]
 *   ["BlockStored", [hash...], parent hash or nil, [token id...], block_size, nil (lora_id),
 *    "GPU" (medium), nil (lora_name)]
 *   ["BlockRemoved", [hash...], "GPU"]
 *   ["AllBlocksCleared"]
 * A BlockStored carries a run of consecutive blocks of one chain (parent: the hash before the first),
 * as vLLM's do; token_ids is their tokens, block_size per block. Hashes are written as msgpack uint64
 * always (msgspec would shorten the rare hash below 2^32; llm-d reads both). The replay socket is a
 * ROUTER: a request [identity, "", start seq (8 bytes)] is answered with [identity, "", seq, payload]
 * for every buffered batch from start on, then [identity, "", -1 (8 bytes), ""]. */
#include "server/kv_events.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef PITH_HAVE_ZMQ
#include <zmq.h>
#endif

#include "server/buf.h"
#include "server/kv_hash.h"

/* Events queued for the publishing thread beyond which the queue is dropped (and a clear published):
 * a subscriber that cannot be kept exact is told to forget rather than left wrong. */
#define KV_QUEUE_MAX_EVENTS (1 << 20)

typedef struct qrec {
    uint8_t type;           /* pith_kv_event_type */
    bool root;
    uint64_t name, parent;
} qrec;

/* One engine step's events, copied by the sink. */
typedef struct qbatch {
    struct qbatch *next;
    double ts;
    int n, block_size;
    qrec *ev;               /* [n] */
    int32_t *tokens;        /* the STORED events' tokens, in order, block_size each */
} qbatch;

/* Pith's block name -> the chain element published for it. Entries outlive their blocks (a name's
 * hash is a function of its tokens, so a stale entry is never wrong) until a sweep drops dead ones: a
 * later block whose parent was an evicted twin of a block still running can then find its parent. */
typedef struct map_entry {
    uint64_t name;          /* 0: empty slot (names are never 0) */
    bool live;              /* published as stored and not removed since */
    kv_digest d;
} map_entry;

typedef struct replay_entry {
    uint64_t seq;
    uint8_t *data;
    size_t len;
} replay_entry;

/* One engine's side (kv_events.h): the queue its sink fills, the map of its block names, its topic. */
struct kv_source {
    struct kv_source *next; /* the publisher's list (under k->slock) */
    kv_events *k;
    char *topic;
    pith_engine *engine;
    bool clear_on_detach;   /* a model going away while the others stay: subscribers drop its blocks */

    /* under k->qlock */
    qbatch *head, *tail;
    long queued;            /* events in the queue */
    bool clear_first;       /* the queue was dropped: publish a clear before what it holds now */
    bool detaching, detached;

    pthread_mutex_t mlock;  /* the map (the publishing thread writes, the admin endpoint reads) */
    map_entry *map;
    size_t map_cap, map_used, map_live;
    uint64_t unpublished;   /* STORED blocks whose parent's hash was unknown */
};

struct kv_events {
    char *endpoint, *replay_endpoint, *topic, *seed;
    kv_hash_algo algo;
    kv_digest none;         /* the roots' parent (vLLM's NONE_HASH) */
    int buffer_steps;

    void *ctx, *pub, *replay;
    pthread_t thread;
    bool started;

    pthread_mutex_t slock;  /* the list of sources; the publishing thread holds it over a round */
    kv_source *sources;

    pthread_mutex_t qlock;  /* every source's queue, shared with the engines' sinks */
    pthread_cond_t qcond;   /* work for the thread */
    pthread_cond_t dcond;   /* a source was detached */
    bool pending;           /* a source has work (set by the sinks and detaches) */
    bool stop;

    pthread_mutex_t seqlock;
    uint64_t batches;       /* messages published (= the next sequence number), all topics together */

    replay_entry *ring;     /* [buffer_steps], the last batches (publishing thread) */
    int ring_n, ring_next;
};

bool kv_events_available(void) {
#ifdef PITH_HAVE_ZMQ
    return true;
#else
    return false;
#endif
}

/* ---- the name map (callers hold mlock) ---- */

static size_t slot_of(const kv_source *k, uint64_t name) {
    uint64_t h = name * 0x9e3779b97f4a7c15ull;
    size_t i = (size_t)(h >> 20) & (k->map_cap - 1);
    while (k->map[i].name && k->map[i].name != name) i = (i + 1) & (k->map_cap - 1);
    return i;
}

static map_entry *map_get(kv_source *k, uint64_t name) {
    if (!k->map_cap) return NULL;
    map_entry *e = &k->map[slot_of(k, name)];
    return e->name ? e : NULL;
}

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* What follows to the end of encode_batch builds what the publishing thread sends: only with ZeroMQ. */
#ifdef PITH_HAVE_ZMQ
/* Rebuilds the table at `cap` slots, keeping dead entries only when keep_dead. 0 or -1. */
static int map_rebuild(kv_source *k, size_t cap, bool keep_dead) {
    map_entry *old = k->map;
    size_t old_cap = k->map_cap;
    map_entry *m = calloc(cap, sizeof *m);
    if (!m) return -1;
    k->map = m;
    k->map_cap = cap;
    k->map_used = 0;
    for (size_t i = 0; i < old_cap; i++) {
        if (!old[i].name || (!keep_dead && !old[i].live)) continue;
        k->map[slot_of(k, old[i].name)] = old[i];
        k->map_used++;
    }
    free(old);
    return 0;
}

/* The entry for name, added (dead) if new. NULL when out of memory. */
static map_entry *map_put(kv_source *k, uint64_t name) {
    if (k->map_cap && k->map[slot_of(k, name)].name) return &k->map[slot_of(k, name)];
    if (2 * (k->map_used + 1) > k->map_cap) {
        /* Dead entries are a memo; beyond four per live one (and a floor) they go. */
        size_t dead = k->map_used - k->map_live;
        bool sweep = dead > 4 * k->map_live + 65536;
        size_t keep = sweep ? k->map_live : k->map_used;
        size_t cap = 1024;
        while (cap < 4 * (keep + 1)) cap *= 2;
        if (map_rebuild(k, cap, !sweep)) return NULL;
    }
    map_entry *e = &k->map[slot_of(k, name)];
    e->name = name;
    e->live = false;
    k->map_used++;
    return e;
}

/* ---- msgpack ---- */

static void mp_byte(buf *b, unsigned v) {
    char c = (char)(unsigned char)v;
    buf_append(b, &c, 1);
}

static void mp_be(buf *b, uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; i--) mp_byte(b, (unsigned)(v >> (8 * i)) & 0xff);
}

static void mp_array(buf *b, uint32_t n) {
    if (n < 16) mp_byte(b, 0x90 | n);
    else if (n < 65536) mp_byte(b, 0xdc), mp_be(b, n, 2);
    else mp_byte(b, 0xdd), mp_be(b, n, 4);
}

static void mp_str(buf *b, const char *s) {
    size_t n = strlen(s);
    if (n < 32) mp_byte(b, 0xa0 | (unsigned)n);
    else if (n < 256) mp_byte(b, 0xd9), mp_be(b, n, 1);
    else mp_byte(b, 0xda), mp_be(b, n, 2); /* tags and "GPU" only: short */
    buf_append(b, s, n);
}

static void mp_uint(buf *b, uint64_t v) {
    if (v < 128) mp_byte(b, (unsigned)v);
    else if (v < 256) mp_byte(b, 0xcc), mp_be(b, v, 1);
    else if (v < 65536) mp_byte(b, 0xcd), mp_be(b, v, 2);
    else if (v <= 0xffffffffull) mp_byte(b, 0xce), mp_be(b, v, 4);
    else mp_byte(b, 0xcf), mp_be(b, v, 8);
}

static void mp_hash(buf *b, uint64_t v) { mp_byte(b, 0xcf), mp_be(b, v, 8); }

static void mp_f64(buf *b, double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    mp_byte(b, 0xcb), mp_be(b, u, 8);
}

/* ---- turning a step's events into one batch ---- */

/* A run being collected: consecutive stored blocks of one chain, or removed blocks. */
typedef struct run {
    int type;               /* 0: none */
    bool has_parent;
    uint64_t parent;
    uint64_t *hashes;
    int n, cap;
    buf tokens;             /* msgpack of the token ids so far */
    int n_tokens;
} run;

static int run_push(run *r, uint64_t h) {
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 16;
        uint64_t *p = realloc(r->hashes, (size_t)cap * sizeof *p);
        if (!p) return -1;
        r->hashes = p;
        r->cap = cap;
    }
    r->hashes[r->n++] = h;
    return 0;
}

/* Writes the run as one event into ev and counts it. */
static void run_flush(run *r, buf *ev, int *n_ev, int block_size) {
    if (r->type == PITH_KV_EVENT_STORED) {
        mp_array(ev, 8);
        mp_str(ev, "BlockStored");
        mp_array(ev, (uint32_t)r->n);
        for (int i = 0; i < r->n; i++) mp_hash(ev, r->hashes[i]);
        if (r->has_parent) mp_hash(ev, r->parent);
        else mp_byte(ev, 0xc0);
        mp_array(ev, (uint32_t)r->n_tokens);
        buf_append(ev, r->tokens.data, r->tokens.len);
        mp_uint(ev, (uint64_t)block_size);
        mp_byte(ev, 0xc0);  /* lora_id */
        mp_str(ev, "GPU");  /* medium: the engine's own KV memory (llm-d's default tier) */
        mp_byte(ev, 0xc0);  /* lora_name */
        (*n_ev)++;
    } else if (r->type == PITH_KV_EVENT_REMOVED) {
        mp_array(ev, 3);
        mp_str(ev, "BlockRemoved");
        mp_array(ev, (uint32_t)r->n);
        for (int i = 0; i < r->n; i++) mp_hash(ev, r->hashes[i]);
        mp_str(ev, "GPU");
        (*n_ev)++;
    }
    r->type = 0;
    r->n = 0;
    r->n_tokens = 0;
    r->tokens.len = 0;
}

static void emit_cleared(buf *ev, int *n_ev) {
    mp_array(ev, 1);
    mp_str(ev, "AllBlocksCleared");
    (*n_ev)++;
}

static void forget_all(kv_source *k) {
    for (size_t i = 0; i < k->map_cap; i++) k->map[i].live = false;
    k->map_live = 0;
}

/* Encodes batch q (clear_first: an AllBlocksCleared before it) into out; updates the map. Returns the
 * number of events (0: nothing to publish), -1 when out of memory (the subscriber must be cleared). */
static int encode_batch(kv_source *k, const qbatch *q, bool clear_first, buf *out) {
    buf ev = {0};
    run r = {0};
    int n_ev = 0, bs = q ? q->block_size : 0, rc = 0;
    pthread_mutex_lock(&k->mlock);
    if (clear_first) {
        forget_all(k);
        emit_cleared(&ev, &n_ev);
    }
    const int32_t *tok = q ? q->tokens : NULL;
    for (int i = 0; q && i < q->n && rc == 0; i++) {
        const qrec *e = &q->ev[i];
        if (e->type == PITH_KV_EVENT_CLEARED) {
            run_flush(&r, &ev, &n_ev, bs);
            forget_all(k);
            emit_cleared(&ev, &n_ev);
        } else if (e->type == PITH_KV_EVENT_REMOVED) {
            map_entry *m = map_get(k, e->name);
            if (!m || !m->live) continue; /* never published (or already cleared) */
            m->live = false;
            k->map_live--;
            if (r.type != PITH_KV_EVENT_REMOVED) run_flush(&r, &ev, &n_ev, bs);
            r.type = PITH_KV_EVENT_REMOVED;
            if (run_push(&r, kv_hash_value(k->k->algo, &m->d))) rc = -1;
        } else if (e->type == PITH_KV_EVENT_STORED) {
            const int32_t *t = tok;
            tok += bs;
            kv_digest parent = k->k->none;
            uint64_t parent_value = 0;
            if (!e->root) {
                map_entry *p = map_get(k, e->parent);
                if (!p) { /* its parent's hash is forgotten: publishing it would be a lie */
                    k->unpublished++;
                    continue;
                }
                parent = p->d;
                parent_value = kv_hash_value(k->k->algo, &p->d);
            }
            map_entry *m = map_put(k, e->name);
            if (!m) {
                rc = -1;
                break;
            }
            kv_hash_block(k->k->algo, &parent, t, bs, e->root && e->parent != 0, e->parent, &m->d);
            if (m->live) continue; /* published already (the same content, named again) */
            m->live = true;
            k->map_live++;
            uint64_t h = kv_hash_value(k->k->algo, &m->d);
            bool continues = r.type == PITH_KV_EVENT_STORED && !e->root && r.n > 0 && r.hashes[r.n - 1] == parent_value;
            if (!continues) {
                run_flush(&r, &ev, &n_ev, bs);
                r.type = PITH_KV_EVENT_STORED;
                r.has_parent = !e->root;
                r.parent = parent_value;
            }
            if (run_push(&r, h)) rc = -1;
            for (int j = 0; j < bs; j++) mp_uint(&r.tokens, (uint32_t)t[j]);
            r.n_tokens += bs;
        }
    }
    if (rc == 0) run_flush(&r, &ev, &n_ev, bs);
    pthread_mutex_unlock(&k->mlock);
    if (rc || ev.failed || r.tokens.failed) rc = -1;
    else if (n_ev > 0) {
        mp_array(out, 3);
        mp_f64(out, q ? q->ts : wall_s()); /* a clear alone: now (llm-d reads the time) */
        mp_array(out, (uint32_t)n_ev);
        buf_append(out, ev.data, ev.len);
        mp_uint(out, 0); /* data_parallel_rank */
        rc = out->failed ? -1 : n_ev;
    }
    buf_free(&ev);
    buf_free(&r.tokens);
    free(r.hashes);
    return rc;
}
#endif

/* ---- the engine's side: copy and queue ---- */

static void qbatch_free(qbatch *q) {
    if (!q) return;
    free(q->ev);
    free(q->tokens);
    free(q);
}

static void drop_queue(kv_source *k) {
    for (qbatch *q = k->head, *next; q; q = next) {
        next = q->next;
        qbatch_free(q);
    }
    k->head = k->tail = NULL;
    k->queued = 0;
}

static void on_events(void *user, const pith_kv_event *ev, int n) {
    kv_source *k = user;
    int n_stored = 0, bs = 0;
    for (int i = 0; i < n; i++) {
        if (ev[i].type != PITH_KV_EVENT_STORED) continue;
        n_stored++;
        bs = ev[i].n_tokens;
    }
    qbatch *q = calloc(1, sizeof *q);
    if (q) {
        q->ts = wall_s();
        q->n = n;
        q->block_size = bs;
        q->ev = malloc((size_t)n * sizeof *q->ev);
        q->tokens = malloc((size_t)(n_stored ? n_stored : 1) * (size_t)(bs ? bs : 1) * sizeof *q->tokens);
    }
    if (q && q->ev && q->tokens) {
        int32_t *t = q->tokens;
        for (int i = 0; i < n; i++) {
            q->ev[i] = (qrec){.type = (uint8_t)ev[i].type, .root = ev[i].root, .name = ev[i].block, .parent = ev[i].parent};
            if (ev[i].type == PITH_KV_EVENT_STORED) {
                memcpy(t, ev[i].tokens, (size_t)bs * sizeof *t);
                t += bs;
            }
        }
    } else {
        qbatch_free(q);
        q = NULL;
    }
    pthread_mutex_lock(&k->k->qlock);
    if (!q || k->queued + n > KV_QUEUE_MAX_EVENTS) {
        /* What is queued and this step's events are lost: a clear replaces them all. */
        drop_queue(k);
        k->clear_first = true;
        qbatch_free(q);
    } else {
        if (k->tail) k->tail->next = q;
        else k->head = q;
        k->tail = q;
        k->queued += n;
    }
    k->k->pending = true;
    pthread_cond_signal(&k->k->qcond);
    pthread_mutex_unlock(&k->k->qlock);
}

/* ---- the publishing thread ---- */

#ifdef PITH_HAVE_ZMQ
static void be64(uint8_t out[8], uint64_t v) {
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)(v >> (56 - 8 * i));
}

static void keep_for_replay(kv_events *k, uint64_t seq, const buf *payload) {
    if (!k->ring) return;
    uint8_t *copy = malloc(payload->len ? payload->len : 1);
    if (!copy) return; /* a replay then misses it; the live stream had it */
    memcpy(copy, payload->data, payload->len);
    replay_entry *slot = &k->ring[k->ring_next];
    free(slot->data);
    *slot = (replay_entry){.seq = seq, .data = copy, .len = payload->len};
    k->ring_next = (k->ring_next + 1) % k->buffer_steps;
    if (k->ring_n < k->buffer_steps) k->ring_n++;
}

/* Sends one message under the source's topic with the next number of the one sequence all topics
 * share (only the publishing thread sends, so numbers go out in order). */
static void publish(kv_source *src, const buf *payload) {
    kv_events *k = src->k;
    uint8_t seq[8];
    pthread_mutex_lock(&k->seqlock);
    uint64_t s = k->batches++;
    pthread_mutex_unlock(&k->seqlock);
    be64(seq, s);
    zmq_send(k->pub, src->topic, strlen(src->topic), ZMQ_SNDMORE);
    zmq_send(k->pub, seq, 8, ZMQ_SNDMORE);
    zmq_send(k->pub, payload->data, payload->len, 0); /* a PUB socket drops rather than blocks */
    keep_for_replay(k, s, payload);
}

/* One replay request, if a well-formed one is waiting. */
static void serve_replay(kv_events *k) {
    uint8_t frames[3][256];
    int sizes[3], n = 0, more = 1;
    size_t more_len = sizeof more;
    while (more) {
        uint8_t scratch[256];
        int got = zmq_recv(k->replay, n < 3 ? frames[n] : scratch, 256, ZMQ_DONTWAIT);
        if (got < 0) return;
        if (n < 3) sizes[n] = got;
        n++;
        if (zmq_getsockopt(k->replay, ZMQ_RCVMORE, &more, &more_len)) return;
    }
    if (n != 3 || sizes[0] > 255 || sizes[1] != 0 || sizes[2] != 8) return; /* not [identity, "", seq] */
    uint64_t start = 0;
    for (int i = 0; i < 8; i++) start = start << 8 | frames[2][i];
    int first = (k->ring_next - k->ring_n + k->buffer_steps) % (k->buffer_steps ? k->buffer_steps : 1);
    for (int i = 0; i < k->ring_n; i++) {
        const replay_entry *e = &k->ring[(first + i) % k->buffer_steps];
        if (e->seq < start) continue;
        uint8_t seq[8];
        be64(seq, e->seq);
        zmq_send(k->replay, frames[0], (size_t)sizes[0], ZMQ_SNDMORE);
        zmq_send(k->replay, "", 0, ZMQ_SNDMORE);
        zmq_send(k->replay, seq, 8, ZMQ_SNDMORE);
        zmq_send(k->replay, e->data, e->len, 0);
    }
    uint8_t end[8];
    be64(end, UINT64_MAX); /* -1 as a signed 64-bit integer: the end marker */
    zmq_send(k->replay, frames[0], (size_t)sizes[0], ZMQ_SNDMORE);
    zmq_send(k->replay, "", 0, ZMQ_SNDMORE);
    zmq_send(k->replay, end, 8, ZMQ_SNDMORE);
    zmq_send(k->replay, "", 0, 0);
}

static void publish_batch(kv_source *src, const qbatch *q, bool clear_first) {
    buf payload = {0};
    int rc = encode_batch(src, q, clear_first, &payload);
    if (rc < 0) { /* out of memory: the subscriber is told to start over */
        payload.len = 0;
        payload.failed = false;
        rc = encode_batch(src, NULL, true, &payload);
    }
    if (rc > 0) publish(src, &payload);
    buf_free(&payload);
}

/* Publishes what src has queued; a detaching source (its engine is freed: nothing more comes) also
 * gets its AllBlocksCleared when asked, and is then marked detached for kv_source_free. Called by the
 * publishing thread with slock held, so src stays on the list meanwhile. */
static void drain_source(kv_events *k, kv_source *src) {
    pthread_mutex_lock(&k->qlock);
    qbatch *list = src->head;
    bool clear_first = src->clear_first, detaching = src->detaching && !src->detached;
    src->head = src->tail = NULL;
    src->queued = 0;
    src->clear_first = false;
    pthread_mutex_unlock(&k->qlock);
    if (clear_first && !list) publish_batch(src, NULL, true);
    for (qbatch *q = list, *next; q; q = next) {
        next = q->next;
        publish_batch(src, q, clear_first && q == list);
        qbatch_free(q);
    }
    if (!detaching) return;
    if (src->clear_on_detach) publish_batch(src, NULL, true);
    pthread_mutex_lock(&k->qlock);
    src->detached = true;
    pthread_cond_broadcast(&k->dcond);
    pthread_mutex_unlock(&k->qlock);
}

static void *publisher(void *arg) {
    kv_events *k = arg;
    for (;;) {
        if (k->replay) {
            zmq_pollitem_t it = {.socket = k->replay, .events = ZMQ_POLLIN};
            if (zmq_poll(&it, 1, 10) > 0) serve_replay(k); /* 10 ms: the latency a batch may wait */
        }
        pthread_mutex_lock(&k->qlock);
        if (!k->pending && !k->stop && !k->replay) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&k->qcond, &k->qlock, &ts);
        }
        bool stop = k->stop;
        k->pending = false; /* work queued from here on sets it again: the next round takes it */
        pthread_mutex_unlock(&k->qlock);
        pthread_mutex_lock(&k->slock);
        for (kv_source *src = k->sources; src; src = src->next) drain_source(k, src);
        pthread_mutex_unlock(&k->slock);
        if (stop) break; /* set after every source is gone: nothing more comes */
    }
    return NULL;
}

static bool binds(const char *ep) {
    return strchr(ep, '*') || strstr(ep, "::") || !strncmp(ep, "ipc://", 6) || !strncmp(ep, "inproc://", 9);
}

static int open_sockets(kv_events *k, pith_err *err) {
    if (!(k->ctx = zmq_ctx_new())) return pith_errf(err, "kv events: cannot create a ZeroMQ context");
    int hwm = 100000, linger = 500;
    k->pub = zmq_socket(k->ctx, ZMQ_PUB);
    if (!k->pub) return pith_errf(err, "kv events: cannot create a ZeroMQ socket: %s", zmq_strerror(zmq_errno()));
    zmq_setsockopt(k->pub, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(k->pub, ZMQ_LINGER, &linger, sizeof linger);
    if ((binds(k->endpoint) ? zmq_bind : zmq_connect)(k->pub, k->endpoint))
        return pith_errf(err, "kv events: cannot %s %s: %s", binds(k->endpoint) ? "bind" : "connect to", k->endpoint,
                         zmq_strerror(zmq_errno()));
    if (k->replay_endpoint) {
        k->replay = zmq_socket(k->ctx, ZMQ_ROUTER);
        if (!k->replay) return pith_errf(err, "kv events: cannot create a ZeroMQ socket: %s", zmq_strerror(zmq_errno()));
        zmq_setsockopt(k->replay, ZMQ_LINGER, &linger, sizeof linger);
        if (zmq_bind(k->replay, k->replay_endpoint))
            return pith_errf(err, "kv events: cannot bind the replay socket to %s: %s", k->replay_endpoint,
                             zmq_strerror(zmq_errno()));
        if (!(k->ring = calloc((size_t)k->buffer_steps, sizeof *k->ring)))
            return pith_errf(err, "kv events: out of memory for the replay buffer");
    }
    return 0;
}

static void close_sockets(kv_events *k) {
    if (k->pub) zmq_close(k->pub);
    if (k->replay) zmq_close(k->replay);
    if (k->ctx) zmq_ctx_term(k->ctx); /* waits up to the linger for the last messages to go out */
    k->pub = k->replay = k->ctx = NULL;
}
#endif

static char *dup_or(const char *s, const char *dflt) { return strdup(s ? s : dflt); }

int kv_events_new(const pith_kv_events_options *o, kv_events **out, pith_err *err) {
    *out = NULL;
    kv_hash_algo algo;
    if (kv_hash_parse(o->hash, &algo))
        return pith_errf(err, "kv events: unknown block hash '%.64s' (sha256_cbor or sha256_cbor_64bit)", o->hash);
    if (!o->endpoint || !*o->endpoint) return pith_errf(err, "kv events: no endpoint");
    if (o->buffer_steps < 0) return pith_errf(err, "kv events: the replay buffer must not be negative");
    if (!kv_events_available())
        return pith_errf(err, "kv events need ZeroMQ, and this pith was built without libzmq (install libzmq3-dev and rebuild)");
    kv_events *k = calloc(1, sizeof *k);
    if (!k) return pith_errf(err, "out of memory");
    pthread_mutex_init(&k->slock, NULL);
    pthread_mutex_init(&k->qlock, NULL);
    pthread_cond_init(&k->qcond, NULL);
    pthread_cond_init(&k->dcond, NULL);
    pthread_mutex_init(&k->seqlock, NULL);
    k->algo = algo;
    k->buffer_steps = o->buffer_steps ? o->buffer_steps : 10000;
    k->endpoint = strdup(o->endpoint);
    k->replay_endpoint = o->replay_endpoint && *o->replay_endpoint ? strdup(o->replay_endpoint) : NULL;
    k->topic = o->topic ? strdup(o->topic) : NULL; /* NULL: each source's is made from its model's name */
    k->seed = dup_or(o->hash_seed, "");
    if (!k->endpoint || !k->seed || (o->topic && !k->topic) || (o->replay_endpoint && *o->replay_endpoint && !k->replay_endpoint)) {
        kv_events_free(k);
        return pith_errf(err, "out of memory");
    }
    kv_hash_seed(algo, k->seed, &k->none);
    *out = k;
    return 0;
}

bool kv_events_has_topic(const kv_events *k) { return k->topic != NULL; }

int kv_events_open(kv_events *k, pith_server *srv, pith_err *err) {
#ifdef PITH_HAVE_ZMQ
    if (k->started) return 0;
    if (open_sockets(k, err)) {
        close_sockets(k);
        return -1;
    }
    if (pthread_create(&k->thread, NULL, publisher, k)) {
        close_sockets(k);
        return pith_errf(err, "kv events: cannot start the publishing thread");
    }
    k->started = true;
    /* Where it really is (a port of 0 or * is chosen by the system), for the operator and for tests. */
    char at[256] = "", replay_at[256] = "";
    size_t len = sizeof at;
    zmq_getsockopt(k->pub, ZMQ_LAST_ENDPOINT, at, &len);
    len = sizeof replay_at;
    if (k->replay) zmq_getsockopt(k->replay, ZMQ_LAST_ENDPOINT, replay_at, &len);
    server_log(srv, PITH_LOG_INFO, "kv events: publishing on %s%s%s (hash %s)", *at ? at : k->endpoint,
               k->replay ? ", replay on " : "", replay_at, kv_hash_name(k->algo));
    return 0;
#else
    (void)k, (void)srv;
    return pith_errf(err, "kv events need ZeroMQ, and this pith was built without libzmq");
#endif
}

/* Frees src's memory (it is off the list and its sink runs no more). */
static void source_destroy(kv_source *src) {
    drop_queue(src);
    free(src->map);
    free(src->topic);
    pthread_mutex_destroy(&src->mlock);
    free(src);
}

int kv_events_start(kv_events *k, pith_server *srv, pith_engine *e, kv_source **out, pith_err *err) {
    *out = NULL;
    if (kv_events_open(k, srv, err)) return -1;
    kv_source *src = calloc(1, sizeof *src);
    if (!src) return pith_errf(err, "out of memory");
    pthread_mutex_init(&src->mlock, NULL);
    src->k = k;
    src->clear_on_detach = srv->model_server;
    if (k->topic) {
        src->topic = strdup(k->topic);
    } else {
        char host[256] = "localhost";
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = 0;
        size_t n = strlen(host) + strlen(srv->model_name) + 8;
        if ((src->topic = malloc(n))) snprintf(src->topic, n, "kv@%s@%s", host, srv->model_name);
    }
    if (!src->topic) {
        source_destroy(src);
        return pith_errf(err, "out of memory");
    }
    /* On the list before the sink is in, so the thread sees whatever the sink queues. */
    pthread_mutex_lock(&k->slock);
    src->next = k->sources;
    k->sources = src;
    pthread_mutex_unlock(&k->slock);
    if (pith_engine_set_kv_event_sink(e, on_events, src, err)) {
        kv_source_free(src);
        return pith_err_prefix(err, "kv events");
    }
    src->engine = e;
    server_log(srv, PITH_LOG_INFO, "kv events: model %s publishes under topic %s", srv->model_name, src->topic);
    *out = src;
    return 0;
}

void kv_source_free(kv_source *src) {
    if (!src) return;
    kv_events *k = src->k;
    /* The thread publishes what is queued (and the clear), then marks it; it runs until every source
     * is gone (kv_events_free comes after), so the wait ends. */
    pthread_mutex_lock(&k->qlock);
    src->detaching = true;
    k->pending = true;
    pthread_cond_signal(&k->qcond);
    while (k->started && !src->detached) pthread_cond_wait(&k->dcond, &k->qlock);
    pthread_mutex_unlock(&k->qlock);
    pthread_mutex_lock(&k->slock);
    for (kv_source **p = &k->sources; *p; p = &(*p)->next) {
        if (*p == src) {
            *p = src->next;
            break;
        }
    }
    pthread_mutex_unlock(&k->slock);
    source_destroy(src);
}

void kv_events_free(kv_events *k) {
    if (!k) return;
#ifdef PITH_HAVE_ZMQ
    if (k->started) {
        pthread_mutex_lock(&k->qlock);
        k->stop = true;
        k->pending = true;
        pthread_cond_signal(&k->qcond);
        pthread_mutex_unlock(&k->qlock);
        pthread_join(k->thread, NULL);
    }
    close_sockets(k);
#endif
    for (kv_source *src = k->sources, *next; src; src = next) { /* none when used as documented */
        next = src->next;
        source_destroy(src);
    }
    for (int i = 0; k->ring && i < k->buffer_steps; i++) free(k->ring[i].data);
    free(k->ring);
    free(k->endpoint);
    free(k->replay_endpoint);
    free(k->topic);
    free(k->seed);
    pthread_mutex_destroy(&k->slock);
    pthread_mutex_destroy(&k->qlock);
    pthread_cond_destroy(&k->qcond);
    pthread_cond_destroy(&k->dcond);
    pthread_mutex_destroy(&k->seqlock);
    free(k);
}

/* ---- GET /v1/admin/kv_cache ---- */

typedef struct dump {
    pith_kv_event *ev;      /* copies; tokens point into `tokens` */
    int32_t *tokens;
    struct named { uint64_t name; int idx; } *by_name; /* sorted by name */
    int n, bs;
    bool failed;
} dump;

static int by_name_cmp(const void *a, const void *b) {
    uint64_t x = ((const struct named *)a)->name, y = ((const struct named *)b)->name;
    return x < y ? -1 : x > y;
}

/* Index of the block named `name` in d, or -1. */
static int dump_find(const dump *d, uint64_t name) {
    int lo = 0, hi = d->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        uint64_t x = d->by_name[mid].name;
        if (x == name) return d->by_name[mid].idx;
        if (x < name) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

static void on_dump(void *user, const pith_kv_event *ev, int n) {
    dump *d = user;
    d->n = n;
    d->bs = n ? ev[0].n_tokens : 0;
    d->ev = malloc((size_t)(n ? n : 1) * sizeof *d->ev);
    d->tokens = malloc((size_t)(n ? n : 1) * (size_t)(d->bs ? d->bs : 1) * sizeof *d->tokens);
    d->by_name = malloc((size_t)(n ? n : 1) * sizeof *d->by_name);
    if (!d->ev || !d->tokens || !d->by_name) {
        d->failed = true;
        return;
    }
    for (int i = 0; i < n; i++) {
        d->ev[i] = ev[i];
        memcpy(&d->tokens[(size_t)i * d->bs], ev[i].tokens, (size_t)d->bs * sizeof *d->tokens);
        d->ev[i].tokens = &d->tokens[(size_t)i * d->bs];
        d->by_name[i] = (struct named){.name = ev[i].block, .idx = i};
    }
    qsort(d->by_name, (size_t)n, sizeof *d->by_name, by_name_cmp);
}

/* The digest of block i of d, from the blocks' own tokens and parents (parents outside the dump from
 * the map's memo). false when a parent's hash is unknown. */
static bool dump_digest(kv_source *k, const dump *d, int i, kv_digest *done, uint8_t *state, int *stack) {
    int top = 0;
    stack[top++] = i;
    while (top > 0) {
        int j = stack[top - 1];
        if (state[j] >= 2) {
            top--;
            continue;
        }
        const pith_kv_event *e = &d->ev[j];
        kv_digest parent = k->k->none;
        if (!e->root) {
            int p = dump_find(d, e->parent);
            if (p >= 0 && state[p] == 3) {
                state[j] = 3;
                top--;
                continue;
            }
            if (p >= 0 && state[p] != 2) {
                if (state[p] == 1) { /* a cycle cannot happen with chain hashes; refuse rather than loop */
                    state[j] = 3;
                    top--;
                    continue;
                }
                state[j] = 1;
                state[p] = 1;
                stack[top++] = p;
                continue;
            }
            if (p >= 0) {
                parent = done[p];
            } else {
                pthread_mutex_lock(&k->mlock);
                map_entry *m = map_get(k, e->parent);
                if (m) parent = m->d;
                pthread_mutex_unlock(&k->mlock);
                if (!m) {
                    state[j] = 3;
                    top--;
                    continue;
                }
            }
        }
        kv_hash_block(k->k->algo, &parent, e->tokens, e->n_tokens, e->root && e->parent != 0, e->parent, &done[j]);
        state[j] = 2;
        top--;
    }
    return state[i] == 2;
}

enum MHD_Result handle_admin_kv_cache(http_request *r) {
    pith_server *srv = r->srv;
    api_error e;
    if (!auth_enabled(&srv->admin_keys))
        return http_send_error(r, (api_errorf(&e, 403, "admin_disabled", NULL, "the admin endpoints are disabled: start the server with --admin-key"), &e));
    if (!auth_check(&srv->admin_keys, http_header(r, MHD_HTTP_HEADER_AUTHORIZATION)))
        return http_send_error(r, (api_errorf(&e, 401, "invalid_admin_key", NULL, "a valid admin key is required (Authorization: Bearer ADMIN_KEY)"), &e));
    if (!atomic_load(&srv->ready))
        return http_send_error(r, (api_errorf(&e, 503, "model_not_ready", NULL, "the model is still loading; retry shortly"), &e));
    kv_source *k = srv->kv_source;
    if (!k || !k->engine)
        return http_send_error(r, (api_errorf(&e, 404, "kv_events_off", NULL, "KV-cache events are off (start the server with --kv-events)"), &e));
    dump d = {0};
    pith_err err;
    if (pith_engine_kv_cache_blocks(k->engine, on_dump, &d, &err) || d.failed) {
        free(d.ev);
        free(d.tokens);
        free(d.by_name);
        server_log(srv, PITH_LOG_ERROR, "kv_cache: %s", d.failed ? "out of memory" : err.msg);
        return http_send_error(r, (api_errorf(&e, 500, "internal_error", NULL, "the cache could not be read"), &e));
    }
    kv_digest *done = malloc((size_t)(d.n ? d.n : 1) * sizeof *done);
    uint8_t *state = calloc((size_t)(d.n ? d.n : 1), 1);
    int *stack = malloc((size_t)(d.n ? d.n : 1) * sizeof *stack);
    cJSON *o = cJSON_CreateObject(), *hashes = cJSON_CreateArray();
    int unresolved = 0;
    for (int i = 0; done && state && stack && i < d.n; i++) {
        if (!dump_digest(k, &d, i, done, state, stack)) {
            unresolved++;
            continue;
        }
        char s[24];
        snprintf(s, sizeof s, "%llu", (unsigned long long)kv_hash_value(k->k->algo, &done[i]));
        cJSON_AddItemToArray(hashes, cJSON_CreateString(s));
    }
    pthread_mutex_lock(&k->k->seqlock);
    uint64_t batches = k->k->batches; /* every topic's: the sequence numbers are shared */
    pthread_mutex_unlock(&k->k->seqlock);
    pthread_mutex_lock(&k->mlock);
    uint64_t unpublished = k->unpublished;
    pthread_mutex_unlock(&k->mlock);
    cJSON_AddStringToObject(o, "object", "kv_cache");
    cJSON_AddStringToObject(o, "hash", kv_hash_name(k->k->algo));
    cJSON_AddStringToObject(o, "topic", k->topic);
    cJSON_AddNumberToObject(o, "block_size", d.bs);
    cJSON_AddNumberToObject(o, "blocks", d.n);
    cJSON_AddNumberToObject(o, "unresolved", unresolved);
    cJSON_AddNumberToObject(o, "published_batches", (double)batches);
    cJSON_AddNumberToObject(o, "unpublished_blocks", (double)unpublished);
    cJSON_AddItemToObject(o, "hashes", hashes);
    bool ok = done && state && stack;
    free(done);
    free(state);
    free(stack);
    free(d.ev);
    free(d.tokens);
    free(d.by_name);
    if (!ok) {
        cJSON_Delete(o);
        return http_send_error(r, (api_errorf(&e, 500, "internal_error", NULL, "out of memory"), &e));
    }
    return http_send_json(r, 200, o);
}
