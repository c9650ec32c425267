/* `pith run -f PROMPTS --jsonl` end to end with stories260K: one JSON object per prompt, written as each
 * finishes (placed here by its index), with the documented fields; greedy texts equal what single-sequence `pith run -p` prints for the same
 * prompt; a repeated prompt run after the first is served from the prefix cache; a tiny pool preempts
 * and still gives the same tokens; a prompt too long for the pool gets an error object, not a failed
 * run; bad option values are usage errors. */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/wait.h>

#include "check.h"

static const char *bin, *model, *tokfile, *tmp;
static char cmd[32768];

/* Runs a shell command, returns its exit status and its stdout (malloc'd). */
static int capture(const char *cmd, char **out) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += got;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    buf[n] = 0;
    *out = buf;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *prompts[] = {
    "Once upon a time",
    "The cat sat on the mat",
    "A little dog",
    "Lily and Tom went to the park to play with a big red ball",
    "Once upon a time",
};
enum { NP = 5, GEN = 24 };

typedef struct line {
    int index, prompt_tokens, cached_tokens, n_tokens;
    int32_t tokens[64];
    char text[2048];
    char finish[32];
    bool has_error;
} line;

/* Parses JSONL output into lines[], each at its index; returns how many parsed. */
static int parse(char *out, line *lines, int max) {
    int n = 0;
    for (char *s = strtok(out, "\n"); s && n < max; s = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(s);
        CHECKF(o != NULL, "not JSON: %s", s);
        if (!o) continue;
        cJSON *idx = cJSON_GetObjectItem(o, "index");
        int at = cJSON_IsNumber(idx) ? idx->valueint : -1;
        CHECKF(at >= 0 && at < max && lines[at].index < 0, "bad or repeated index in %s", s);
        if (at < 0 || at >= max || lines[at].index >= 0) {
            cJSON_Delete(o);
            continue;
        }
        n++;
        line *l = &lines[at];
        memset(l, 0, sizeof *l);
        cJSON *text = cJSON_GetObjectItem(o, "text"),
              *toks = cJSON_GetObjectItem(o, "tokens"), *pt = cJSON_GetObjectItem(o, "prompt_tokens"),
              *ct = cJSON_GetObjectItem(o, "cached_tokens"), *fr = cJSON_GetObjectItem(o, "finish_reason");
        CHECK(cJSON_IsNumber(idx) && cJSON_IsString(text) && cJSON_IsArray(toks) && cJSON_IsNumber(pt) &&
              cJSON_IsNumber(ct) && cJSON_IsString(fr));
        if (cJSON_IsNumber(idx)) l->index = idx->valueint;
        if (cJSON_IsString(text)) snprintf(l->text, sizeof l->text, "%s", text->valuestring);
        if (cJSON_IsNumber(pt)) l->prompt_tokens = pt->valueint;
        if (cJSON_IsNumber(ct)) l->cached_tokens = ct->valueint;
        if (cJSON_IsString(fr)) snprintf(l->finish, sizeof l->finish, "%s", fr->valuestring);
        cJSON *t;
        cJSON_ArrayForEach(t, toks) if (l->n_tokens < 64) l->tokens[l->n_tokens++] = (int32_t)t->valueint;
        l->has_error = cJSON_GetObjectItem(o, "error") != NULL;
        cJSON_Delete(o);
    }
    return n;
}

static int run_batch(const char *file, const char *extra, line *lines, char *err_path, int *n_lines) {
    char *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' run -m '%s' --tokenizer '%s' -f '%s' --jsonl -n %d --temp 0 --ignore-eos -t 2 %s 2>'%s'",
             bin, model, tokfile, file, GEN, extra, err_path);
    int rc = capture(cmd, &out);
    for (int i = 0; i < 16; i++) lines[i].index = -1;
    *n_lines = out ? parse(out, lines, 16) : 0;
    free(out);
    return rc;
}

int main(void) {
    const char *dir = check_shared_dir();
    if (!dir) return CHECK_SKIP;
    bin = getenv("PITH_BIN");
    tmp = getenv("PITH_TEST_TMP");
    if (!bin || !tmp) {
        printf("SKIP: PITH_BIN / PITH_TEST_TMP not set (run through ctest)\n");
        return CHECK_SKIP;
    }
    static char mpath[4200], tpath[4200], file[4200], errp[4200];
    snprintf(mpath, sizeof mpath, "%s/models/stories260K/stories260K.bin", dir);
    snprintf(tpath, sizeof tpath, "%s/models/stories260K/tok512.bin", dir);
    snprintf(file, sizeof file, "%s/engine-cli-prompts.txt", tmp);
    snprintf(errp, sizeof errp, "%s/engine-cli-stderr.txt", tmp);
    model = mpath;
    tokfile = tpath;
    FILE *f = fopen(file, "w");
    for (int i = 0; i < NP; i++) fprintf(f, "%s\n", prompts[i]);
    fclose(f);

    /* Roomy pool, one sequence at a time: the repeated prompt (last line) hits the cache. */
    static line seq1[16], batch[16], tight[16];
    int n;
    CHECK(run_batch(file, "--max-num-seqs 1", seq1, errp, &n) == 0);
    CHECK(n == NP);
    for (int i = 0; i < n; i++) {
        CHECK(seq1[i].index == i && seq1[i].n_tokens == GEN && !strcmp(seq1[i].finish, "length") && !seq1[i].has_error);
        CHECK(seq1[i].prompt_tokens >= 1);
    }
    CHECK(seq1[0].cached_tokens == 0 && seq1[4].prompt_tokens == seq1[0].prompt_tokens);
    /* "Once upon a time" is 5 tokens with BOS: less than a block, so nothing to reuse... */
    CHECK(seq1[4].cached_tokens == 0);
    /* ...but with 4-token blocks the first block is reused. */
    static line small_blocks[16];
    CHECK(run_batch(file, "--max-num-seqs 1 --block-size 4", small_blocks, errp, &n) == 0 && n == NP);
    CHECK(small_blocks[4].cached_tokens == 4);

    /* All at once, and in a pool of 3 blocks of 16 (one sequence of 48 tokens at most): same tokens. */
    CHECK(run_batch(file, "--max-num-seqs 8", batch, errp, &n) == 0 && n == NP);
    CHECK(run_batch(file, "--max-num-seqs 8 --kv-blocks 3", tight, errp, &n) == 0 && n == NP);
    char *stats = NULL;
    snprintf(cmd, sizeof cmd, "cat '%s'", errp);
    capture(cmd, &stats);
    CHECKF(stats && strstr(stats, "preemptions"), "no stats line on stderr: %s", stats ? stats : "");
    long long pre = -1;
    const char *at = stats ? strstr(stats, " steps, ") : NULL;
    if (at) pre = atoll(at + 8);
    CHECKF(pre > 0, "a 3-block pool for %d prompts did not preempt: %s", NP, stats ? stats : "");
    free(stats);
    for (int i = 0; i < NP; i++) {
        CHECK(batch[i].n_tokens == GEN && !memcmp(batch[i].tokens, seq1[i].tokens, GEN * sizeof(int32_t)));
        CHECK(tight[i].n_tokens == GEN && !memcmp(tight[i].tokens, seq1[i].tokens, GEN * sizeof(int32_t)));
        CHECK(!strcmp(batch[i].text, seq1[i].text) && !strcmp(tight[i].text, seq1[i].text));
    }

    /* The single-sequence path prints the same text. */
    for (int i = 0; i < 2; i++) {
        char *out = NULL;
        snprintf(cmd, sizeof cmd, "'%s' run -m '%s' --tokenizer '%s' -p '%s' -n %d --temp 0 --ignore-eos -t 2 2>/dev/null",
                 bin, model, tokfile, prompts[i], GEN);
        CHECK(capture(cmd, &out) == 0);
        size_t len = out ? strlen(out) : 0;
        if (len && out[len - 1] == '\n') out[--len] = 0;
        CHECKF(out && !strcmp(out, seq1[i].text), "single '%s' vs batch '%s'", out ? out : "", seq1[i].text);
        free(out);
    }

    /* A prompt longer than the whole pool, and an empty line: an error object in their place, the others
     * still run. */
    f = fopen(file, "w");
    fprintf(f, "Once upon a time\n");
    for (int i = 0; i < 40; i++) fprintf(f, "the cat sat on the mat and ");
    fprintf(f, "\nThe end\n\n");
    fclose(f);
    static line rej[16];
    CHECK(run_batch(file, "--kv-blocks 4", rej, errp, &n) == 0 && n == 4);
    CHECK(rej[0].n_tokens == GEN && !rej[0].has_error && rej[2].n_tokens == GEN);
    CHECK(rej[1].has_error && !strcmp(rej[1].finish, "error") && rej[1].n_tokens == 0 && rej[1].index == 1);
    CHECK(rej[3].has_error && !strcmp(rej[3].finish, "error") && rej[3].n_tokens == 0 && rej[3].index == 3);

    /* Usage errors. */
    char *out = NULL;
    snprintf(cmd, sizeof cmd, "'%s' run -m '%s' --tokenizer '%s' -f '%s' --max-num-seqs 0 2>/dev/null", bin, model, tokfile, file);
    CHECK(capture(cmd, &out) == 2);
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' run -m '%s' --tokenizer '%s' -f '%s' --kv-mem 12Q 2>/dev/null", bin, model, tokfile, file);
    CHECK(capture(cmd, &out) == 2);
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' run -m '%s' --tokenizer '%s' -f '%s/no-such-file' 2>/dev/null", bin, model, tokfile, tmp);
    CHECK(capture(cmd, &out) == 1);
    free(out);
    return check_summary("test_engine_cli");
}
