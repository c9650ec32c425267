/* Log lines in text or JSON (see log.h). */
#include "server/log.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *const level_names[] = {"info", "error", "warn", "info", "debug"};

int log_parse_level(const char *name) {
    for (int i = 1; i <= PITH_LOG_DEBUG; i++)
        if (name && !strcmp(name, level_names[i])) return i;
    return 0;
}

bool log_enabled(const log_ctx *l, int level) {
    int max = l->level ? l->level : PITH_LOG_INFO;
    return l->sink && level <= max;
}

/* Appends s (n bytes) as JSON string content to buf at *pos; false (nothing kept) if it does not fit. */
static bool json_escape(char *buf, size_t cap, size_t *pos, const char *s, size_t n) {
    size_t p = *pos;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char tmp[8];
        size_t k;
        if (c == '"' || c == '\\') tmp[0] = '\\', tmp[1] = (char)c, k = 2;
        else if (c == '\n') memcpy(tmp, "\\n", 2), k = 2;
        else if (c < 0x20 || c >= 0x7f) k = (size_t)snprintf(tmp, sizeof tmp, "\\u%04x", c);
        else tmp[0] = (char)c, k = 1;
        if (p + k >= cap) return false;
        memcpy(buf + p, tmp, k);
        p += k;
    }
    buf[p] = 0;
    *pos = p;
    return true;
}

static bool append(char *buf, size_t cap, size_t *pos, const char *s) {
    size_t n = strlen(s);
    if (*pos + n >= cap) return false;
    memcpy(buf + *pos, s, n + 1);
    *pos += n;
    return true;
}

/* Length of the valid UTF-8 sequence at s (n bytes left) that is not a C1 control (U+0080..U+009F,
 * which some terminals act on), else 0. */
static size_t utf8_printable(const unsigned char *s, size_t n) {
    size_t k = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
    if (k == 0 || k > n || s[0] > 0xf4) return 0;
    for (size_t i = 1; i < k; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if (k == 2 && s[0] == 0xc2 && s[1] < 0xa0) return 0;
    if (k == 3 && ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0))) return 0;
    if (k == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))) return 0;
    return k;
}

/* Appends s to a text line with every byte that could end the line, move the cursor or drive a
 * terminal (C0 and C1 controls, DEL, invalid UTF-8) written as \n, \r, \t or \xNN, so that client
 * data (a request path) can never forge or hide a line. `quoted` also escapes '"' and '\\'. What
 * fits is kept when the whole does not (false then). */
static bool text_escape(char *buf, size_t cap, size_t *pos, const char *s, bool quoted) {
    size_t p = *pos, n = strlen(s);
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        char tmp[8];
        size_t k = 1;
        unsigned char c = u[i];
        const char *src = tmp;
        if (c == '\n') memcpy(tmp, "\\n", 2), k = 2;
        else if (c == '\r') memcpy(tmp, "\\r", 2), k = 2;
        else if (c == '\t') memcpy(tmp, "\\t", 2), k = 2;
        else if (quoted && (c == '"' || c == '\\')) tmp[0] = '\\', tmp[1] = (char)c, k = 2;
        else if (c < 0x20 || c == 0x7f) k = (size_t)snprintf(tmp, sizeof tmp, "\\x%02x", c);
        else if (c < 0x80) tmp[0] = (char)c;
        else if ((k = utf8_printable(u + i, n - i))) src = s + i;
        else k = (size_t)snprintf(tmp, sizeof tmp, "\\x%02x", c);
        if (p + k >= cap) {
            buf[p] = 0;
            *pos = p;
            return false;
        }
        memcpy(buf + p, src, k);
        p += k;
        i += src == tmp ? 1 : k;
    }
    buf[p] = 0;
    *pos = p;
    return true;
}

/* Adds one field to both renderings, or to neither. */
static void add_field(log_fields *f, const char *key, const char *text_value, const char *json_value, bool quote) {
    size_t tn = f->tn, jn = f->jn;
    bool ok = append(f->text, sizeof f->text, &tn, " ") && append(f->text, sizeof f->text, &tn, key) &&
              append(f->text, sizeof f->text, &tn, "=");
    if (ok && quote && strpbrk(text_value, " \"=\\")) {
        ok = append(f->text, sizeof f->text, &tn, "\"") && text_escape(f->text, sizeof f->text, &tn, text_value, true) &&
             append(f->text, sizeof f->text, &tn, "\"");
    } else if (ok) {
        ok = text_escape(f->text, sizeof f->text, &tn, text_value, false);
    }
    ok = ok && append(f->json, sizeof f->json, &jn, ",\"") && json_escape(f->json, sizeof f->json, &jn, key, strlen(key)) &&
         append(f->json, sizeof f->json, &jn, "\":");
    if (ok && quote)
        ok = append(f->json, sizeof f->json, &jn, "\"") &&
             json_escape(f->json, sizeof f->json, &jn, json_value, strlen(json_value)) &&
             append(f->json, sizeof f->json, &jn, "\"");
    else if (ok)
        ok = append(f->json, sizeof f->json, &jn, json_value);
    if (!ok) {
        f->text[f->tn] = 0;
        f->json[f->jn] = 0;
        return;
    }
    f->tn = tn;
    f->jn = jn;
}

void log_str(log_fields *f, const char *key, const char *value) {
    if (value) add_field(f, key, value, value, true);
}

void log_int(log_fields *f, const char *key, long long value) {
    char v[32];
    snprintf(v, sizeof v, "%lld", value);
    add_field(f, key, v, v, false);
}

void log_num(log_fields *f, const char *key, double value) {
    char v[48];
    if (value != value || value > 1e300 || value < -1e300) snprintf(v, sizeof v, "null");
    else snprintf(v, sizeof v, "%.3f", value);
    add_field(f, key, v, v, false);
}

void log_emit(const log_ctx *l, int level, const char *msg, const log_fields *f) {
    if (!log_enabled(l, level)) return;
    if (level < PITH_LOG_ERROR || level > PITH_LOG_DEBUG) level = PITH_LOG_INFO;
    char line[4096];
    size_t n = 0;
    line[0] = 0;
    if (l->json) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        char head[96];
        snprintf(head, sizeof head, "{\"ts\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\",\"level\":\"%s\",\"msg\":\"",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 ts.tv_nsec / 1000000, level_names[level]);
        append(line, sizeof line, &n, head);
        /* the message is cut to fit, but the line stays valid JSON */
        size_t cap = sizeof line - (f ? f->jn : 0) - 8, mlen = strlen(msg);
        while (!json_escape(line, cap, &n, msg, mlen) && mlen > 0) mlen = mlen > 64 ? mlen - 64 : 0;
        append(line, sizeof line, &n, "\"");
        if (f) append(line, sizeof line, &n, f->json);
        append(line, sizeof line, &n, "}");
    } else {
        const char *prefix = level == PITH_LOG_ERROR ? "error: " : level == PITH_LOG_WARN ? "warning: "
                           : level == PITH_LOG_DEBUG ? "debug: " : "";
        append(line, sizeof line, &n, prefix);
        /* the message may hold client data too (a request path): escaped like the fields, cut to fit */
        text_escape(line, sizeof line - (f ? f->tn : 0), &n, msg, false);
        if (f) append(line, sizeof line, &n, f->text);
    }
    l->sink(l->user, line);
}
