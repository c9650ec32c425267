/* Unit tests of the server's defences that need no model (issue 31): text log lines escape control
 * characters and invalid UTF-8 in the message and every field (no forged or hidden lines); key files
 * must be regular files holding a key (a FIFO is refused at once, not waited on) and a shared one is
 * reported; 415 has a series of its own in pith_request_errors_total. The HTTP side (slow clients,
 * Content-Type, Host) is tested against a real server in tests/server/hardening.test.mjs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "server/auth.h"
#include "server/buf.h"
#include "server/log.h"
#include "server/metrics.h"

static char last[8192];
static void capture(void *user, const char *line) {
    (void)user;
    snprintf(last, sizeof last, "%s", line);
}

static void test_text_log(void) {
    log_ctx l = {.sink = capture};
    log_fields f = {0};
    log_str(&f, "path", "/v1/x\nFAKE\x1b[31m\r\x7f");
    log_str(&f, "quoted", "a b\\c\n\"d\"");
    log_str(&f, "utf8", "caf\xc3\xa9 \xe2\x82\xac");     /* valid: kept as is */
    log_str(&f, "bad", "\xc2\x9b\xff\xc3(\xed\xa0\x80"); /* a C1 control, stray bytes, a surrogate */
    log_emit(&l, PITH_LOG_INFO, "GET /v1/x\nFAKE line\r\x1b[2J", &f);
    CHECKF(!strpbrk(last, "\n\r\x1b\x7f"), "%s", last);
    CHECKF(strstr(last, "GET /v1/x\\nFAKE line\\r\\x1b[2J ") == last, "%s", last);
    CHECKF(strstr(last, " path=/v1/x\\nFAKE\\x1b[31m\\r\\x7f "), "%s", last);
    CHECKF(strstr(last, " quoted=\"a b\\\\c\\n\\\"d\\\"\" "), "%s", last);
    CHECKF(strstr(last, " utf8=\"caf\xc3\xa9 \xe2\x82\xac\" "), "%s", last);
    CHECKF(strstr(last, " bad=\\xc2\\x9b\\xff\\xc3(\\xed\\xa0\\x80"), "%s", last);

    /* A long message full of escapes is cut to fit, never overflowing, and the fields stay. */
    char big[3000];
    memset(big, '\n', sizeof big - 1);
    big[sizeof big - 1] = 0;
    log_fields g = {0};
    log_int(&g, "id", 7);
    log_emit(&l, PITH_LOG_WARN, big, &g);
    CHECKF(!strchr(last, '\n') && strncmp(last, "warning: \\n\\n", 13) == 0, "%.40s", last);
    CHECKF(strlen(last) < 4096 && strstr(last, " id=7"), "%zu", strlen(last));

    /* JSON lines: unchanged escaping, still one line. */
    l.json = true;
    log_emit(&l, PITH_LOG_INFO, "a\nb", &f);
    CHECKF(!strpbrk(last, "\n\r\x1b") && strstr(last, "\"msg\":\"a\\nb\""), "%s", last);
}

static void test_key_files(const char *tmp) {
    auth_keys a = {0};
    pith_err err;
    char path[4096];

    snprintf(path, sizeof path, "%s/hardening_keys.txt", tmp);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs("sk-one\r\n", f);
    fclose(f);
    chmod(path, 0600);
    CHECKF(auth_add_key_file(&a, path, &err) == 0, "%s", err.msg);
    CHECK(auth_check(&a, "Bearer sk-one"));
    CHECK(!auth_key_file_shared(path));
    chmod(path, 0640);
    CHECK(auth_key_file_shared(path));
    unlink(path);

    CHECKF(auth_add_key_file(&a, tmp, &err) == -1 && strstr(err.msg, "not a regular file"), "%s", err.msg);
    snprintf(path, sizeof path, "%s/hardening_fifo", tmp);
    unlink(path);
    if (mkfifo(path, 0600) == 0) { /* before: fopen waited for a writer for ever */
        CHECKF(auth_add_key_file(&a, path, &err) == -1 && strstr(err.msg, "not a regular file"), "%s", err.msg);
        unlink(path);
    }
    CHECK(auth_add_key_file(&a, "/dev/null", &err) == -1);
    CHECK(a.n == 1);
    auth_free(&a);
}

static void test_metrics_415(void) {
    metrics m;
    metrics_init(&m);
    metrics_error(&m, 415);
    metrics_error(&m, 418); /* unknown: counted as 500 */
    buf out = {0};
    pith_engine_stats st = {0};
    metrics_model mm = {.name = "m", .m = &m, .st = &st};
    metrics_render_models(&mm, 1, &out);
    CHECKF(out.data && strstr(out.data, "pith_request_errors_total{model_name=\"m\",code=\"415\"} 1\n"), "%s",
           out.data ? out.data : "");
    CHECK(out.data && strstr(out.data, "pith_request_errors_total{model_name=\"m\",code=\"500\"} 1\n"));
    buf_free(&out);
    metrics_destroy(&m);
}

int main(void) {
    const char *tmp = getenv("PITH_TEST_TMP");
    if (!tmp || !*tmp) tmp = ".";
    test_text_log();
    test_key_files(tmp);
    test_metrics_415();
    return check_summary("test_server_hardening");
}
