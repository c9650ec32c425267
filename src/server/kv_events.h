/* KV-cache events over ZeroMQ (docs/kv-events.md): the engines' prefix-cache changes (pith/engine.h,
 * pith_kv_event) published as vLLM's KVEventBatch messages for prefix-aware routers (llm-d's KV
 * indexer), and GET /v1/admin/kv_cache, an engine's cached blocks under the same hashes.
 *
 * Two parts, so that one process serving several models (models.h) has one publisher as llm-d expects:
 *   - kv_events, the publisher, one per process (owned by the front server): the ZMQ context and
 *     sockets (PUB, and ROUTER for replay), the publishing thread, the one sequence of numbers and the
 *     replay buffer, and the hash options;
 *   - kv_source, one per engine (owned by its server): the engine's sink, the queue from it to the
 *     thread, the map from Pith's block names to published hashes, and its topic, kv@HOST@MODEL (or
 *     --kv-events-topic, which only a one-model server takes: one topic cannot name several models).
 * Only the publishing thread touches the sockets (ZMQ sockets are not thread-safe); a sink runs on its
 * engine's stepping thread and only copies events into its source's queue.
 *
 * Invariants: every published message is [topic, 8-byte big-endian sequence number, msgpack payload]
 * with sequence numbers 0, 1, 2, ... without gaps across all topics together (one batch per engine step
 * that changed that engine's cache); a block is published as stored at most once while live and its
 * removal names the hash it was stored under; the set a subscriber rebuilds from one topic's messages
 * is that engine's named blocks, except blocks whose parent's hash was forgotten (counted:
 * unpublished_blocks). A source of a model server that is freed (its model unloaded) publishes an
 * AllBlocksCleared under its topic as its last message, so subscribers drop that model's blocks; a
 * one-model server's source ends without one (the process is ending), as before.
 * Lifetimes: sources are attached after kv_events_open and freed before kv_events_free. */
#ifndef PITH_SERVER_KV_EVENTS_H
#define PITH_SERVER_KV_EVENTS_H

#include "pith/engine.h"
#include "pith/server.h"
#include "server/http.h"

typedef struct kv_events kv_events;
typedef struct kv_source kv_source;

/* True when Pith was built with libzmq. */
bool kv_events_available(void);
/* Checks and copies the options (at pith_server_create): -1 with err for an unknown hash or a build
 * without libzmq. */
int kv_events_new(const pith_kv_events_options *o, kv_events **out, pith_err *err);
/* True when the options named a topic (--kv-events-topic). */
bool kv_events_has_topic(const kv_events *k);
/* Opens the sockets and starts the publishing thread; again: nothing. Not thread-safe: a server of
 * several models calls it once at pith_server_create, before any model loads (and attaches). */
int kv_events_open(kv_events *k, pith_server *srv, pith_err *err);
/* Opens k if need be and attaches a source for engine e of srv (topic from srv's model name), installing
 * the engine's sink; at pith_server_load, before the engine's thread starts, so no block is named
 * unseen. A model server's source (srv->model_server) will publish a clear when freed. */
int kv_events_start(kv_events *k, pith_server *srv, pith_engine *e, kv_source **out, pith_err *err);
/* Publishes what the source has queued (then its clear, for a model server), detaches and frees it.
 * Call after its engine is freed (the sink then never runs again). NULL: nothing. */
void kv_source_free(kv_source *src);
/* Stops the thread, closes the sockets and frees. Call after every source is freed. NULL: nothing. */
void kv_events_free(kv_events *k);

/* GET /v1/admin/kv_cache (admin key): the published hashes of the blocks r->srv's engine holds now (with
 * several models, the one routed to: ?model=NAME, or the only one served). */
enum MHD_Result handle_admin_kv_cache(http_request *r);

#endif
