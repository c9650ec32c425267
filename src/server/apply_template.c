/* POST /apply-template (llama.cpp's route): renders `messages` with the model's chat template exactly as
 * /v1/chat/completions does (tools, chat_template_kwargs, reasoning_effort, add_generation_prompt) and
 * answers {"prompt": text} without encoding or generating: for clients that tokenize, edit or cache the
 * rendered prompt themselves. BOS is whatever the template writes (encoding may add one: /tokenize with
 * the same body shows the ids). */
#include <stdlib.h>

#include "server/generate.h"
#include "server/handlers.h"

static enum MHD_Result apply_template(http_request *r) {
    pith_server *srv = r->srv;
    enum MHD_Result rc;
    if (gen_refuse_unready(r, &rc)) return rc;
    cJSON *body = gen_parse_body(r, &rc);
    if (!body) return rc;
    api_error e;
    char *text = NULL;
    size_t len = 0;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(body, "model");
    int failed = 0;
    if (!cJSON_IsObject(body))
        failed = api_errorf(&e, 400, "invalid_type", NULL, "the request body must be a JSON object");
    else if (model && !cJSON_IsNull(model) && !cJSON_IsString(model))
        failed = api_errorf(&e, 400, "invalid_type", "model", "'model' must be a string");
    else if (cJSON_IsString(model) && gen_check_model(srv, model->valuestring, &e))
        failed = -1;
    else
        failed = chat_render_text(srv, body, &text, &len, &e);
    cJSON_Delete(body);
    if (failed) {
        free(text);
        return http_send_error(r, &e);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON *s = cJSON_CreateString(text ? text : "");
    free(text);
    if (!o || !s || !cJSON_AddItemToObject(o, "prompt", s)) {
        cJSON_Delete(o);
        cJSON_Delete(s);
        return http_send_error(r, (api_errorf(&e, 500, "internal_error", NULL, "out of memory"), &e));
    }
    return http_send_json(r, 200, o);
}

enum MHD_Result handle_apply_template(http_request *r) {
    enum MHD_Result rc = apply_template(r);
    gen_trim_after(r);
    return rc;
}
