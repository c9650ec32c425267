/* Server log lines: a level threshold, text or JSON output, and typed fields.
 *
 * A log_ctx belongs to whoever logs (the server owns one, `pith serve` another for its own lines);
 * there is no global state. A line is a message plus fields:
 *   text: "MSG key=value key=value"  (values holding spaces, '"', '=' or '\\' are quoted); lines above
 *         info start with "error: " or "warning: ", debug lines with "debug: ". The sink adds the time.
 *         In the message and every value, control characters (C0, DEL, C1) and invalid UTF-8 are
 *         written as \n, \r, \t or \xNN: client data (a request path) cannot forge a line.
 *   json: {"ts":"2026-01-31T12:00:00.000Z","level":"info","msg":"MSG","key":value,...} on one line
 *         (numbers as JSON numbers; bytes outside ASCII are escaped as \u00XX so the line is always
 *         valid JSON).
 * Fields that would not fit the line's fixed buffers are left out whole, never cut. */
#ifndef PITH_SERVER_LOG_H
#define PITH_SERVER_LOG_H

#include <stdbool.h>
#include <stddef.h>

#include "pith/server.h" /* PITH_LOG_* */

typedef struct log_ctx {
    int level;   /* PITH_LOG_ERROR .. PITH_LOG_DEBUG; 0 counts as PITH_LOG_INFO */
    bool json;
    void (*sink)(void *user, const char *line); /* NULL: nothing is logged */
    void *user;
} log_ctx;

typedef struct log_fields {
    char text[1536];
    size_t tn;
    char json[2048];
    size_t jn;
} log_fields;

/* Start with log_fields f = {0}; keys are plain identifiers chosen by the caller. */
void log_str(log_fields *f, const char *key, const char *value); /* NULL value: left out */
void log_int(log_fields *f, const char *key, long long value);
void log_num(log_fields *f, const char *key, double value);      /* 3 decimals */

bool log_enabled(const log_ctx *l, int level);
/* One line if `level` passes the threshold; f may be NULL. */
void log_emit(const log_ctx *l, int level, const char *msg, const log_fields *f);

/* "error", "warn", "info", "debug" -> PITH_LOG_*; 0 for anything else. */
int log_parse_level(const char *name);

#endif
