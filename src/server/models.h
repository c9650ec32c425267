/* Several models in one server (docs/api.md, Several models): the registry of the models a server can
 * serve, which of them are loaded, and the routing of a request to one of them by its "model" field.
 *
 * Each loaded model is a whole pith_server of its own with no listener (a "model server": its model,
 * tokenizer, template, engine, jobs and metrics), built by server_create_model; the front server owns
 * the network, the keys, the body budget and this registry. A request for a model-scoped route is
 * handed to its model server by setting r->srv (r->home stays the front), so every handler works on
 * one model as in a one-model server.
 *
 * A slot is UNLOADED, LOADING, LOADED, UNLOADING or FAILED. Invariants (models_check):
 *   - a slot's server is non-NULL exactly when LOADED or UNLOADING (LOADING builds it off the list);
 *   - `active` counts the requests holding the slot's server; it only grows while LOADED, and a server
 *     is freed only when UNLOADING with active == 0, so a request never sees its server freed;
 *   - loaded_bytes and n_loaded are the sums over LOADED and UNLOADING slots (LOADING ones count their
 *     estimate in loading_bytes), and a load starts only when it fits under --models-max and
 *     --models-mem after least-recently-used idle models are unloaded;
 *   - one loader thread runs per LOADING slot; unloads run on the thread that asked (a request, an
 *     admin call, the idle reaper) and wait for the model's running requests.
 * Lock order: models.lock, then a model server's own locks (never the other way). */
#ifndef PITH_SERVER_MODELS_H
#define PITH_SERVER_MODELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pith/server.h"
#include "server/http.h"

typedef struct models models;

/* Builds the registry from the options' models and models_dir (scanned now and again when a request
 * names a model it does not know); starts the idle reaper when models_ttl_s > 0. */
int models_create(pith_server *front, const pith_server_options *o, models **out, pith_err *err);
/* Unloads everything (the front is stopping: requests were cancelled) and frees the registry. */
void models_free(models *m);
/* Marks every loaded model server draining (and stopping, when `stopping`). */
void models_stop(models *m, bool stopping);
/* Waits until no request holds a model or `until` (monotonic seconds) passes; returns those left. */
int models_wait_idle(models *m, double until);
/* Cancels every running generation of every model (the drain deadline passed). */
void models_cancel_all(models *m);

/* Routes r to its model: sets r->srv to the model's server, loading it first if need be (waiting up to
 * the load timeout). Returns true with r->slot set when the handler may run; false when a response was
 * queued (*rc set): 400 no model named while several are served, 404 unknown (with the list), 503 a
 * load that timed out or failed, or the server stopping. */
bool models_route(models *m, http_request *r, enum MHD_Result *rc);
/* Gives back what models_route took; called once the request is complete. */
void models_release(models *m, http_request *r);

/* GET /v1/models[/ID], the admin load/unload endpoints, /health and /metrics for a server of several
 * models (routes in http.c call these when srv->models is set). */
enum MHD_Result models_handle_list(models *m, http_request *r);
enum MHD_Result models_handle_admin(models *m, http_request *r, bool load);
enum MHD_Result models_handle_metrics(models *m, http_request *r);

/* Checks the invariants above; 0 or -1 with err. For tests. */
int models_check(models *m, pith_err *err);

#endif
