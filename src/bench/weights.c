/* What one token costs a model: the weight bytes it reads and the multiply-adds it does.
 *
 * Counted from the file's tensors, not from the architecture: every 2-D tensor of a layer (blk.N.*) is a
 * matrix every token multiplies by, whatever the architecture calls it. Kernels that repack weights at
 * load time read a layout of about the same size; the file's size is the one a user can check.
 *
 * Mixture of experts: a token reads only the experts it is routed to, n_experts_used of n_experts in
 * every layer, so expert tensors (GGUF's 3-D blk.N.ffn_*_exps, one blk.N.ffn_*.E.weight per expert, or
 * Hugging Face's ...experts.E...) count that share of their bytes and parameters: the active bytes. */
#include <stdio.h>
#include <string.h>

#include "pith/bench.h"

typedef struct type_bytes {
    pith_dtype type;
    uint64_t bytes;
} type_bytes;

static bool is_quantized(pith_dtype t) { return pith_dtype_block_elems(t) > 1; }

static bool is_expert(const pith_tensor *t) {
    const char *p = strchr(t->name + 4, '.'); /* after "blk.N" */
    if (strstr(t->name, ".experts.")) return true;
    if (!p) return false;
    p++;
    if (t->n_dims == 3 && strstr(p, "_exps.")) return true;
    const char *kinds[] = {"ffn_gate.", "ffn_up.", "ffn_down."};
    for (int i = 0; i < 3; i++)
        if (!strncmp(p, kinds[i], strlen(kinds[i])) && p[strlen(kinds[i])] >= '0' && p[strlen(kinds[i])] <= '9')
            return true;
    return false;
}

static int add_type(type_bytes *tb, int *n, int cap, pith_dtype type, uint64_t bytes) {
    for (int i = 0; i < *n; i++) {
        if (tb[i].type == type) {
            tb[i].bytes += bytes;
            return 0;
        }
    }
    if (*n == cap) return -1;
    tb[*n].type = type;
    tb[*n].bytes = bytes;
    ++*n;
    return 0;
}

int pith_bench_weights_of(const pith_model *m, pith_bench_weights *w, pith_err *err) {
    memset(w, 0, sizeof *w);
    if (!m->file) return pith_errf(err, "the model has no file to count weights in");
    const pith_model_file *f = m->file;
    type_bytes tb[16];
    int n_types = 0;
    const pith_hparams *hp = pith_model_file_hparams(f);
    for (int i = 0; i < pith_model_file_n_tensors(f); i++) {
        const pith_tensor *t = pith_model_file_tensor_at(f, i);
        bool hf_expert = hp->n_experts > 0 && strstr(t->name, ".experts.") && !strncmp(t->name, "model.layers.", 13);
        if ((strncmp(t->name, "blk.", 4) != 0 && !hf_expert) || t->n_dims < 2) continue;
        int64_t ne = pith_tensor_nelems(t);
        if (ne < 0) return pith_errf(err, "%s: element count overflows", t->name);
        w->total_bytes += t->nbytes;
        if (hp->n_experts > 0 && is_expert(t)) {
            double share = (double)hp->n_experts_used / hp->n_experts;
            w->size_bytes += (uint64_t)((double)t->nbytes * share + 0.5);
            w->layer_params += (uint64_t)((double)ne * share + 0.5);
            w->expert_bytes += t->nbytes;
        } else {
            w->size_bytes += t->nbytes;
            w->layer_params += (uint64_t)ne;
        }
        if (add_type(tb, &n_types, 16, t->type, t->nbytes))
            return pith_errf(err, "more than 16 weight types in one model");
    }
    if (n_types == 0) return pith_errf(err, "the model has no layer weight matrices");

    const pith_tensor *embd = pith_model_file_tensor(f, "token_embd.weight");
    const pith_tensor *out = pith_model_file_tensor(f, "output.weight");
    if (!out) out = embd; /* tied */
    if (!embd || !out) return pith_errf(err, "the model has no token embedding");
    int64_t out_ne = pith_tensor_nelems(out);
    if (out_ne < 0) return pith_errf(err, "%s: element count overflows", out->name);
    w->size_bytes += out->nbytes + pith_dtype_row_bytes(embd->type, embd->ne[0]);
    w->total_bytes += out->nbytes + pith_dtype_row_bytes(embd->type, embd->ne[0]);
    w->output_params = (uint64_t)out_ne;

    /* Types by bytes, largest first (insertion sort: a handful at most). */
    for (int i = 1; i < n_types; i++) {
        type_bytes x = tb[i];
        int j = i;
        for (; j > 0 && tb[j - 1].bytes < x.bytes; j--) tb[j] = tb[j - 1];
        tb[j] = x;
    }
    w->type = tb[0].type;
    w->quantized = is_quantized(tb[0].type);
    size_t len = 0;
    for (int i = 0; i < n_types; i++) {
        int k = snprintf(w->format + len, sizeof w->format - len, "%s%s", i ? "+" : "", pith_dtype_name(tb[i].type));
        if (k < 0 || (size_t)k >= sizeof w->format - len) break;
        len += (size_t)k;
    }
    return 0;
}
