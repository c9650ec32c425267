/* POST /infill (llama.cpp's route and fields): fill-in-the-middle for code models with FIM tokens.
 * input_prefix (text before the cursor), input_suffix (text after it), input_extra (other files, a list
 * of {"filename", "text"}) and prompt (text already written after the cursor, placed after the middle
 * token) become [BOS] [extra] <PRE> input_prefix <SUF> input_suffix <MID> prompt (fim_build,
 * completions.c), which is generated from with the /v1/completions parameters (max_tokens, or llama.cpp's
 * n_predict; temperature, stop, stream...) and answered in the /v1/completions shape. A model without
 * FIM tokens answers 400. */
#include <stdlib.h>
#include <string.h>

#include "server/generate.h"
#include "server/handlers.h"

#define MAX_EXTRA 1024

static int get_text(const cJSON *body, const char *name, const char **out, api_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, name);
    *out = "";
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v)) return api_errorf(err, 400, "invalid_type", name, "'%s' must be a string", name);
    *out = v->valuestring;
    return 0;
}

static int check_extra(const cJSON *extra, api_error *err) {
    if (!extra || cJSON_IsNull(extra)) return 0;
    if (!cJSON_IsArray(extra))
        return api_errorf(err, 400, "invalid_type", "input_extra", "'input_extra' must be a list of {\"filename\", \"text\"}");
    if (cJSON_GetArraySize(extra) > MAX_EXTRA)
        return api_errorf(err, 400, "invalid_value", "input_extra", "at most %d input_extra chunks", MAX_EXTRA);
    int i = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, extra) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "filename");
        const cJSON *tx = cJSON_GetObjectItemCaseSensitive(c, "text");
        if (!cJSON_IsObject(c) || !cJSON_IsString(tx) || (fn && !cJSON_IsNull(fn) && !cJSON_IsString(fn)))
            return api_errorf(err, 400, "invalid_value", "input_extra",
                              "input_extra[%d] must be {\"text\": string, \"filename\": string (optional)}", i);
        i++;
    }
    return 0;
}

/* llama.cpp's n_predict as max_tokens, unless max_tokens is given (-1 and 0: not given). */
static int map_n_predict(cJSON *body, api_error *err) {
    const cJSON *np = cJSON_GetObjectItemCaseSensitive(body, "n_predict");
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(body, "max_tokens");
    if (!np || cJSON_IsNull(np) || (mt && !cJSON_IsNull(mt))) return 0;
    int64_t n;
    if (!json_get_int(np, &n) || n < -1 || n > (1 << 30))
        return api_errorf(err, 400, "invalid_value", "n_predict", "'n_predict' must be an integer, -1 or more");
    if (n <= 0) return 0;
    cJSON_DeleteItemFromObjectCaseSensitive(body, "max_tokens");
    if (!cJSON_AddNumberToObject(body, "max_tokens", (double)n)) return api_errorf(err, 500, "internal_error", NULL, "out of memory");
    return 0;
}

static enum MHD_Result infill(http_request *r) {
    enum MHD_Result rc;
    if (gen_refuse_unready(r, &rc)) return rc;
    cJSON *body = gen_parse_body(r, &rc);
    if (!body) return rc;
    gen_params p;
    memset(&p, 0, sizeof p);
    gen_prompt *prompt = calloc(1, sizeof *prompt);
    api_error e;
    const char *prefix, *suffix, *middle;
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(body, "input_extra");
    int failed = 0;
    if (!prompt) failed = api_errorf(&e, 500, "internal_error", NULL, "out of memory");
    else if (!cJSON_IsObject(body)) failed = api_errorf(&e, 400, "invalid_type", NULL, "the request body must be a JSON object");
    else
        failed = map_n_predict(body, &e) || gen_params_parse(body, GEN_COMPLETION, &p, &e) ||
                 gen_check_model(r->srv, p.model, &e) || fim_check(r->srv, NULL, &e) ||
                 get_text(body, "input_prefix", &prefix, &e) || get_text(body, "input_suffix", &suffix, &e) ||
                 get_text(body, "prompt", &middle, &e) || check_extra(extra, &e) || gen_params_compile(r->srv, &p, &e) ||
                 fim_build(r->srv, prefix, suffix, cJSON_IsArray(extra) ? extra : NULL, middle, prompt, &e);
    if (failed) {
        gen_prompts_free(prompt, prompt ? 1 : 0);
        gen_params_free(&p);
        cJSON_Delete(body);
        return http_send_error(r, &e);
    }
    p.model = NULL; /* points into the body, freed next */
    cJSON_Delete(body);
    return gen_run(r, GEN_COMPLETION, &p, prompt, 1);
}

enum MHD_Result handle_infill(http_request *r) {
    enum MHD_Result rc = infill(r);
    gen_trim_after(r);
    return rc;
}
