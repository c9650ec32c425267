/* src/server/media.c: image URLs from requests turned into bytes. data: URLs (base64 with and without
 * padding, percent-encoded, refused types, bad encodings, the size limit checked before decoding), the
 * allowed-host list (exact, *.domain, never an IP literal by wildcard), and http(s) fetches against a
 * libmicrohttpd server on 127.0.0.1 started here: a fetch that works, a host off the list (no
 * connection made), redirects on and off the list and too many of them, bodies over the limit with and
 * without Content-Length, a server slower than the timeout, 404, empty bodies, userinfo and other
 * schemes. Without libcurl the data: cases still run, then the test reports the remote ones skipped. */
#include <microhttpd.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "server/media.h"

/* a 1x1 RGBA PNG */
static const uint8_t png[70] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00,
    0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00,
    0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0x64, 0x60, 0xf8, 0x5f, 0x0f, 0x00, 0x02, 0x87, 0x01, 0x80,
    0xeb, 0x47, 0xba, 0x92, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};
#define PNG_B64 "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Fetches url and checks it succeeds with want (n_want bytes). */
static void expect_ok(const media_limits *lim, const char *url, const uint8_t *want, size_t n_want, int line) {
    uint8_t *data = (uint8_t *)"x";
    size_t n = 99;
    api_error err = {0};
    int rc = media_fetch(lim, url, NULL, &data, &n, &err);
    CHECKF(rc == 0, "line %d: %.80s: %d %s: %s", line, url, err.status, err.code ? err.code : "-", err.message);
    if (rc == 0) {
        CHECKF(n == n_want && data && !memcmp(data, want, n), "line %d: %.80s: %zu bytes, want %zu", line, url, n,
               n_want);
        free(data);
    }
}

/* Fetches url and checks it fails with status and code, leaving no output, and returns the message. */
static const char *expect_err(const media_limits *lim, const char *url, int status, const char *code, int line) {
    static api_error err;
    memset(&err, 0, sizeof err);
    uint8_t *data = (uint8_t *)"x";
    size_t n = 99;
    int rc = media_fetch(lim, url, NULL, &data, &n, &err);
    CHECKF(rc == -1 && err.status == status && err.code && !strcmp(err.code, code),
           "line %d: %.80s: rc %d, %d %s (%s), want %d %s", line, url, rc, err.status, err.code ? err.code : "-",
           err.message, status, code);
    CHECKF(data == NULL && n == 0, "line %d: %.80s: output left on failure", line, url);
    if (rc == 0) free(data);
    CHECKF(!strcmp(err.param, "messages"), "line %d: param '%s'", line, err.param);
    return err.message;
}
#define OK(lim, url, want, n) expect_ok(lim, url, want, n, __LINE__)
#define ERR(lim, url, status, code) expect_err(lim, url, status, code, __LINE__)

static void test_data_urls(void) {
    media_limits lim = {0};
    OK(&lim, "data:image/png;base64," PNG_B64 "==", png, sizeof png);
    OK(&lim, "data:image/png;base64," PNG_B64, png, sizeof png); /* no padding */
    OK(&lim, "DATA:Image/PNG;BASE64," PNG_B64 "==", png, sizeof png);
    ERR(&lim, "data:image/png;base64," PNG_B64 "=", 400, "invalid_image_data"); /* half the padding */
    OK(&lim, "data:image/png;name=a.png;base64," PNG_B64, png, sizeof png);
    OK(&lim, "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAC\r\n"
             "hwGA60e6kgAAAABJRU5ErkJggg==\n", png, sizeof png); /* MIME line breaks */
    OK(&lim, "data:image/png,%89PNG%0d%0A%1a%0a", png, 8);
    uint8_t one[1] = {0xff};
    OK(&lim, "data:image/jpeg;base64,/w", one, 1);
    OK(&lim, "data:image/jpeg;base64,/w==", one, 1);

    CHECK(strstr(ERR(&lim, "data:text/plain;base64,aGVsbG8=", 400, "invalid_image"), "text/plain"));
    ERR(&lim, "data:;base64," PNG_B64, 400, "invalid_image");
    ERR(&lim, "data:," PNG_B64, 400, "invalid_image");
    ERR(&lim, "data:image/;base64," PNG_B64, 400, "invalid_image");
    ERR(&lim, "data:image;base64," PNG_B64, 400, "invalid_image");
    ERR(&lim, "data:application/octet-stream;base64," PNG_B64, 400, "invalid_image");
    ERR(&lim, "data:image/png;base64", 400, "invalid_image_url"); /* no comma */
    ERR(&lim, "data:image/png;base64,", 400, "invalid_image_data");
    ERR(&lim, "data:image/png,", 400, "invalid_image_data");
    ERR(&lim, "data:image/png;base64,iVBOR*w0KGgo", 400, "invalid_image_data");
    ERR(&lim, "data:image/png;base64,iVBOR-w0KGgo", 400, "invalid_image_data"); /* URL-safe alphabet */
    ERR(&lim, "data:image/png;base64,iVBORw0K=", 400, "invalid_image_data"); /* bad padding */
    ERR(&lim, "data:image/png;base64,iV==BORw", 400, "invalid_image_data"); /* data after padding */
    ERR(&lim, "data:image/png;base64,iVBORw0KG", 400, "invalid_image_data"); /* 1 char left over */
    ERR(&lim, "data:image/png;base64,/w===", 400, "invalid_image_data");
    ERR(&lim, "data:image/png;base64," PNG_B64 "#frag", 400, "invalid_image_data");
    ERR(&lim, "data:image/png,%8", 400, "invalid_image_data");
    ERR(&lim, "data:image/png,%zz", 400, "invalid_image_data");

    /* the limit: 300 bytes decoded is fine, 303 is not, and is refused before any decoding (a 30 MB
     * payload would take visible time and memory otherwise) */
    lim.max_bytes = 300;
    char url[600] = "data:image/png;base64,";
    size_t p = strlen(url);
    memset(url + p, 'A', 400);
    url[p + 400] = 0;
    uint8_t zeros[303] = {0};
    OK(&lim, url, zeros, 300);
    memset(url + p + 400, 'A', 4);
    url[p + 404] = 0;
    CHECK(strstr(ERR(&lim, url, 413, "media_too_large"), "303"));
    OK(&lim, "data:image/png,%89PNG", png, 4);
    char pct[400] = "data:image/png,";
    memset(pct + strlen(pct), 'x', 301);
    ERR(&lim, pct, 413, "media_too_large");
    /* the default limit, 20 MiB */
    size_t big_len = ((size_t)20 << 20) / 3 * 4 + 8;
    char *big = malloc(big_len + 32);
    if (big) {
        strcpy(big, "data:image/png;base64,");
        memset(big + strlen(big), 'A', big_len);
        big[22 + big_len] = 0;
        lim.max_bytes = 0;
        ERR(&lim, big, 413, "media_too_large");
        free(big);
    }

    /* other schemes and empty URLs; lim NULL means the defaults */
    ERR(NULL, "file:///etc/passwd", 400, "invalid_image_url");
    ERR(NULL, "ftp://127.0.0.1/x.png", 400, "invalid_image_url");
    ERR(NULL, "gopher://127.0.0.1/x", 400, "invalid_image_url");
    ERR(NULL, "", 400, "invalid_image_url");
    ERR(NULL, "//127.0.0.1/x.png", 400, "invalid_image_url");
    ERR(NULL, "httpx://127.0.0.1/x.png", 400, "invalid_image_url");
    OK(NULL, "data:image/png;base64," PNG_B64, png, sizeof png);

    /* the caller's param */
    api_error err = {0};
    uint8_t *data;
    size_t n;
    CHECK(media_fetch(NULL, "data:text/plain,x", "messages[0].content[1].image_url", &data, &n, &err) == -1);
    CHECKF(!strcmp(err.param, "messages[0].content[1].image_url"), "%s", err.param);
}

static void test_hosts(void) {
    const char *list[] = {"Example.COM", "*.imgs.test", "[::1]", "10.0.0.1", "*.0.0.1", "*", "", NULL, "*.",
                          "fe80::2"};
    media_limits lim = {.allowed_domains = list, .n_allowed = 10};
    CHECK(media_host_allowed(&lim, "example.com"));
    CHECK(media_host_allowed(&lim, "EXAMPLE.com."));
    CHECK(!media_host_allowed(&lim, "a.example.com"));
    CHECK(!media_host_allowed(&lim, "example.com.evil"));
    CHECK(!media_host_allowed(&lim, "imgs.test"));
    CHECK(media_host_allowed(&lim, "a.imgs.test"));
    CHECK(media_host_allowed(&lim, "a.b.IMGS.test"));
    CHECK(!media_host_allowed(&lim, "evilimgs.test"));
    CHECK(!media_host_allowed(&lim, ".imgs.test.x"));
    CHECK(media_host_allowed(&lim, "[::1]"));
    CHECK(media_host_allowed(&lim, "::1"));
    CHECK(media_host_allowed(&lim, "[fe80::2]"));
    CHECK(media_host_allowed(&lim, "10.0.0.1"));
    CHECK(!media_host_allowed(&lim, "127.0.0.1")); /* "*.0.0.1" names no address */
    CHECK(!media_host_allowed(&lim, "anything")); /* "*" is no wildcard */
    CHECK(!media_host_allowed(&lim, ""));
    CHECK(!media_host_allowed(&lim, "."));
    CHECK(!media_host_allowed(NULL, "example.com"));
    media_limits none = {0};
    CHECK(!media_host_allowed(&none, "example.com"));

    pith_server_options o = {.allowed_media_domains = list, .n_allowed_media_domains = 2,
                             .media_max_bytes = 5, .media_timeout_s = 1.5};
    media_limits m;
    server_media_limits(&o, &m);
    CHECK(m.allowed_domains == list && m.n_allowed == 2 && m.max_bytes == 5 && m.timeout_s == 1.5);
}

/* ---- the test server ---- */

enum { BIG = 200000, LIMIT = 65536 };
static atomic_int n_requests;
static atomic_bool stopping;
static uint8_t *big_body;

static ssize_t big_chunks(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)cls;
    if (pos >= BIG) return MHD_CONTENT_READER_END_OF_STREAM;
    size_t n = BIG - pos < max ? (size_t)(BIG - pos) : max;
    if (n > 4096) n = 4096;
    memset(buf, 'b', n);
    return (ssize_t)n;
}

static enum MHD_Result answer(struct MHD_Connection *c, unsigned status, struct MHD_Response *r) {
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result redirect(struct MHD_Connection *c, const char *to) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, "Location", to);
    return answer(c, MHD_HTTP_FOUND, r);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **state) {
    (void)cls, (void)method, (void)version, (void)upload, (void)upload_size, (void)state;
    atomic_fetch_add(&n_requests, 1);
    if (!strcmp(url, "/ok.png") || !strcmp(url, "/slow")) {
        if (!strcmp(url, "/slow"))
            for (double t0 = now_s(); !atomic_load(&stopping) && now_s() - t0 < 3;) usleep(10000);
        return answer(c, MHD_HTTP_OK,
                      MHD_create_response_from_buffer(sizeof png, (void *)png, MHD_RESPMEM_PERSISTENT));
    }
    if (!strcmp(url, "/big"))
        return answer(c, MHD_HTTP_OK, MHD_create_response_from_buffer(BIG, big_body, MHD_RESPMEM_PERSISTENT));
    if (!strcmp(url, "/big-chunked"))
        return answer(c, MHD_HTTP_OK, MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, big_chunks, NULL, NULL));
    if (!strcmp(url, "/empty"))
        return answer(c, MHD_HTTP_OK, MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT));
    if (!strcmp(url, "/redirect-on")) return redirect(c, "/ok.png");
    if (!strcmp(url, "/redirect-2")) return redirect(c, "/redirect-on");
    if (!strcmp(url, "/redirect-off")) return redirect(c, "http://other.invalid/x");
    if (!strcmp(url, "/redirect-ftp")) return redirect(c, "ftp://127.0.0.1/x");
    if (!strcmp(url, "/redirect-user")) return redirect(c, "http://user@127.0.0.1/ok.png");
    if (!strcmp(url, "/loop")) return redirect(c, "/loop");
    if (!strcmp(url, "/302-no-location"))
        return answer(c, MHD_HTTP_FOUND, MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT));
    static const char nf[] = "not found";
    return answer(c, MHD_HTTP_NOT_FOUND,
                  MHD_create_response_from_buffer(sizeof nf - 1, (void *)nf, MHD_RESPMEM_PERSISTENT));
}

static void test_remote(int port) {
    const char *allow[] = {"127.0.0.1"};
    media_limits lim = {.allowed_domains = allow, .n_allowed = 1, .max_bytes = LIMIT, .timeout_s = 0.5};
    char url[256];
#define URL(fmt, ...) (snprintf(url, sizeof url, fmt, __VA_ARGS__), url)

    OK(&lim, URL("http://127.0.0.1:%d/ok.png", port), png, sizeof png);
    OK(&lim, URL("HTTP://127.0.0.1:%d/ok.png?x=1#f", port), png, sizeof png);
    int before = atomic_load(&n_requests);
    OK(&lim, URL("http://127.0.0.1:%d/redirect-on", port), png, sizeof png);
    CHECKF(atomic_load(&n_requests) == before + 2, "%d", atomic_load(&n_requests) - before);
    OK(&lim, URL("http://127.0.0.1:%d/redirect-2", port), png, sizeof png);
    OK(&lim, URL("http://%%31%%32%%37.0.0.1:%d/ok.png", port), png, sizeof png);

    /* hosts off the list: refused before any connection */
    before = atomic_load(&n_requests);
    const char *m = ERR(&lim, URL("http://localhost:%d/ok.png", port), 400, "media_domain_not_allowed");
    CHECKF(strstr(m, "'localhost'"), "%s", m);
    m = ERR(NULL, URL("http://127.0.0.1:%d/ok.png", port), 400, "media_domain_not_allowed");
    CHECKF(strstr(m, "--allowed-media-domains"), "%s", m);
    ERR(&lim, URL("http://127.0.0.2:%d/ok.png", port), 400, "media_domain_not_allowed");
    ERR(&lim, URL("http://127.0.0.1.nip.io:%d/ok.png", port), 400, "media_domain_not_allowed");
    ERR(&lim, URL("http://user@127.0.0.1:%d/ok.png", port), 400, "invalid_image_url");
    ERR(&lim, URL("http://user:pw@127.0.0.1:%d/ok.png", port), 400, "invalid_image_url");
    ERR(&lim, URL("http://:pw@127.0.0.1:%d/ok.png", port), 400, "invalid_image_url");
    ERR(&lim, URL("http://127.0.0.1:%d@evil.test/ok.png", port), 400, "invalid_image_url");
    ERR(&lim, URL("http://127.0.0.1:%d /ok.png", port), 400, "invalid_image_url");
    ERR(&lim, "http://", 400, "invalid_image_url");
    /* the host checked is the one libcurl connects to, however the URL spells it */
    ERR(&lim, "http:///ok.png", 400, "media_domain_not_allowed"); /* libcurl reads host "ok.png" */
    m = ERR(&lim, URL("http://%%6c%%6Fcalhost:%d/ok.png", port), 400, "media_domain_not_allowed");
    CHECKF(strstr(m, "'localhost'"), "%s", m);
    CHECKF(atomic_load(&n_requests) == before, "%d requests made", atomic_load(&n_requests) - before);

    /* a redirect off the list: the first request only */
    before = atomic_load(&n_requests);
    m = ERR(&lim, URL("http://127.0.0.1:%d/redirect-off", port), 400, "media_domain_not_allowed");
    CHECKF(strstr(m, "redirect") && strstr(m, "'other.invalid'"), "%s", m);
    ERR(&lim, URL("http://127.0.0.1:%d/redirect-ftp", port), 400, "media_fetch_failed");
    ERR(&lim, URL("http://127.0.0.1:%d/redirect-user", port), 400, "media_fetch_failed");
    CHECKF(atomic_load(&n_requests) == before + 3, "%d", atomic_load(&n_requests) - before);
    before = atomic_load(&n_requests);
    m = ERR(&lim, URL("http://127.0.0.1:%d/loop", port), 400, "media_fetch_failed");
    CHECKF(strstr(m, "more than 3"), "%s", m);
    CHECKF(atomic_load(&n_requests) == before + 4, "%d", atomic_load(&n_requests) - before);
    ERR(&lim, URL("http://127.0.0.1:%d/302-no-location", port), 400, "media_fetch_failed");

    /* too large, with and without Content-Length; within the limit both work */
    ERR(&lim, URL("http://127.0.0.1:%d/big", port), 413, "media_too_large");
    ERR(&lim, URL("http://127.0.0.1:%d/big-chunked", port), 413, "media_too_large");
    media_limits roomy = lim;
    roomy.max_bytes = BIG;
    OK(&roomy, URL("http://127.0.0.1:%d/big", port), big_body, BIG);
    OK(&roomy, URL("http://127.0.0.1:%d/big-chunked", port), big_body, BIG);
    roomy.max_bytes = BIG - 1;
    ERR(&roomy, URL("http://127.0.0.1:%d/big-chunked", port), 413, "media_too_large");

    /* statuses and empty bodies */
    m = ERR(&lim, URL("http://127.0.0.1:%d/404", port), 400, "media_fetch_failed");
    CHECKF(strstr(m, "404"), "%s", m);
    ERR(&lim, URL("http://127.0.0.1:%d/empty", port), 400, "media_fetch_failed");

    /* slower than the timeout: refused at about the timeout */
    double t0 = now_s();
    ERR(&lim, URL("http://127.0.0.1:%d/slow", port), 400, "media_fetch_timeout");
    double took = now_s() - t0;
    CHECKF(took >= 0.4 && took < 1.5, "took %.3f s for a 0.5 s timeout", took);

    /* nothing listens: a connection error */
    const char *self[] = {"127.0.0.1", "*.invalid"};
    media_limits lim2 = {.allowed_domains = self, .n_allowed = 2, .timeout_s = 2};
    ERR(&lim2, "http://127.0.0.1:1/ok.png", 400, "media_fetch_failed");
    /* on the list by wildcard: tried, and it fails to resolve (or times out), not refused by the list */
    api_error err = {0};
    uint8_t *data;
    size_t n;
    CHECK(media_fetch(&lim2, "http://x.invalid/ok.png", NULL, &data, &n, &err) == -1);
    CHECKF(err.code && (!strcmp(err.code, "media_fetch_failed") || !strcmp(err.code, "media_fetch_timeout")), "%s",
           err.code ? err.code : "-");
#undef URL
}

int main(void) {
    test_data_urls();
    test_hosts();
    if (!media_remote_available()) {
        api_error err = {0};
        uint8_t *data;
        size_t n;
        const char *allow[] = {"127.0.0.1"};
        media_limits lim = {.allowed_domains = allow, .n_allowed = 1};
        CHECK(media_fetch(&lim, "http://127.0.0.1/ok.png", NULL, &data, &n, &err) == -1 && err.code &&
              !strcmp(err.code, "media_fetch_unavailable") && err.status == 400);
        if (check_summary("test_media_fetch")) return 1;
        printf("SKIP: built without libcurl: the http(s) cases did not run (data: URLs passed)\n");
        return CHECK_SKIP;
    }
    /* a proxy in the environment would see these requests instead of the server here */
    const char *proxies[] = {"http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"};
    for (size_t i = 0; i < sizeof proxies / sizeof *proxies; i++) unsetenv(proxies[i]);

    if (!(big_body = malloc(BIG))) return 1;
    memset(big_body, 'b', BIG);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION,
                                            0, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, &addr,
                                            MHD_OPTION_END);
    CHECK(d != NULL);
    if (d) {
        const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
        int port = info ? info->port : 0;
        CHECK(port > 0);
        if (port > 0) test_remote(port);
        atomic_store(&stopping, true);
        MHD_stop_daemon(d);
    }
    free(big_body);
    return check_summary("test_media_fetch");
}
