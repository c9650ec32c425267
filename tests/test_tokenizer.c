/* SentencePiece tokenizer from a llama2.c file (stories260K's tok512.bin) and the streaming
 * detokenizer.
 *
 * The reference text is what llama2.c produced by greedy decoding, and its token ids are the ids the
 * model generated; re-encoding the text must give back exactly those ids after BOS (the model's
 * greedy choices happen to be the tokenizer's own segmentation), and decoding them must give the text
 * byte for byte. The detokenizer tests feed byte-fallback pieces one at a time and check that no
 * output chunk is ever partial or invalid UTF-8. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "pith/tokenizer.h"
#include "test_tokenizer_util.h"

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
    }
    fclose(f);
    if (buf) buf[len] = '\0';
    *n = len;
    return buf;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

static int32_t byte_id(const pith_tokenizer *t, unsigned b) {
    char hex[8];
    snprintf(hex, sizeof hex, "<0x%02X>", b);
    for (int32_t id = 0; id < pith_tokenizer_n_vocab(t); id++) {
        size_t len;
        const char *s = pith_tokenizer_token_text(t, id, &len);
        if (len == 6 && memcmp(s, hex, 6) == 0) return id;
    }
    return -1;
}

static void test_reference(const pith_tokenizer *t, const char *dir) {
    char path[4300];
    size_t text_n, ids_n;
    snprintf(path, sizeof path, "%s/models/stories260K/reference/stories260K_greedy_text.txt", dir);
    char *text = slurp(path, &text_n);
    snprintf(path, sizeof path, "%s/models/stories260K/reference/stories260K_greedy_tokens.txt", dir);
    char *ids_txt = slurp(path, &ids_n);
    CHECK(text && ids_txt);
    if (!text || !ids_txt) return;
    int32_t ref[4096];
    int n_ref = 0;
    for (char *p = ids_txt, *end; n_ref < 4096; p = end) {
        long v = strtol(p, &end, 10);
        if (end == p) break;
        ref[n_ref++] = (int32_t)v;
    }
    CHECK(n_ref == 200);

    int32_t *ids;
    int n;
    pith_err err = {{0}};
    CHECK(pith_tokenizer_encode(t, text, text_n, PITH_TOK_ADD_BOS, &ids, &n, &err) == 0);
    CHECKF(n == n_ref + 1, "encoded %d ids, reference %d + BOS", n, n_ref);
    CHECK(n > 0 && ids[0] == 1);
    int first_diff = -1;
    for (int i = 0; i < n_ref && i + 1 < n; i++)
        if (ids[i + 1] != ref[i] && first_diff < 0) first_diff = i;
    CHECKF(first_diff < 0, "first difference at reference token %d", first_diff);
    free(ids);

    /* Without BOS the ids are the same minus the BOS. */
    CHECK(pith_tokenizer_encode(t, text, text_n, 0, &ids, &n, &err) == 0);
    CHECK(n == n_ref && memcmp(ids, ref, (size_t)n_ref * sizeof *ids) == 0);
    free(ids);

    char *dec;
    size_t dec_n;
    CHECK(pith_tokenizer_decode(t, ref, n_ref, false, &dec, &dec_n, &err) == 0);
    CHECKF(dec_n == text_n && memcmp(dec, text, text_n) == 0, "decoded text differs from the reference");
    free(dec);

    /* Streaming, after BOS as in generation: same text, chunk by chunk. */
    pith_detok d;
    pith_detok_init(&d, t, false);
    char chunk[512], *acc = malloc(text_n + 1024);
    size_t acc_n = 0;
    acc_n += pith_detok_push(&d, 1, chunk, sizeof chunk);
    for (int i = 0; i < n_ref; i++) {
        size_t got = pith_detok_push(&d, ref[i], chunk, sizeof chunk);
        CHECK(strlen(chunk) == got);
        memcpy(acc + acc_n, chunk, got);
        acc_n += got;
    }
    acc_n += pith_detok_flush(&d, acc + acc_n, 16);
    CHECK(acc_n == text_n && memcmp(acc, text, text_n) == 0);

    /* Continuing after a prompt: skip BOS + the first k ids (k: the first token from 5 on that starts
     * with a space), then the rest streams out exactly as the text's remainder, leading space
     * included; a prompt of BOS alone still drops it. */
    int k = 5;
    while (k < n_ref - 1) {
        size_t len;
        const char *s = pith_tokenizer_token_text(t, ref[k], &len);
        if (len > 0 && s[0] == ' ') break;
        k++;
    }
    int32_t prompt[201] = {1};
    memcpy(prompt + 1, ref, (size_t)k * sizeof *ref);
    char *head;
    size_t head_n;
    CHECK(pith_tokenizer_decode(t, ref, k, false, &head, &head_n, &err) == 0);
    pith_detok_init(&d, t, false);
    pith_detok_skip(&d, prompt, k + 1);
    acc_n = 0;
    for (int i = k; i < n_ref; i++) acc_n += pith_detok_push(&d, ref[i], acc + acc_n, 512);
    acc_n += pith_detok_flush(&d, acc + acc_n, 16);
    CHECK(head_n + acc_n == text_n && memcmp(head, text, head_n) == 0 && memcmp(acc, text + head_n, acc_n) == 0);
    CHECK(acc_n > 0 && acc[0] == ' ');
    free(head);
    pith_detok_init(&d, t, false);
    pith_detok_skip(&d, prompt, 1);
    size_t got = pith_detok_push(&d, ref[0], chunk, sizeof chunk);
    CHECK(got > 0 && chunk[0] != ' ' && memcmp(chunk, text, got) == 0);
    free(acc);
    free(text);
    free(ids_txt);
}

static void test_basics(const pith_tokenizer *t) {
    pith_err err = {{0}};
    CHECK(pith_tokenizer_n_vocab(t) == 512);
    CHECK(pith_tokenizer_bos(t) == 1 && pith_tokenizer_eos(t) == 2);
    CHECK(pith_tokenizer_is_eog(t, 2) && !pith_tokenizer_is_eog(t, 1) && !pith_tokenizer_is_eog(t, 300));
    CHECK(pith_tokenizer_is_special(t, 1) && pith_tokenizer_is_special(t, 2) && !pith_tokenizer_is_special(t, 300));
    CHECK(pith_tokenizer_token_text(t, 512, NULL) == NULL && pith_tokenizer_token_text(t, -1, NULL) == NULL);

    int32_t *ids;
    int n;
    CHECK(pith_tokenizer_encode(t, "", 0, PITH_TOK_ADD_BOS, &ids, &n, &err) == 0 && n == 1 && ids[0] == 1);
    free(ids);
    CHECK(pith_tokenizer_encode(t, "", 0, 0, &ids, &n, &err) == 0 && n == 0 && ids != NULL);
    free(ids);

    /* Characters outside the 512-token vocabulary fall back to their UTF-8 bytes and come back intact. */
    const char *mixed = "Caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82 <s> tab\there\n";
    CHECK(pith_tokenizer_encode(t, mixed, strlen(mixed), 0, &ids, &n, &err) == 0);
    int n_bytes = 0;
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *s = pith_tokenizer_token_text(t, ids[i], &len);
        if (len == 6 && memcmp(s, "<0x", 3) == 0) n_bytes++;
        CHECK(ids[i] != 1 && ids[i] != 2); /* llama2.c files never parse special texts */
    }
    CHECK(n_bytes >= 4 + 6); /* at least the emoji and the CJK bytes */
    char *dec;
    size_t dec_n;
    CHECK(pith_tokenizer_decode(t, ids, n, false, &dec, &dec_n, &err) == 0);
    CHECK(dec_n == strlen(mixed) && memcmp(dec, mixed, dec_n) == 0);
    free(dec);
    free(ids);

    /* keep_special shows BOS's stored text; the default skips it. */
    int32_t seq[] = {1, 403};
    CHECK(pith_tokenizer_decode(t, seq, 2, true, &dec, &dec_n, &err) == 0);
    CHECK(dec_n >= 5 && memcmp(dec, "\n<s>\n", 5) == 0);
    free(dec);
    CHECK(pith_tokenizer_decode(t, seq, 2, false, &dec, &dec_n, &err) == 0);
    CHECK(dec_n > 0 && dec[0] != ' ' && dec[0] != '\n');
    free(dec);
    /* Out-of-range ids decode to nothing rather than failing. */
    int32_t bad[] = {-5, 100000, 403};
    CHECK(pith_tokenizer_decode(t, bad, 3, false, &dec, &dec_n, &err) == 0 && dec_n > 0);
    free(dec);
}

static void test_detok_utf8(const pith_tokenizer *t) {
    pith_detok d;
    char out[512];
    int32_t b[256];
    for (unsigned i = 0; i < 256; i++) b[i] = byte_id(t, i);
    CHECK(b[0xC3] >= 0 && b[0xA9] >= 0 && b[0xF0] >= 0);

    /* A two-byte and a four-byte character arrive one byte per token: nothing until complete. */
    pith_detok_init(&d, t, false);
    d.at_start = false;
    CHECK(pith_detok_push(&d, b[0xC3], out, sizeof out) == 0 && out[0] == '\0');
    CHECK(pith_detok_push(&d, b[0xA9], out, sizeof out) == 2 && memcmp(out, "\xc3\xa9", 2) == 0);
    const unsigned char emoji[4] = {0xF0, 0x9F, 0x99, 0x82};
    for (int i = 0; i < 3; i++) CHECK(pith_detok_push(&d, b[emoji[i]], out, sizeof out) == 0);
    CHECK(pith_detok_push(&d, b[emoji[3]], out, sizeof out) == 4 && memcmp(out, emoji, 4) == 0);

    /* Invalid input becomes U+FFFD, never raw bytes: a stray continuation, a lead byte followed by
     * ASCII, an impossible byte, an overlong lead, and a sequence cut off at flush. */
    CHECK(pith_detok_push(&d, b[0x80], out, sizeof out) == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0);
    CHECK(pith_detok_push(&d, b[0xE2], out, sizeof out) == 0);
    CHECK(pith_detok_push(&d, b['A'], out, sizeof out) == 4 && memcmp(out, "\xef\xbf\xbd" "A", 4) == 0);
    CHECK(pith_detok_push(&d, b[0xFF], out, sizeof out) == 3);
    CHECK(pith_detok_push(&d, b[0xC0], out, sizeof out) == 3);
    CHECK(pith_detok_push(&d, b[0xE0], out, sizeof out) == 0);
    CHECK(pith_detok_push(&d, b[0x80], out, sizeof out) == 6); /* E0 80 is overlong: two replacements */
    CHECK(pith_detok_push(&d, b[0xF0], out, sizeof out) == 0);
    CHECK(pith_detok_push(&d, b[0x9F], out, sizeof out) == 0);
    CHECK(pith_detok_flush(&d, out, sizeof out) == 3 && memcmp(out, "\xef\xbf\xbd", 3) == 0);
    CHECK(pith_detok_flush(&d, out, sizeof out) == 0);
    /* A tiny buffer never gets a partial character: the 'é' does not fit in 2 bytes with its NUL. */
    CHECK(pith_detok_push(&d, b[0xC3], out, 2) == 0);
    CHECK(pith_detok_push(&d, b[0xA9], out, 2) == 0 && out[0] == '\0');

    /* Random byte streams, valid UTF-8 or not: every chunk is valid UTF-8 on its own; for valid input
     * the chunks concatenate to the input exactly. */
    for (int round = 0; round < 200; round++) {
        bool make_valid = round % 2 == 0;
        unsigned char in[256];
        size_t in_n = 0;
        while (in_n < 200) {
            if (!make_valid) {
                in[in_n++] = (unsigned char)rnd();
                continue;
            }
            uint32_t cp;
            do cp = rnd() % 0x110000; while (cp >= 0xD800 && cp <= 0xDFFF);
            if (rnd() % 2) cp %= 0x800;
            if (cp < 0x80) in[in_n++] = (unsigned char)cp;
            else if (cp < 0x800) in[in_n++] = (unsigned char)(0xC0 | cp >> 6), in[in_n++] = (unsigned char)(0x80 | (cp & 0x3F));
            else if (cp < 0x10000) {
                in[in_n++] = (unsigned char)(0xE0 | cp >> 12);
                in[in_n++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                in[in_n++] = (unsigned char)(0x80 | (cp & 0x3F));
            } else {
                in[in_n++] = (unsigned char)(0xF0 | cp >> 18);
                in[in_n++] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
                in[in_n++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                in[in_n++] = (unsigned char)(0x80 | (cp & 0x3F));
            }
        }
        char acc[2048];
        size_t acc_n = 0;
        bool chunks_valid = true;
        pith_detok_init(&d, t, false);
        d.at_start = false;
        for (size_t i = 0; i < in_n; i++) {
            size_t got = pith_detok_push(&d, b[in[i]], out, sizeof out);
            if (!tt_valid_utf8(out, got)) chunks_valid = false;
            memcpy(acc + acc_n, out, got);
            acc_n += got;
        }
        size_t got = pith_detok_flush(&d, out, sizeof out);
        if (!tt_valid_utf8(out, got)) chunks_valid = false;
        memcpy(acc + acc_n, out, got);
        acc_n += got;
        CHECK(chunks_valid);
        if (make_valid) CHECK(acc_n == in_n && memcmp(acc, in, in_n) == 0);
    }
}

static void test_robustness(const pith_tokenizer *t) {
    pith_err err = {{0}};
    /* Random bytes of every length class: no crash, decodes to valid UTF-8. */
    for (int round = 0; round < 100; round++) {
        size_t n = rnd() % 3000;
        char *buf = malloc(n + 1);
        for (size_t i = 0; i < n; i++) buf[i] = (char)rnd();
        int32_t *ids;
        int n_ids;
        CHECK(pith_tokenizer_encode(t, buf, n, PITH_TOK_ADD_BOS | PITH_TOK_PARSE_SPECIAL, &ids, &n_ids, &err) == 0);
        char *dec;
        size_t dec_n;
        CHECK(pith_tokenizer_decode(t, ids, n_ids, false, &dec, &dec_n, &err) == 0);
        CHECK(tt_valid_utf8(dec, dec_n));
        free(dec);
        free(ids);
        free(buf);
    }
    /* 1 MB of one character and 1 MB of spaces: linearithmic merging keeps this well under a second. */
    const char fills[] = {'a', ' '};
    for (int k = 0; k < 2; k++) {
        size_t n = 1 << 20;
        char *buf = malloc(n);
        memset(buf, fills[k], n);
        clock_t c0 = clock();
        int32_t *ids;
        int n_ids;
        CHECK(pith_tokenizer_encode(t, buf, n, 0, &ids, &n_ids, &err) == 0);
        double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
        CHECKF(secs < 20, "1 MB encode took %.1f s", secs);
        char *dec;
        size_t dec_n;
        CHECK(pith_tokenizer_decode(t, ids, n_ids, false, &dec, &dec_n, &err) == 0);
        CHECK(dec_n == n && memcmp(dec, buf, n) == 0);
        free(dec);
        free(ids);
        free(buf);
    }
}

static void test_bad_files(const char *tmp) {
    pith_err err = {{0}};
    pith_tokenizer *t = NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/tok_bad.bin", tmp ? tmp : ".");
    /* A length that runs past the end, a negative length, and too few tokens for n_vocab. */
    const unsigned char cases[][16] = {
        {7, 0, 0, 0, 0, 0, 0, 0, 100, 0, 0, 0, 'a', 'b'},
        {7, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 'a', 'b'},
        {7, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 'a', 'b'},
    };
    for (int i = 0; i < 3; i++) {
        FILE *f = fopen(path, "wb");
        CHECK(f != NULL);
        if (!f) return;
        fwrite(cases[i], 1, 14, f);
        fclose(f);
        err.msg[0] = '\0';
        CHECK(pith_tokenizer_load_llama2c(path, i == 2 ? 5 : 0, &t, &err) == -1 && t == NULL);
        CHECK(strstr(err.msg, "tok_bad.bin") != NULL);
    }
    CHECK(pith_tokenizer_load_llama2c("/nonexistent/tok.bin", 0, &t, &err) == -1 && t == NULL);
}

int main(void) {
    test_bad_files(getenv("PITH_TEST_TMP"));
    const char *dir = check_shared_dir();
    if (!dir) return check_failures_ ? check_summary("test_tokenizer") : CHECK_SKIP; /* the checks above need no assets */
    char path[4200];
    snprintf(path, sizeof path, "%s/models/stories260K/tok512.bin", dir);
    pith_tokenizer *t;
    pith_err err = {{0}};
    if (pith_tokenizer_load_llama2c(path, 512, &t, &err) != 0) {
        fprintf(stderr, "load: %s\n", err.msg);
        return 1;
    }
    test_basics(t);
    test_reference(t, dir);
    test_detok_utf8(t);
    test_robustness(t);
    pith_tokenizer_free(t);
    return check_summary("test_tokenizer");
}
