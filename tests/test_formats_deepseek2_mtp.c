/* DeepSeek-V3's MTP layer (model/deepseek2_mtp.c) as the loader takes it with pith_model_options.mtp, from the
 * GGUF files and Hugging Face directories tests/test_formats_deepseek2.c writes byte by byte (its writers are
 * reused, with a whole nextn layer: that file is included with its main renamed):
 *   - both formats load with the head: has_mtp, a draft cost in (0, 1], the memory of the head (one FULL
 *     group of latent rows for the decoder's layers and the head's, a RECURRENT group of no layer holding
 *     dim floats), and without it the plain memory;
 *   - each tensor the head reads, missing (GGUF and Hugging Face names), is refused with a message naming
 *     it when the head is asked for, and changes nothing without it;
 *   - more than one MTP layer is refused with the head asked for. */
#define main test_formats_deepseek2_main
#include "test_formats_deepseek2.c"
#undef main

static void loads_with_head(const char *path, const char *what) {
    pith_model *m = NULL;
    pith_err err = {{0}};
    pith_model_options opt = {.n_threads = 1, .mtp = true};
    CHECKF(pith_model_load(path, &opt, &m, &err) == 0, "%s: %s", what, err.msg);
    if (!m) return;
    const pith_mem_spec *ms = &m->mem;
    CHECKF(m->has_mtp && m->state_checkpoints && m->mtp_cost > 0 && m->mtp_cost <= 1, "%s: has_mtp %d cost %g", what,
           m->has_mtp, (double)m->mtp_cost);
    CHECKF(ms->n_groups == 2 && ms->groups[0].kind == PITH_MEM_FULL && ms->groups[0].n_layers == LAYERS + 1 &&
               ms->groups[0].layers[LAYERS] == LAYERS && ms->groups[0].k_dim == RANK + ROPE &&
               ms->groups[0].v_dim == 0 && ms->groups[1].kind == PITH_MEM_RECURRENT && ms->groups[1].n_layers == 0 &&
               ms->groups[1].state_bytes == DIM * sizeof(float),
           "%s: memory of %d groups", what, ms->n_groups);
    pith_model_free(m);
    m = NULL;
    pith_model_options plain = {.n_threads = 1};
    CHECKF(pith_model_load(path, &plain, &m, &err) == 0, "%s: %s", what, err.msg);
    if (m) CHECK(!m->has_mtp && m->mem.n_groups == 1 && m->mem.groups[0].n_layers == LAYERS);
    pith_model_free(m);
}

/* The head asked for: refused with a message naming want; without it the file loads. */
static void head_refused(const char *path, const char *want, const char *label) {
    pith_model *m = NULL;
    pith_err err = {{0}};
    pith_model_options opt = {.n_threads = 1, .mtp = true};
    int rc = pith_model_load(path, &opt, &m, &err);
    CHECKF(rc != 0 && m == NULL, "%s: loaded with the head", label);
    CHECKF(rc != 0 && strstr(err.msg, want) && strstr(err.msg, "MTP"), "%s: want an error with '%s', got '%s'",
           label, want, err.msg);
    if (!rc) pith_model_free(m);
    m = NULL;
    pith_model_options plain = {.n_threads = 1};
    CHECKF(pith_model_load(path, &plain, &m, &err) == 0, "%s: without the head: %s", label, err.msg);
    pith_model_free(m);
}

int main(void) {
    variant head = {.nextn = 1, .full_head = true};
    loads_with_head(write_gguf("ds2-mtp.gguf", &head), "GGUF");
    hf_full_head = true;
    loads_with_head(write_hf("ds2-mtp-hf", "\"num_nextn_predict_layers\": 1, ", true, true), "Hugging Face");
    /* each tensor the head reads, missing (GGUF names; the head's layer is blk.2) */
    static const char *const gguf_missing[] = {
        "blk.2.nextn.eh_proj.weight", "blk.2.nextn.enorm.weight", "blk.2.nextn.hnorm.weight",
        "blk.2.nextn.shared_head_norm.weight", "blk.2.attn_norm.weight", "blk.2.attn_q_a.weight",
        "blk.2.attn_q_b.weight", "blk.2.attn_kv_a_mqa.weight", "blk.2.attn_kv_a_norm.weight", "blk.2.attn_k_b.weight",
        "blk.2.attn_output.weight", "blk.2.ffn_norm.weight", "blk.2.ffn_gate_inp.weight", "blk.2.exp_probs_b.bias",
        "blk.2.ffn_down_exps.weight", "blk.2.ffn_up_shexp.weight",
    };
    for (size_t i = 0; i < sizeof gguf_missing / sizeof *gguf_missing; i++) {
        variant v = head;
        v.skip_tensor = gguf_missing[i];
        /* attn_v_b without attn_k_b: the message names both ("missing tensor blk.2.attn_k_b.weight (it goes
         * with blk.2.attn_v_b.weight)"); every other message names its tensor */
        const char *want = gguf_missing[i];
        head_refused(write_gguf("ds2-mtp-bad.gguf", &v), want, gguf_missing[i]);
    }
    /* Hugging Face names */
    static const char *const hf_missing[][2] = {
        {"model.layers.2.eh_proj.weight", "eh_proj"},
        {"model.layers.2.enorm.weight", "enorm"},
        {"model.layers.2.hnorm.weight", "hnorm"},
        {"model.layers.2.shared_head.norm.weight", "shared_head_norm"},
        {"model.layers.2.self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa"},
        {"model.layers.2.mlp.gate.weight", "ffn_gate_inp"},
    };
    for (size_t i = 0; i < sizeof hf_missing / sizeof *hf_missing; i++) {
        hf_skip = hf_missing[i][0];
        head_refused(write_hf("ds2-mtp-hf-bad", "\"num_nextn_predict_layers\": 1, ", true, true), hf_missing[i][1],
                     hf_missing[i][0]);
    }
    hf_skip = NULL;
    /* two MTP layers (one written): the head refused, the decoder loads */
    variant two = {.nextn = 2, .full_head = true};
    head_refused(write_gguf("ds2-mtp-two.gguf", &two), "2 MTP layers", "two MTP layers");
    return check_summary("test_formats_deepseek2_mtp");
}
