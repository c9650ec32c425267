/* The admin endpoints (POST /v1/admin/reload, pause, resume, sleep, wake, abort; docs/api.md, docs/rl.md)
 * and the weight loading they share. Each needs "Authorization: Bearer ADMIN_KEY" with a key given by
 * --admin-key / --admin-key-file (the API keys do not open them); without admin keys every admin
 * endpoint answers 403. Each answers once what it asked is done. One admin operation runs at a time
 * (srv->admin_lock); generation requests keep being served (or held, while paused) meanwhile. */
#ifndef PITH_SERVER_ADMIN_H
#define PITH_SERVER_ADMIN_H

#include "server/http.h"
#include "server/server_internal.h"

enum MHD_Result handle_admin_reload(http_request *r);
enum MHD_Result handle_admin_pause(http_request *r);
enum MHD_Result handle_admin_resume(http_request *r);
enum MHD_Result handle_admin_sleep(http_request *r);
enum MHD_Result handle_admin_wake(http_request *r);
enum MHD_Result handle_admin_abort(http_request *r);
/* Several models (models.h): load or unload the model the body names ({"model": NAME}). */
enum MHD_Result handle_admin_models_load(http_request *r);
enum MHD_Result handle_admin_models_unload(http_request *r);

/* admin_weights.c */
int admin_load_model(pith_server *srv, const char *path, pith_model **out, pith_err *err);
/* 0 when the weights at path carry no tokenizer or the served one; -1 with err otherwise. */
int admin_check_tokenizer(pith_server *srv, const char *path, pith_err *err);

#endif
