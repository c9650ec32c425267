/* SmolLM3: a Llama (same tensors and names, pith_llama_build) in which some layers apply no RoPE
 * ("NoPE"). See model/arch.h.
 *
 * config.json: "no_rope_layers" lists one int per layer, 1 = RoPE, 0 = no RoPE; without it,
 * "no_rope_layer_interval" N (default 4) leaves layer l without RoPE iff (l + 1) % N == 0 (layers 3, 7,
 * 11, ...), as transformers derives it. A sliding window exists only under "use_sliding_window": true,
 * on the layers "layer_types" marks "sliding_attention" (else on the NoPE layers, as transformers
 * derives it).
 * GGUF (arch "smollm3"): llama.cpp has no key for it and hard-codes the interval 4, so it is 4 here.
 * convert_hf_to_gguf.py converts SmolLM3 as a Llama, permuting Q and K, so GGUF rotates adjacent pairs. */
#include <string.h>

#include "model/llama.h"
#include "model/llama_arch.h"

#define GGUF_NO_ROPE_INTERVAL 4

static void no_rope_every(pith_hparams *hp, int interval) {
    for (int l = 0; l < hp->n_layers && l < PITH_MAX_LAYERS; l++)
        pith_layer_set(hp->layer_no_rope, l, (l + 1) % interval == 0);
}

static int smollm3_read_gguf(const pith_meta *m, pith_hparams *hp) {
    (void)m;
    no_rope_every(hp, GGUF_NO_ROPE_INTERVAL);
    return 0;
}

static int smollm3_read_hf(const pith_meta *m, pith_hparams *hp) {
    bool found, use_window = false;
    if (pith_meta_layers(m, "no_rope_layers", hp->n_layers, "0", hp->layer_no_rope, &found)) return -1;
    if (!found) {
        int interval = 4;
        if (pith_meta_int(m, "no_rope_layer_interval", false, &interval)) return -1;
        if (interval < 1)
            return pith_errf(m->err, "%s: \"no_rope_layer_interval\" is %d, expected a positive count", m->path,
                             interval);
        no_rope_every(hp, interval);
    }
    if (pith_meta_bool(m, "use_sliding_window", &use_window) ||
        (use_window && pith_meta_int(m, "sliding_window", false, &hp->sliding_window)))
        return -1;
    if (!use_window || hp->sliding_window <= 0) {
        hp->sliding_window = 0;
        return 0;
    }
    if (pith_meta_layers(m, "layer_types", hp->n_layers, "sliding_attention", hp->layer_swa, &found)) return -1;
    if (!found) memcpy(hp->layer_swa, hp->layer_no_rope, sizeof hp->layer_swa);
    return 0;
}

const pith_arch pith_arch_smollm3 = {
    .name = "smollm3",
    .hf_archs = (const char *const[]){"SmolLM3ForCausalLM", NULL},
    .hf_model_types = (const char *const[]){"smollm3", NULL},
    .rope_gguf = PITH_ROPE_ADJACENT,
    .rope_hf = PITH_ROPE_HALF,
    .hf_global = pith_llama_hf_global,
    .hf_layer = pith_llama_hf_layer,
    .global = pith_llama_global,
    .layer = pith_llama_layer,
    .read_gguf = smollm3_read_gguf,
    .read_hf = smollm3_read_hf,
    .finish = pith_llama_finish,
    .build = pith_llama_build,
};
