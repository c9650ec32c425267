/* llama2.c checkpoints (legacy "v0" layout): a 7 x int32 header (dim, hidden_dim, n_layers, n_heads,
 * n_kv_heads, vocab_size, seq_len; a negative vocab_size means a separate classifier follows), then
 * float32 weights in a fixed order. The file must be exactly as long as the header implies: with no magic
 * number, that is what tells a checkpoint from any other .bin. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "format/modelfile_internal.h"

#define HEADER_BYTES 28
#define MAX_WIDTH (1 << 20)

typedef struct header {
    int32_t dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len;
} header;

static int32_t le_i32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* Empty string when plausible, else why not. */
static const char *implausible(const header *h) {
    if (h->dim <= 0 || h->dim > MAX_WIDTH) return "dim";
    if (h->hidden <= 0 || h->hidden > MAX_WIDTH) return "hidden_dim";
    if (h->n_layers <= 0 || h->n_layers > 4096) return "n_layers";
    if (h->n_heads <= 0 || h->n_heads > h->dim || h->dim % h->n_heads) return "n_heads";
    if (h->n_kv_heads <= 0 || h->n_kv_heads > h->n_heads || h->n_heads % h->n_kv_heads) return "n_kv_heads";
    if (h->vocab == 0 || h->vocab < -(1 << 24) || h->vocab > (1 << 24)) return "vocab_size";
    if (h->seq_len <= 0 || h->seq_len > (1 << 24)) return "seq_len";
    if ((h->dim / h->n_heads) % 2) return "n_heads (odd head size)";
    return "";
}

typedef struct layout {
    pith_model_file *f;
    const uint8_t *base;
    uint64_t pos; /* bytes, from the start of the file */
    pith_err *err;
} layout;

/* Adds `count` consecutive tensors of shape {ne0, ne1} (ne1 == 0 for vectors) named by fmt (with %d for
 * the layer when count > 1, or fixed when count == 1). Sizes were bounded by the header checks, so the
 * arithmetic cannot overflow; the file size was checked before any view is made. */
static int add(layout *l, const char *fmt, int count, int64_t ne0, int64_t ne1) {
    for (int i = 0; i < count; i++) {
        char name[64];
        snprintf(name, sizeof name, fmt, i);
        pith_tensor t = {.name = name, .type = PITH_F32, .n_dims = ne1 ? 2 : 1, .ne = {ne0, ne1 ? ne1 : 1, 1, 1}};
        t.nbytes = (size_t)(ne0 * (ne1 ? ne1 : 1)) * sizeof(float);
        if (l->f) {
            t.data = l->base + l->pos;
            if (pith_mf_add_tensor(l->f, &t, 1, l->err)) return -1;
        }
        l->pos += t.nbytes;
    }
    return 0;
}

/* Walks the layout; with f == NULL it only measures. */
static int walk(layout *l, const header *h) {
    int64_t dim = h->dim, hidden = h->hidden, vocab = h->vocab < 0 ? -(int64_t)h->vocab : h->vocab;
    int64_t head = dim / h->n_heads, kv_dim = head * h->n_kv_heads;
    int L = h->n_layers;
    l->pos = HEADER_BYTES;
    if (add(l, "token_embd.weight", 1, dim, vocab) || add(l, "blk.%d.attn_norm.weight", L, dim, 0) ||
        add(l, "blk.%d.attn_q.weight", L, dim, dim) || add(l, "blk.%d.attn_k.weight", L, dim, kv_dim) ||
        add(l, "blk.%d.attn_v.weight", L, dim, kv_dim) || add(l, "blk.%d.attn_output.weight", L, dim, dim) ||
        add(l, "blk.%d.ffn_norm.weight", L, dim, 0) || add(l, "blk.%d.ffn_gate.weight", L, dim, hidden) ||
        add(l, "blk.%d.ffn_down.weight", L, hidden, dim) || add(l, "blk.%d.ffn_up.weight", L, dim, hidden) ||
        add(l, "output_norm.weight", 1, dim, 0))
        return -1;
    l->pos += 2 * (uint64_t)h->seq_len * (uint64_t)(head / 2) * sizeof(float); /* freq_cis_real, freq_cis_imag */
    if (h->vocab < 0 && add(l, "output.weight", 1, dim, vocab)) return -1;
    return 0;
}

int pith_load_llama2c(pith_model_file *f, pith_err *err) {
    pith_mapped_file map;
    if (pith_mf_map(f, f->path, &map, err)) return -1;
    const pith_mapped_file *m = &map;
    if (m->size < HEADER_BYTES)
        return pith_errf(err, "%s: unrecognised model format (%zu bytes: too short for a llama2.c header)", f->path,
                         m->size);
    const uint8_t *p = m->base;
    header h = {le_i32(p), le_i32(p + 4), le_i32(p + 8), le_i32(p + 12), le_i32(p + 16), le_i32(p + 20),
                le_i32(p + 24)};
    const char *why = implausible(&h);
    if (*why)
        return pith_errf(err, "%s: unrecognised model format (not GGUF or safetensors, and not a plausible llama2.c "
                         "header: %s out of range in [%d, %d, %d, %d, %d, %d, %d])", f->path, why, h.dim, h.hidden,
                         h.n_layers, h.n_heads, h.n_kv_heads, h.vocab, h.seq_len);
    layout measure = {NULL, m->base, 0, err};
    walk(&measure, &h);
    if (measure.pos != m->size)
        return pith_errf(err, "%s: llama2.c header [dim %d, hidden %d, layers %d, heads %d, kv heads %d, vocab %d, "
                         "seq_len %d] implies %llu bytes, but the file has %zu", f->path, h.dim, h.hidden,
                         h.n_layers, h.n_heads, h.n_kv_heads, h.vocab, h.seq_len, (unsigned long long)measure.pos,
                         m->size);
    layout real = {f, m->base, 0, err};
    if (walk(&real, &h)) return -1;

    pith_hparams *hp = &f->hp;
    strcpy(hp->arch, "llama");
    hp->dim = h.dim;
    hp->ffn_dim = h.hidden;
    hp->n_layers = h.n_layers;
    hp->n_heads = h.n_heads;
    hp->n_kv_heads = h.n_kv_heads;
    hp->head_dim = h.dim / h.n_heads;
    hp->n_vocab = h.vocab < 0 ? -h.vocab : h.vocab;
    hp->ctx_len = h.seq_len;
    hp->norm_eps = 1e-5f;
    hp->rope_theta = 10000.0f;
    hp->rope_style = PITH_ROPE_ADJACENT;
    hp->bos_id = hp->n_vocab > 1 ? 1 : -1;
    hp->eos_id = hp->n_vocab > 2 ? 2 : -1;
    return 0;
}
