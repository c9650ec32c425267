/* Loading weights for a reload or a wake (under --tp, on every rank: pith_dist_reload), and checking that
 * new weights can replace the served ones:
 * the engine checks architecture, shapes and memory layout (pith_engine_swap_model); here the
 * tokenizer, when the new weights carry one (a GGUF with tokenizer metadata, a directory with
 * tokenizer.json), must be the served one token for token. A safetensors directory of weights alone, as
 * trainers write them, carries none and keeps the served tokenizer. */
#include "server/admin.h"

#include <string.h>

#include "pith/dist.h"

int admin_load_model(pith_server *srv, const char *path, pith_model **out, pith_err *err) {
    pith_model_options mo = {.n_threads = srv->n_threads, .mtp = srv->engine_opt.spec_type == PITH_SPEC_MTP,
                             .device = srv->device,
                             .gpu_layers = srv->gpu_layers, .n_cpu_moe = srv->n_cpu_moe, .no_ep = srv->no_ep};
    /* under --tp / --pp every rank loads its shard, with the served model's job (pith/dist.h) */
    if (srv->comm) return pith_dist_reload(srv->model ? srv->model : srv->asleep_job, path, &mo, out, err);
    return pith_model_load(path, &mo, out, err);
}

/* A token's bytes as they read in the middle of a text. */
static size_t decoded(const pith_tokenizer *t, int32_t id, char out[1024]) {
    pith_detok d;
    pith_detok_init(&d, t, false);
    d.at_start = false;
    size_t n = pith_detok_push(&d, id, out, 1024);
    return n + pith_detok_flush(&d, out + n, 1024 - n);
}

int admin_check_tokenizer(pith_server *srv, const char *path, pith_err *err) {
    pith_tokenizer *t = NULL;
    pith_err why;
    if (pith_tokenizer_load(path, 0, &t, &why)) {
        server_log(srv, PITH_LOG_INFO, "reload: the new weights carry no tokenizer of their own (%s); keeping the served one", why.msg);
        return 0;
    }
    const pith_tokenizer *cur = srv->tok;
    int n = pith_tokenizer_n_vocab(cur);
    int rc = 0;
    if (pith_tokenizer_n_vocab(t) != n) {
        rc = pith_errf(err, "the new tokenizer has %d tokens, the served one %d", pith_tokenizer_n_vocab(t), n);
    } else if (pith_tokenizer_bos(t) != pith_tokenizer_bos(cur) || pith_tokenizer_eos(t) != pith_tokenizer_eos(cur)) {
        rc = pith_errf(err, "the new tokenizer's BOS or EOS token differs from the served one's");
    } else {
        /* Tokens are compared by what they decode to, special ones by id only (BOS and EOS above):
         * formats spell pieces differently (SentencePiece's '\xe2\x96\x81' is a space in a llama2.c
         * tokenizer.bin, which also writes BOS as "\n<s>\n"). */
        for (int32_t id = 0; id < n && !rc; id++) {
            if (pith_tokenizer_is_special(cur, id) || pith_tokenizer_is_special(t, id)) continue;
            char a[1024], b[1024];
            size_t la = decoded(cur, id, a), lb = decoded(t, id, b);
            if (la != lb || memcmp(a, b, la))
                rc = pith_errf(err, "the new tokenizer differs from the served one at token %d", (int)id);
        }
    }
    pith_tokenizer_free(t);
    return rc;
}
