/* What a load reads from a model directory, and how much it costs before it refuses a file.
 *
 * Special files: a FIFO (or a directory) named as any file a load opens (config.json, the weights,
 * tokenizer.json / .bin, tokenizer_config.json, generation_config.json, chat_template.jinja, a --tokenizer
 * path) fails the load at once with an error naming the file, where a blocking open used to wait for a
 * writer forever (a reload holding the admin lock, a drain past its deadline). Each load runs in a child
 * under alarm(), so that a regression fails here instead of hanging the suite.
 *
 * Headers before reads: a sparse 64 MiB file that starts like a GGUF is refused, or found to hold no
 * tokenizer, without its pages being read in (the weights are read in only once every header and tensor
 * is checked); a tokenizer.json over the 64 MiB cap is refused from its size; one whose values would
 * make a cJSON tree of hundreds of MB is refused after one counting pass (a safetensors header too); a
 * tokenizer.json naming one token with a huge id does not build tables for every id below it. The memory each costs is the
 * child's peak RSS growth (getrusage), with bounds far from both outcomes. */
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "format/json_file.h"
#include "format/safetensors.h"
#include "pith/assets.h"
#include "pith/modelfile.h"
#include "pith/tokenizer.h"
#include "test_formats_util.h"

#define CHILD_TIMEOUT_S 60

typedef int (*load_fn)(const char *path, pith_err *err);

typedef struct outcome {
    bool hung;     /* killed by the alarm: the load blocked */
    bool crashed;  /* any other abnormal end */
    int rc;        /* the load's return value */
    long grew_kb;  /* the child's peak RSS growth over the load */
    char msg[1024];
} outcome;

/* Runs fn(path) in a child; the child reports "rc grew_kb message" through a pipe. */
static outcome in_child(load_fn fn, const char *path) {
    outcome o = {0};
    int fds[2];
    if (pipe(fds)) abort();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) abort();
    if (pid == 0) {
        close(fds[0]);
        alarm(CHILD_TIMEOUT_S);
        struct rusage r0, r1;
        getrusage(RUSAGE_SELF, &r0);
        pith_err err = {{0}};
        int rc = fn(path, &err);
        getrusage(RUSAGE_SELF, &r1);
        char line[1200];
        int n = snprintf(line, sizeof line, "%d %ld %s", rc, r1.ru_maxrss - r0.ru_maxrss, rc ? err.msg : "");
        if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
        ssize_t w = write(fds[1], line, (size_t)n);
        _exit(w == n ? 0 : 3);
    }
    close(fds[1]);
    char line[1200];
    size_t got = 0;
    for (;;) {
        ssize_t r = read(fds[0], line + got, sizeof line - 1 - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fds[0]);
    line[got] = 0;
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) {
        o.hung = WTERMSIG(status) == SIGALRM;
        o.crashed = !o.hung;
        return o;
    }
    int used = 0;
    if (WEXITSTATUS(status) != 0 || sscanf(line, "%d %ld %n", &o.rc, &o.grew_kb, &used) < 2) {
        o.crashed = true;
        return o;
    }
    snprintf(o.msg, sizeof o.msg, "%s", line + used);
    return o;
}

static int load_assets(const char *dir, pith_err *err) {
    pith_assets a;
    pith_assets_options o = {.model_path = dir, .n_threads = 1};
    if (pith_assets_load(&o, &a, err)) return -1;
    pith_assets_free(&a);
    return 0;
}

static int load_tokenizer(const char *path, pith_err *err) {
    pith_tokenizer *t;
    if (pith_tokenizer_load(path, 0, &t, err)) return -1;
    pith_tokenizer_free(t);
    return 0;
}

static int parse_safetensors(const char *path, pith_err *err) {
    pith_mapped_file m;
    if (pith_map_file(path, &m, err)) return -1;
    pith_tensor *t;
    int n, rc = pith_safetensors_parse(path, &m, &t, &n, err);
    if (rc == 0) pith_safetensors_free(t, n);
    pith_unmap_file(&m);
    return rc;
}

static int open_model_file(const char *path, pith_err *err) {
    pith_model_file *f;
    if (pith_model_file_open(path, &f, err)) return -1;
    pith_model_file_close(f);
    return 0;
}

/* A load expected to fail, promptly, with a message holding each needle. */
static void expect_refused(const char *label, load_fn fn, const char *path, const char *needle1, const char *needle2) {
    outcome o = in_child(fn, path);
    CHECKF(!o.hung, "%s: the load blocked (killed after %d s)", label, CHILD_TIMEOUT_S);
    CHECKF(!o.crashed, "%s: the child crashed", label);
    if (o.hung || o.crashed) return;
    CHECKF(o.rc != 0, "%s: loaded", label);
    CHECKF(strstr(o.msg, needle1) && (!needle2 || strstr(o.msg, needle2)), "%s: message '%s' lacks '%s' / '%s'",
           label, o.msg, needle1, needle2 ? needle2 : "");
}

static int sh(const char *cmd) {
    int rc = system(cmd);
    return rc == 0 ? 0 : -1;
}

static const char *source_dir(void) {
    const char *s = getenv("PITH_SOURCE_DIR");
    return s && *s ? s : "..";
}

/* A random-weight Llama directory (tools/mkmodel.py) with a tokenizer.json, tokenizer_config.json,
 * generation_config.json and chat_template.jinja beside the weights; 0 when it loads. */
static int make_base(const char *dir) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "rm -rf '%s' && /usr/bin/python3 '%s/tools/mkmodel.py' --preset test-llama --format safetensors "
             "--seed 5 --out '%s' >/dev/null 2>&1",
             dir, source_dir(), dir);
    if (sh(cmd)) return -1;
    char p[4400];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    if (write_text(p, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]},"
                      "\"added_tokens\":[]}"))
        return -1;
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    if (write_text(p, "{\"chat_template\":\"{{ messages[0].content }}\"}")) return -1;
    snprintf(p, sizeof p, "%s/generation_config.json", dir);
    if (write_text(p, "{\"eos_token_id\":1}")) return -1;
    snprintf(p, sizeof p, "%s/chat_template.jinja", dir);
    if (write_text(p, "{{ messages[0].content }}")) return -1;
    pith_err err = {{0}};
    return load_assets(dir, &err) ? (fprintf(stderr, "base model: %s\n", err.msg), -1) : 0;
}

/* A copy of base with `name` replaced by a FIFO (and `drop`, when not NULL, removed). */
static const char *with_fifo(const char *base, const char *label, const char *name, const char *drop) {
    static char dir[4096];
    snprintf(dir, sizeof dir, "%s/fifo_%s", tmp_dir(), label);
    char cmd[9000], p[4400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dir, base, dir);
    if (sh(cmd)) return NULL;
    if (drop) {
        snprintf(p, sizeof p, "%s/%s", dir, drop);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/%s", dir, name);
    unlink(p);
    if (mkfifo(p, 0600)) return NULL;
    return dir;
}

static void test_fifos(void) {
    const char *base = tmp_path("loader_base");
    if (make_base(base)) {
        CHECKF(0, "cannot make the base model directory with tools/mkmodel.py");
        return;
    }
    static const struct {
        const char *label, *name, *drop;
    } cases[] = {
        {"config", "config.json", NULL},
        {"weights", "model.safetensors", NULL},
        {"tokenizer_json", "tokenizer.json", NULL},
        {"tokenizer_bin", "tokenizer.bin", "tokenizer.json"},
        {"tokenizer_config", "tokenizer_config.json", NULL},
        {"generation_config", "generation_config.json", NULL},
        {"chat_template", "chat_template.jinja", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *dir = with_fifo(base, cases[i].label, cases[i].name, cases[i].drop);
        CHECKF(dir, "%s: cannot make the FIFO", cases[i].label);
        if (dir) expect_refused(cases[i].label, load_assets, dir, cases[i].name, "not a regular file");
    }
    /* A FIFO passed as --tokenizer, and tokenizer.json as a directory (opened, refused, not searched). */
    char p[4400];
    snprintf(p, sizeof p, "%s/tokenizer.json", with_fifo(base, "direct", "tokenizer.json", NULL));
    expect_refused("tokenizer_path", load_tokenizer, p, "tokenizer.json", "not a regular file");
    const char *dir = with_fifo(base, "tokdir", "unused", NULL);
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    unlink(p);
    CHECK(make_dir(p) == 0);
    expect_refused("tokenizer_dir", load_tokenizer, dir, "tokenizer.json", "not a regular file");
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'/fifo_*", base, tmp_dir());
    CHECK(sh(cmd) == 0);
}

#define SPARSE_BYTES ((off_t)64 << 20)

/* A sparse file of SPARSE_BYTES (or `size`) whose first bytes are head. */
static const char *sparse_file(const char *name, const void *head, size_t n, off_t size) {
    const char *path = tmp_path(name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return NULL;
    bool ok = write(fd, head, n) == (ssize_t)n && ftruncate(fd, size) == 0;
    close(fd);
    return ok ? path : NULL;
}

/* The bound a load's RSS growth must stay under: far below the file (which the old loaders read in
 * whole), far above what parsing a header costs. */
#define SMALL_GROWTH_KB (16L << 10)

static void expect_cheap_refusal(const char *label, load_fn fn, const char *path, const char *needle) {
    outcome o = in_child(fn, path);
    CHECKF(!o.hung && !o.crashed, "%s: the child hung or crashed", label);
    if (o.hung || o.crashed) return;
    CHECKF(o.rc != 0, "%s: loaded", label);
    CHECKF(strstr(o.msg, needle), "%s: message '%s' lacks '%s'", label, o.msg, needle);
    CHECKF(o.grew_kb < SMALL_GROWTH_KB, "%s: peak RSS grew by %ld KiB for a %lld MiB file (bound %ld KiB)", label,
           o.grew_kb, (long long)(SPARSE_BYTES >> 20), SMALL_GROWTH_KB);
}

static void test_gguf_header_first(void) {
    /* Version 3, tensor count and key count far beyond what 64 MiB can hold. */
    buf h = {0};
    buf_put(&h, "GGUF", 4);
    put_u32(&h, 3);
    put_u64(&h, (uint64_t)1 << 40);
    put_u64(&h, (uint64_t)1 << 40);
    const char *absurd = sparse_file("sparse_absurd.gguf", h.p, h.n, SPARSE_BYTES);
    CHECK(absurd);
    if (absurd) {
        expect_cheap_refusal("absurd counts, tokenizer", load_tokenizer, absurd, "impossible");
        expect_cheap_refusal("absurd counts, model", open_model_file, absurd, "impossible");
    }
    /* A valid empty header (no keys, no tensors) in front of 64 MiB of nothing: no tokenizer, no model. */
    buf_free(&h);
    buf_put(&h, "GGUF", 4);
    put_u32(&h, 3);
    put_u64(&h, 0);
    put_u64(&h, 0);
    const char *empty = sparse_file("sparse_empty.gguf", h.p, h.n, SPARSE_BYTES);
    CHECK(empty);
    if (empty) {
        expect_cheap_refusal("empty header, tokenizer", load_tokenizer, empty, "tokenizer");
        expect_cheap_refusal("empty header, model", open_model_file, empty, "architecture");
    }
    buf_free(&h);
    if (absurd) unlink(absurd);
    if (empty) unlink(empty);
}

static void test_tokenizer_json_caps(void) {
    /* Over the 64 MiB cap: refused from its size, nothing read. */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/big_tokenizer", tmp_dir());
    CHECK(make_dir(dir) == 0);
    char path[4400];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    const char *big = sparse_file("big_tokenizer/tokenizer.json", "{", 1, ((off_t)64 << 20) + 1);
    CHECK(big);
    if (big) {
        expect_cheap_refusal("tokenizer.json over the cap", load_tokenizer, path, "more than the 67108864 allowed");
        unlink(big);
    }

    /* 4.2 million values in 8.4 MB (a cJSON tree of ~340 MB): refused after counting them, in a
     * tokenizer.json and in a safetensors header. */
    size_t n_values = PITH_JSON_MAX_VALUES + 16;
    buf j = {0};
    const char *head = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"junk\":[";
    buf_put(&j, head, strlen(head));
    for (size_t i = 0; i < n_values; i++) buf_put(&j, i ? ",0" : "0", i ? 2 : 1);
    buf_put(&j, "]}", 2);
    snprintf(path, sizeof path, "%s/values.json", tmp_dir());
    CHECK(write_file(path, j.p, j.n) == 0);
    outcome o = in_child(load_tokenizer, path);
    CHECKF(!o.hung && !o.crashed && o.rc != 0 && strstr(o.msg, "JSON values"), "many values: rc %d '%s'", o.rc, o.msg);
    CHECKF(o.grew_kb < (long)(j.n >> 10) * 3, "many values: peak RSS grew by %ld KiB for a %zu KiB file", o.grew_kb,
           j.n >> 10);
    buf st = {0};
    put_u64(&st, j.n);
    buf_put(&st, j.p, j.n);
    snprintf(path, sizeof path, "%s/values.safetensors", tmp_dir());
    CHECK(write_file(path, st.p, st.n) == 0);
    o = in_child(parse_safetensors, path);
    CHECKF(!o.hung && !o.crashed && o.rc != 0 && strstr(o.msg, "JSON values"), "safetensors: rc %d '%s'", o.rc, o.msg);
    CHECKF(o.grew_kb < (long)(j.n >> 10) * 3, "safetensors: peak RSS grew by %ld KiB for a %zu KiB file", o.grew_kb,
           j.n >> 10);
    unlink(path);
    snprintf(path, sizeof path, "%s/values.json", tmp_dir());
    unlink(path);
    buf_free(&st);
    buf_free(&j);

    /* One token with the largest id: no tables for 16 million ids. */
    snprintf(path, sizeof path, "%s/bigid.json", tmp_dir());
    CHECK(write_text(path, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":16777215},\"merges\":[]}}") == 0);
    o = in_child(load_tokenizer, path);
    CHECKF(!o.hung && !o.crashed && o.rc != 0 && strstr(o.msg, "names only 1 tokens"), "huge id: rc %d '%s'", o.rc,
           o.msg);
    CHECKF(o.grew_kb < SMALL_GROWTH_KB, "huge id: peak RSS grew by %ld KiB", o.grew_kb);
    unlink(path);
}

static void test_count_values(void) {
    static const struct {
        const char *text;
        size_t want;
    } cases[] = {
        {"0", 1},
        {"[]", 2},                       /* a bound: an empty container counts its open bracket */
        {"[1,2,3]", 4},
        {"{\"a\":1,\"b\":[2,3]}", 5},
        {"\"a,b[c{d\"", 1},              /* separators inside a string */
        {"[\"x\\\",[\",1]", 3},          /* an escaped quote does not end the string */
        {"[\"\\\\\",1]", 3},             /* an escaped backslash does not escape the quote after it */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t got = pith_json_count_values(cases[i].text, strlen(cases[i].text));
        CHECKF(got == cases[i].want, "count(%s) = %zu, want %zu", cases[i].text, got, cases[i].want);
    }
    cJSON *j;
    pith_err err = {{0}};
    CHECK(pith_json_parse("x.json", "[1,2,3]", 7, 3, &j, &err) != 0 && strstr(err.msg, "x.json: more than 3 JSON values"));
    CHECK(pith_json_parse("x.json", "[1,2,3]", 7, 4, &j, &err) == 0 && cJSON_GetArraySize(j) == 3);
    cJSON_Delete(j);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    test_count_values();
    test_fifos();
    test_gguf_header_first();
    test_tokenizer_json_caps();
    return check_summary("test_loader_files");
}
