#include "server/media.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifdef PITH_HAVE_CURL
#include <curl/curl.h>
#include <pthread.h>
#include <time.h>
#endif

static const char *param_or_default(const char *param) { return param ? param : "messages"; }

static size_t limit_bytes(const media_limits *lim) {
    return lim && lim->max_bytes ? lim->max_bytes : MEDIA_DEFAULT_MAX_BYTES;
}

static bool prefix_ci(const char *s, const char *prefix) { return !strncasecmp(s, prefix, strlen(prefix)); }

static bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* ---- data: URLs ---- */

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

static int hex_value(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The decoded size of base64 text (whitespace skipped), validating it without decoding; -1 with err. */
static int b64_size(const char *s, size_t len, size_t *out, const char *param, api_error *err) {
    size_t sig = 0, pad = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (is_space(c)) continue;
        if (c == '=') {
            pad++;
            continue;
        }
        if (b64_value(c) < 0 || pad)
            return api_errorf(err, 400, "invalid_image_data", param,
                              "the image's base64 data has an invalid character at offset %zu", i);
        sig++;
    }
    if (sig % 4 == 1 || pad > 2 || (pad && (sig + pad) % 4))
        return api_errorf(err, 400, "invalid_image_data", param, "the image's base64 data is truncated or badly padded");
    *out = sig / 4 * 3 + (sig % 4 ? sig % 4 - 1 : 0);
    return 0;
}

static void b64_decode(const char *s, size_t len, uint8_t *out) {
    uint32_t acc = 0;
    int bits = 0;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0) continue; /* whitespace and padding: b64_size allowed only those */
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
        }
    }
}

static int pct_size(const char *s, size_t len, size_t *out, const char *param, api_error *err) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++, n++) {
        if (s[i] != '%') continue;
        if (len - i < 3 || hex_value((unsigned char)s[i + 1]) < 0 || hex_value((unsigned char)s[i + 2]) < 0)
            return api_errorf(err, 400, "invalid_image_data", param,
                              "the image's percent-encoded data has a bad escape at offset %zu", i);
        i += 2;
    }
    *out = n;
    return 0;
}

static void pct_decode(const char *s, size_t len, uint8_t *out) {
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '%') {
            out[o++] = (uint8_t)(hex_value((unsigned char)s[i + 1]) << 4 | hex_value((unsigned char)s[i + 2]));
            i += 2;
        } else {
            out[o++] = (uint8_t)s[i];
        }
    }
}

/* type/subtype with RFC 2045 token characters, the type "image". */
static bool image_type_ok(const char *s, size_t len) {
    if (len <= 6 || strncasecmp(s, "image/", 6)) return false;
    for (size_t i = 6; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("!#$&^_.+-", c)))
            return false;
    }
    return true;
}

static int data_url(const media_limits *lim, const char *url, const char *param, uint8_t **data, size_t *n,
                    api_error *err) {
    const char *head = url + 5; /* after "data:" */
    const char *comma = strchr(head, ',');
    if (!comma)
        return api_errorf(err, 400, "invalid_image_url", param, "a data: URL needs a ',' before its data");
    const char *semi = memchr(head, ';', (size_t)(comma - head));
    const char *type_end = semi ? semi : comma;
    if (!image_type_ok(head, (size_t)(type_end - head))) {
        int tl = (int)(type_end - head);
        if (tl == 0) return api_errorf(err, 400, "invalid_image", param, "the data: URL has no media type (image/...)");
        return api_errorf(err, 400, "invalid_image", param, "the data: URL's media type '%.*s' is not an image type",
                          tl > 64 ? 64 : tl, head);
    }
    /* ";base64" is the last parameter when present (RFC 2397) */
    bool base64 = comma - head >= 7 && !strncasecmp(comma - 7, ";base64", 7);
    const char *payload = comma + 1;
    size_t len = strlen(payload), size = 0;
    if ((base64 ? b64_size(payload, len, &size, param, err) : pct_size(payload, len, &size, param, err)) < 0)
        return -1;
    size_t max = limit_bytes(lim);
    if (size > max)
        return api_errorf(err, 413, "media_too_large", param, "the image is %zu bytes, over the limit of %zu bytes",
                          size, max);
    if (size == 0) return api_errorf(err, 400, "invalid_image_data", param, "the data: URL's image is empty");
    uint8_t *out = malloc(size);
    if (!out) return api_errorf(err, 500, "internal_error", NULL, "out of memory");
    if (base64)
        b64_decode(payload, len, out);
    else
        pct_decode(payload, len, out);
    *data = out;
    *n = size;
    return 0;
}

/* ---- allowed hosts ---- */

/* host without IPv6 brackets and one trailing dot, as [start, start + len) */
static void host_core(const char *h, const char **start, size_t *len) {
    size_t l = strlen(h);
    if (l >= 2 && h[0] == '[' && h[l - 1] == ']') {
        h++;
        l -= 2;
    }
    if (l > 1 && h[l - 1] == '.') l--;
    *start = h;
    *len = l;
}

static bool is_ip_literal(const char *h, size_t len) {
    if (memchr(h, ':', len)) return true;
    for (size_t i = 0; i < len; i++)
        if (!((h[i] >= '0' && h[i] <= '9') || h[i] == '.')) return false;
    return true;
}

bool media_host_allowed(const media_limits *lim, const char *host) {
    if (!lim || !host || !*host) return false;
    const char *h;
    size_t hl;
    host_core(host, &h, &hl);
    if (!hl) return false;
    for (int i = 0; i < lim->n_allowed; i++) {
        const char *e = lim->allowed_domains[i];
        if (!e || !*e) continue;
        if (e[0] == '*' && e[1] == '.') {
            const char *suffix;
            size_t sl;
            host_core(e + 1, &suffix, &sl); /* ".example.com" */
            if (sl > 1 && hl > sl && !is_ip_literal(h, hl) && !strncasecmp(h + hl - sl, suffix, sl)) return true;
            continue;
        }
        const char *c;
        size_t cl;
        host_core(e, &c, &cl);
        if (cl == hl && !strncasecmp(c, h, hl)) return true;
    }
    return false;
}

void server_media_limits(const pith_server_options *opt, media_limits *out) {
    *out = (media_limits){
        .allowed_domains = opt->allowed_media_domains,
        .n_allowed = opt->n_allowed_media_domains,
        .max_bytes = opt->media_max_bytes,
        .timeout_s = opt->media_timeout_s,
    };
}

/* ---- http(s) ---- */

#ifdef PITH_HAVE_CURL

bool media_remote_available(void) { return true; }

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc; /* written once, inside curl_once */

static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct sink {
    CURL *curl;
    uint8_t *buf;
    size_t n, cap, max;
    bool too_large, oom, not_ok; /* why the write callback stopped the transfer */
} sink;

static size_t on_write(char *p, size_t size, size_t nmemb, void *user) {
    sink *s = user;
    size_t len = size * nmemb;
    long code = 0;
    curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &code);
    if (code >= 300 && code < 400) return len; /* a redirect's body: not the image, not kept */
    if (code < 200 || code >= 300) { /* the status says enough; an error page is not worth reading */
        s->not_ok = true;
        return 0;
    }
    if (len > s->max - s->n) {
        s->too_large = true;
        return 0;
    }
    if (s->n + len > s->cap) {
        size_t cap = s->cap ? s->cap : s->max < (64 << 10) ? s->max : 64 << 10;
        while (cap < s->n + len) cap = cap > s->max / 2 ? s->max : cap * 2;
        uint8_t *b = realloc(s->buf, cap);
        if (!b) {
            s->oom = true;
            return 0;
        }
        s->buf = b;
        s->cap = cap;
    }
    memcpy(s->buf + s->n, p, len);
    s->n += len;
    return len;
}

/* Parses url the way the transfer will use it and checks it; *host is curl's (curl_free). 'redirect' only
 * changes the wording and codes: a bad first URL is the request's, a bad redirect the remote's. */
static int check_url(const media_limits *lim, CURLU *u, const char *url, bool redirect, char **host,
                     const char *param, api_error *err) {
    const char *bad = redirect ? "media_fetch_failed" : "invalid_image_url";
    const char *what = redirect ? "the image URL redirected to" : "the image URL is";
    *host = NULL;
    if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK)
        return api_errorf(err, 400, bad, param, "%s a malformed URL", what);
    char *scheme = NULL;
    bool http = curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
                (!strcasecmp(scheme, "http") || !strcasecmp(scheme, "https"));
    curl_free(scheme);
    if (!http) return api_errorf(err, 400, bad, param, "%s not an http(s) URL", what);
    char *user = NULL, *pass = NULL;
    CURLUcode ru = curl_url_get(u, CURLUPART_USER, &user, 0), rp = curl_url_get(u, CURLUPART_PASSWORD, &pass, 0);
    curl_free(user);
    curl_free(pass);
    if (ru != CURLUE_NO_USER || rp != CURLUE_NO_PASSWORD)
        return api_errorf(err, 400, bad, param, "%s a URL with a user name or password (user@host), which is refused",
                          what);
    if (curl_url_get(u, CURLUPART_HOST, host, 0) != CURLUE_OK || !**host || strchr(*host, '%')) {
        curl_free(*host);
        *host = NULL;
        return api_errorf(err, 400, bad, param, "%s a URL without a valid host", what);
    }
    if (!media_host_allowed(lim, *host)) {
        int r = redirect ? api_errorf(err, 400, "media_domain_not_allowed", param,
                                      "the image URL redirected to host '%.200s', which is not in the server's "
                                      "allowed media domains", *host)
                 : lim && lim->n_allowed
                     ? api_errorf(err, 400, "media_domain_not_allowed", param,
                                  "the image URL's host '%.200s' is not in the server's allowed media domains", *host)
                     : api_errorf(err, 400, "media_domain_not_allowed", param,
                                  "the image URL's host '%.200s' is not allowed: this server fetches no remote "
                                  "images (--allowed-media-domains)", *host);
        curl_free(*host);
        *host = NULL;
        return r;
    }
    return 0;
}

static const char *curl_reason(CURLcode rc) {
    switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST: return "its host name did not resolve";
    case CURLE_COULDNT_CONNECT: return "the connection was refused or failed";
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE: return "the TLS connection failed";
    case CURLE_GOT_NOTHING: return "the server sent no response";
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE: return "the connection broke";
    default: return "the transfer failed";
    }
}

/* One request, no redirect followed. Returns 0 with the HTTP status in *code (and *next, to curl_free,
 * for a redirect), or -1 with err. */
static int fetch_once(const media_limits *lim, CURLU *u, const char *host, double deadline, sink *s, long *code,
                      char **next, const char *param, api_error *err) {
    double timeout = lim && lim->timeout_s > 0 ? lim->timeout_s : MEDIA_DEFAULT_TIMEOUT_S;
    long left_ms = (long)((deadline - now_s()) * 1000);
    if (left_ms <= 0)
        return api_errorf(err, 400, "media_fetch_timeout", param,
                          "fetching the image from '%.200s' took longer than %g s", host, timeout);
    CURL *c = curl_easy_init();
    if (!c) return api_errorf(err, 500, "internal_error", NULL, "out of memory");
    s->curl = c;
    curl_easy_setopt(c, CURLOPT_CURLU, u);
#if LIBCURL_VERSION_NUM >= 0x075500 /* 7.85: the _STR forms; the bitmask ones are deprecated there */
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(c, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "pith");
    curl_easy_setopt(c, CURLOPT_NETRC, (long)CURL_NETRC_IGNORED);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, left_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, left_ms);
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)s->max);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, s);
    CURLcode rc = curl_easy_perform(c);
    *code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, code);
    int r = 0;
    if (s->oom) {
        r = api_errorf(err, 500, "internal_error", NULL, "out of memory");
    } else if (s->too_large || rc == CURLE_FILESIZE_EXCEEDED) {
        r = api_errorf(err, 413, "media_too_large", param,
                       "the image at '%.200s' is larger than the limit of %zu bytes", host, s->max);
    } else if (rc == CURLE_OPERATION_TIMEDOUT) {
        r = api_errorf(err, 400, "media_fetch_timeout", param,
                       "fetching the image from '%.200s' took longer than %g s", host, timeout);
    } else if (rc != CURLE_OK && !s->not_ok) {
        r = api_errorf(err, 400, "media_fetch_failed", param, "could not fetch the image from '%.200s': %s", host,
                       curl_reason(rc));
    } else if (*code >= 300 && *code < 400 && *code != 304) {
        char *loc = NULL;
        if (curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &loc) != CURLE_OK || !loc || !*loc ||
            !(*next = strdup(loc)))
            r = api_errorf(err, 400, "media_fetch_failed", param,
                           "'%.200s' answered HTTP %ld without a usable Location", host, *code);
    } else if (*code < 200 || *code >= 300) {
        r = api_errorf(err, 400, "media_fetch_failed", param, "'%.200s' answered HTTP %ld for the image", host,
                       *code);
    }
    curl_easy_cleanup(c);
    s->curl = NULL;
    return r;
}

static int remote_url(const media_limits *lim, const char *url, const char *param, uint8_t **data, size_t *n,
                      api_error *err) {
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) return api_errorf(err, 500, "internal_error", NULL, "remote fetching is unavailable");
    double timeout = lim && lim->timeout_s > 0 ? lim->timeout_s : MEDIA_DEFAULT_TIMEOUT_S;
    double deadline = now_s() + timeout;
    sink s = {.max = limit_bytes(lim)};
    char *cur = NULL; /* the redirect being followed (malloc'd); url at first */
    int r = -1;
    for (int hop = 0;; hop++) {
        CURLU *u = curl_url();
        if (!u) {
            r = api_errorf(err, 500, "internal_error", NULL, "out of memory");
            break;
        }
        char *host = NULL, *next = NULL;
        long code = 0;
        s.n = 0;
        r = check_url(lim, u, cur ? cur : url, hop > 0, &host, param, err);
        if (!r) r = fetch_once(lim, u, host, deadline, &s, &code, &next, param, err);
        if (!r && next && hop == MEDIA_MAX_REDIRECTS)
            r = api_errorf(err, 400, "media_fetch_failed", param,
                           "the image URL redirected more than %d times (last from '%.200s')", MEDIA_MAX_REDIRECTS,
                           host);
        if (!r && !next && s.n == 0)
            r = api_errorf(err, 400, "media_fetch_failed", param, "'%.200s' sent no bytes for the image", host);
        curl_free(host);
        curl_url_cleanup(u);
        free(cur);
        cur = next;
        if (r || !cur) break;
    }
    free(cur);
    if (r) {
        free(s.buf);
        return -1;
    }
    uint8_t *out = s.n < s.cap ? realloc(s.buf, s.n) : s.buf; /* give back the doubling's slack */
    *data = out ? out : s.buf;
    *n = s.n;
    return 0;
}

#else /* !PITH_HAVE_CURL */

bool media_remote_available(void) { return false; }

static int remote_url(const media_limits *lim, const char *url, const char *param, uint8_t **data, size_t *n,
                      api_error *err) {
    (void)lim, (void)url, (void)data, (void)n;
    return api_errorf(err, 400, "media_fetch_unavailable", param,
                      "this server was built without libcurl, so it cannot fetch http(s) image URLs; send the "
                      "image as a data: URL");
}

#endif

int media_fetch(const media_limits *lim, const char *url, const char *param, uint8_t **data, size_t *n,
                api_error *err) {
    *data = NULL;
    *n = 0;
    param = param_or_default(param);
    if (!url || !*url) return api_errorf(err, 400, "invalid_image_url", param, "the image URL is empty");
    if (prefix_ci(url, "data:")) return data_url(lim, url, param, data, n, err);
    if (prefix_ci(url, "http://") || prefix_ci(url, "https://")) return remote_url(lim, url, param, data, n, err);
    return api_errorf(err, 400, "invalid_image_url", param, "image URLs must be data:, http:// or https:// URLs");
}
