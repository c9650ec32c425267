/* KV-cache events over ZeroMQ (docs/kv-events.md): the engine's prefix-cache changes (pith/engine.h,
 * pith_kv_event) published as vLLM's KVEventBatch messages for prefix-aware routers (llm-d's KV
 * indexer), and GET /v1/admin/kv_cache, the engine's cached blocks under the same hashes.
 *
 * Owns the ZMQ context and sockets (PUB, and ROUTER for replay), the publishing thread, the queue from
 * the engine's sink to that thread, the map from Pith's block names to published hashes, and the
 * replay buffer. Only the publishing thread touches the sockets (ZMQ sockets are not thread-safe); the
 * sink runs on the engine's stepping thread and only copies events into the queue.
 *
 * Invariants: every published message is [topic, 8-byte big-endian sequence number, msgpack payload]
 * with sequence numbers 0, 1, 2, ... without gaps (one batch per engine step that changed the cache);
 * a block is published as stored at most once while live and its removal names the hash it was stored
 * under; the set a subscriber rebuilds from every message is the engine's named blocks of the
 * published group, except blocks whose parent's hash was forgotten (counted: unpublished_blocks). */
#ifndef PITH_SERVER_KV_EVENTS_H
#define PITH_SERVER_KV_EVENTS_H

#include "pith/engine.h"
#include "pith/server.h"
#include "server/http.h"

typedef struct kv_events kv_events;

/* True when Pith was built with libzmq. */
bool kv_events_available(void);
/* Checks and copies the options (at pith_server_create): -1 with err for an unknown hash or a build
 * without libzmq. */
int kv_events_new(const pith_kv_events_options *o, kv_events **out, pith_err *err);
/* Opens the sockets, starts the publishing thread and installs the engine's sink (at pith_server_load,
 * before the engine's thread starts, so no block is named unseen). */
int kv_events_start(kv_events *k, pith_server *srv, pith_engine *e, pith_err *err);
/* Publishes what is queued, stops the thread, closes the sockets and frees. Call after the engine is
 * freed (its sink then never runs again). NULL: nothing. */
void kv_events_free(kv_events *k);

/* GET /v1/admin/kv_cache (admin key): the published hashes of the blocks the engine holds now. */
enum MHD_Result handle_admin_kv_cache(http_request *r);

#endif
