/* llama2.c checkpoints: the shared stories260K model, and a synthetic one with a separate classifier
 * (negative vocab_size), each tensor checked against the byte offsets the layout implies. */
#include "check.h"
#include "pith/modelfile.h"
#include "test_formats_util.h"

typedef struct expect {
    const char *name;
    int64_t ne0, ne1;
    size_t offset; /* bytes from the start of the file */
} expect;

/* The llama2.c v0 layout, written out independently of the loader. */
static int expected_layout(const int32_t h[7], expect *out, char names[][48]) {
    int64_t dim = h[0], hidden = h[1], L = h[2], heads = h[3], kvh = h[4], vocab = h[5] < 0 ? -h[5] : h[5];
    int64_t kv_dim = dim / heads * kvh;
    size_t off = 28;
    int n = 0;
#define EMIT(fmt, l, a, b)                                                       \
    do {                                                                         \
        snprintf(names[n], 48, fmt, l);                                          \
        out[n] = (expect){names[n], a, b, off};                                  \
        off += (size_t)((a) * (b)) * 4;                                          \
        n++;                                                                     \
    } while (0)
    EMIT("token_embd.weight%.0d", 0, dim, vocab);
    for (int l = 0; l < L; l++) EMIT("blk.%d.attn_norm.weight", l, dim, 1);
    for (int l = 0; l < L; l++) EMIT("blk.%d.attn_q.weight", l, dim, dim);
    for (int l = 0; l < L; l++) EMIT("blk.%d.attn_k.weight", l, dim, kv_dim);
    for (int l = 0; l < L; l++) EMIT("blk.%d.attn_v.weight", l, dim, kv_dim);
    for (int l = 0; l < L; l++) EMIT("blk.%d.attn_output.weight", l, dim, dim);
    for (int l = 0; l < L; l++) EMIT("blk.%d.ffn_norm.weight", l, dim, 1);
    for (int l = 0; l < L; l++) EMIT("blk.%d.ffn_gate.weight", l, dim, hidden);
    for (int l = 0; l < L; l++) EMIT("blk.%d.ffn_down.weight", l, hidden, dim);
    for (int l = 0; l < L; l++) EMIT("blk.%d.ffn_up.weight", l, dim, hidden);
    EMIT("output_norm.weight%.0d", 0, dim, 1);
    off += (size_t)(2 * h[6] * (dim / heads / 2)) * 4;
    if (h[5] < 0) EMIT("output.weight%.0d", 0, dim, vocab);
#undef EMIT
    return n;
}

static void check_file(const char *path, const int32_t h[7]) {
    FILE *fp = fopen(path, "rb");
    CHECK(fp != NULL);
    if (!fp) return;
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *bytes = malloc((size_t)size);
    CHECK(bytes && fread(bytes, 1, (size_t)size, fp) == (size_t)size);
    fclose(fp);

    pith_model_file *f;
    pith_err err = {{0}};
    int rc = pith_model_file_open(path, &f, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (rc) {
        free(bytes);
        return;
    }
    const pith_hparams *hp = pith_model_file_hparams(f);
    CHECK(pith_model_file_format(f) == PITH_FORMAT_LLAMA2C);
    CHECK(!strcmp(hp->arch, "llama") && hp->rope_style == PITH_ROPE_ADJACENT);
    CHECK(hp->dim == h[0] && hp->ffn_dim == h[1] && hp->n_layers == h[2] && hp->n_heads == h[3]);
    CHECK(hp->n_kv_heads == h[4] && hp->n_vocab == abs(h[5]) && hp->ctx_len == h[6]);
    CHECK(hp->head_dim == h[0] / h[3]);
    CHECK(hp->norm_eps == 1e-5f && hp->rope_theta == 10000.0f && hp->bos_id == 1 && hp->eos_id == 2);
    CHECK(hp->tied_embeddings == (h[5] > 0));
    CHECK(!hp->has_qkv_bias && !hp->has_qk_norm && hp->rope_scale_factor == 0);
    CHECK(pith_model_file_gguf(f) == NULL && pith_model_file_dir(f) == NULL);
    expect want[8 + 9 * 8];
    char names[8 + 9 * 8][48];
    int n = expected_layout(h, want, names);
    CHECK(pith_model_file_n_tensors(f) == n);
    for (int i = 0; i < n; i++) {
        const pith_tensor *t = pith_model_file_tensor(f, want[i].name);
        CHECKF(t != NULL, "%s missing", want[i].name);
        if (!t) continue;
        CHECK(t->type == PITH_F32 && t->ne[0] == want[i].ne0 && t->ne[1] == want[i].ne1);
        CHECK(t->nbytes == (size_t)(want[i].ne0 * want[i].ne1) * 4);
        CHECKF(!memcmp(t->data, bytes + want[i].offset, t->nbytes), "%s bytes", want[i].name);
    }
    pith_model_file_close(f);
    free(bytes);
}

static void test_stories(const char *shared) {
    char path[4096];
    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.bin", shared);
    /* the header values the shared README documents */
    const int32_t h[7] = {64, 172, 5, 8, 4, 512, 512};
    check_file(path, h);
}

static void test_separate_classifier(void) {
    const int32_t h[7] = {16, 24, 2, 4, 2, -20, 8};
    buf b = {0};
    for (int i = 0; i < 7; i++) put_u32(&b, (uint32_t)h[i]);
    int64_t dim = 16, hidden = 24, L = 2, kv = 8, vocab = 20, seq = 8, head = 4;
    int64_t floats = vocab * dim + L * dim * 2 + L * (2 * dim * dim + 2 * kv * dim) + 3 * L * hidden * dim + dim +
                     seq * head + vocab * dim;
    uint64_t s = 3;
    for (int64_t i = 0; i < floats; i++) put_f32(&b, (float)(test_rng(&s) % 1000) / 1000.0f);
    const char *path = tmp_path("classifier.bin");
    CHECK(write_file(path, b.p, b.n) == 0);
    check_file(path, h);
    buf_free(&b);
}

int main(void) {
    const char *shared = check_shared_dir();
    test_separate_classifier();
    if (!shared) {
        printf("SKIP: stories260K not checked\n");
        return check_failures_ ? 1 : CHECK_SKIP;
    }
    test_stories(shared);
    return check_summary("test_llama2c");
}
