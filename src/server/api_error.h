/* Errors as clients see them: OpenAI's {"error": {"message", "type", "param", "code"}} with an HTTP
 * status. Messages are written here or by request validation, never copied from library errors, so no
 * path, pointer or internal detail reaches a client. */
#ifndef PITH_SERVER_API_ERROR_H
#define PITH_SERVER_API_ERROR_H

#include <cjson/cJSON.h>

typedef struct api_error {
    int status;           /* HTTP status: 400, 401, 403, 404, 405, 409, 413, 415, 429, 500, 503, 504 */
    const char *code;     /* machine-readable code, or NULL for JSON null */
    char param[64];       /* the offending request field, or "" for JSON null */
    char message[400];
} api_error;

/* Fills e and returns -1 (for `return api_errorf(...)`). param and code may be NULL. */
int api_errorf(api_error *e, int status, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The error "type" OpenAI uses for a status. */
const char *api_error_type(int status);
/* {"error": {...}}; NULL when out of memory. */
cJSON *api_error_json(const api_error *e);

#endif
