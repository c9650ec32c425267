/* GLM-4.5's MTP layer (model/glm4moe_mtp.c) as the loader takes it with pith_model_options.mtp, from the
 * GGUF files and Hugging Face directories tests/test_formats_glm4moe.c writes byte by byte (its writers
 * are reused: that file is included with its main renamed):
 *   - both formats load with the head: has_mtp, a draft cost in (0, 1], the memory of the head (one FULL
 *     group of the decoder's layers and the head's, a RECURRENT group of no layer holding dim floats);
 *   - each tensor the head reads, missing (GGUF and Hugging Face names) or of the wrong shape, is refused
 *     with a message naming it when the head is asked for, and changes nothing without it;
 *   - more than one MTP layer is refused with the head asked for. */
#define main test_formats_glm4moe_main
#include "test_formats_glm4moe.c"
#undef main

static void loads_with_head(const char *path, const char *what) {
    pith_model *m = NULL;
    pith_err err = {{0}};
    pith_model_options opt = {.mtp = true};
    CHECKF(pith_model_load(path, &opt, &m, &err) == 0, "%s: %s", what, err.msg);
    if (!m) return;
    const pith_mem_spec *ms = &m->mem;
    CHECKF(m->has_mtp && m->state_checkpoints && m->mtp_cost > 0 && m->mtp_cost <= 1, "%s: has_mtp %d cost %g", what,
           m->has_mtp, (double)m->mtp_cost);
    CHECKF(ms->n_groups == 2 && ms->groups[0].kind == PITH_MEM_FULL && ms->groups[0].n_layers == 4 &&
               ms->groups[0].layers[3] == 3 && ms->groups[1].kind == PITH_MEM_RECURRENT && ms->groups[1].n_layers == 0 &&
               ms->groups[1].state_bytes == DIM * sizeof(float),
           "%s: memory of %d groups", what, ms->n_groups);
    CHECK(pith_model_mem_layers(m) == 4);
    pith_model_free(m);
    /* without the head: the plain KV memory */
    m = NULL;
    CHECKF(pith_model_load(path, NULL, &m, &err) == 0, "%s: %s", what, err.msg);
    if (m) CHECK(!m->has_mtp && m->mem.n_groups == 1 && m->mem.groups[0].n_layers == 3);
    pith_model_free(m);
}

/* The head asked for: refused with a message naming want; without it the file loads. */
static void head_refused(const char *path, const char *want, const char *label) {
    pith_model *m = NULL;
    pith_err err = {{0}};
    pith_model_options opt = {.mtp = true};
    int rc = pith_model_load(path, &opt, &m, &err);
    CHECKF(rc != 0 && m == NULL, "%s: loaded with the head", label);
    CHECKF(rc != 0 && strstr(err.msg, want) && strstr(err.msg, "MTP"), "%s: want an error with '%s', got '%s'",
           label, want, err.msg);
    if (!rc) pith_model_free(m);
    m = NULL;
    CHECKF(pith_model_load(path, NULL, &m, &err) == 0, "%s: without the head: %s", label, err.msg);
    pith_model_free(m);
}

/* Swaps the two dimensions of a 2-D tensor in a GGUF file written by write_gguf (its bytes stay). */
static void swap_dims(const char *path, const char *tensor) {
    FILE *f = fopen(path, "r+b");
    CHECKF(f != NULL, "open %s", path);
    if (!f) return;
    static uint8_t data[1 << 22];
    size_t n = fread(data, 1, sizeof data, f);
    size_t len = strlen(tensor);
    bool done = false;
    for (size_t i = 8; !done && i + len + 4 + 16 <= n; i++) {
        uint64_t l;
        memcpy(&l, data + i - 8, 8);
        if (l != len || memcmp(data + i, tensor, len)) continue;
        uint32_t dims;
        memcpy(&dims, data + i + len, 4);
        CHECKF(dims == 2, "%s: %u dimensions", tensor, dims);
        uint8_t t[8];
        memcpy(t, data + i + len + 4, 8);
        memmove(data + i + len + 4, data + i + len + 12, 8);
        memcpy(data + i + len + 12, t, 8);
        fseek(f, (long)(i + len + 4), SEEK_SET);
        fwrite(data + i + len + 4, 1, 16, f);
        done = true;
    }
    fclose(f);
    CHECKF(done, "no tensor %s in %s", tensor, path);
}

static void test_mtp_gguf(void) {
    gspec s = base();
    loads_with_head(write_gguf("glmm-base.gguf", &s), "gguf");
    /* each tensor the head reads (layer 3: an expert layer), missing */
    static const char *const need[] = {
        "blk.3.nextn.eh_proj.weight", "blk.3.nextn.enorm.weight", "blk.3.nextn.hnorm.weight",
        "blk.3.nextn.shared_head_norm.weight", "blk.3.attn_norm.weight", "blk.3.attn_q.weight", "blk.3.attn_k.weight",
        "blk.3.attn_v.weight", "blk.3.attn_output.weight", "blk.3.attn_q.bias", "blk.3.attn_v.bias",
        "blk.3.post_attention_norm.weight", "blk.3.ffn_gate_inp.weight", "blk.3.exp_probs_b.bias",
        "blk.3.ffn_up_exps.weight", "blk.3.ffn_down_exps.weight", "blk.3.ffn_gate_shexp.weight",
    };
    for (size_t i = 0; i < sizeof need / sizeof *need; i++) {
        char name[64], label[96];
        snprintf(name, sizeof name, "glmm-drop%zu.gguf", i);
        snprintf(label, sizeof label, "no %s", need[i]);
        s = base(), s.drop = need[i];
        head_refused(write_gguf(name, &s), need[i], label);
    }
    /* of the wrong shape (transposed: the same bytes) */
    static const char *const shaped[] = {"blk.3.nextn.eh_proj.weight", "blk.3.attn_k.weight", "blk.3.attn_v.weight",
                                         "blk.3.ffn_gate_inp.weight"};
    for (size_t i = 0; i < sizeof shaped / sizeof *shaped; i++) {
        char name[64], label[96];
        snprintf(name, sizeof name, "glmm-shape%zu.gguf", i);
        snprintf(label, sizeof label, "%s transposed", shaped[i]);
        s = base();
        const char *path = write_gguf(name, &s);
        swap_dims(path, shaped[i]);
        head_refused(path, shaped[i], label);
    }
    /* two MTP layers: Pith runs one */
    s = base(), s.nextn = 2;
    head_refused(write_gguf("glmm-two.gguf", &s), "2 MTP layers", "two MTP layers");
}

static void test_mtp_hf(void) {
    gspec s = base();
    loads_with_head(write_hf("glmm-hf", &s, HF_BASE), "safetensors");
    static const char *const need[][2] = {
        {"model.layers.3.eh_proj.weight", "blk.3.nextn.eh_proj.weight"},
        {"model.layers.3.enorm.weight", "blk.3.nextn.enorm.weight"},
        {"model.layers.3.hnorm.weight", "blk.3.nextn.hnorm.weight"},
        {"model.layers.3.shared_head.norm.weight", "blk.3.nextn.shared_head_norm.weight"},
        {"model.layers.3.self_attn.q_proj.weight", "blk.3.attn_q.weight"},
        {"model.layers.3.mlp.gate.e_score_correction_bias", "blk.3.exp_probs_b.bias"},
        {"model.layers.3.mlp.experts.2.down_proj.weight", "ffn_down"},
    };
    for (size_t i = 0; i < sizeof need / sizeof *need; i++) {
        char name[64], label[128];
        snprintf(name, sizeof name, "glmm-hf-drop%zu", i);
        snprintf(label, sizeof label, "no %s", need[i][0]);
        s = base(), s.drop = need[i][0];
        head_refused(write_hf(name, &s, HF_BASE), need[i][1], label);
    }
}

int main(void) {
    test_mtp_gguf();
    test_mtp_hf();
    return check_summary("test_formats_glm4moe_mtp");
}
