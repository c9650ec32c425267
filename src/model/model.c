#include "pith/model.h"

#include <string.h>

#include "dist/comm.h"
#include "dist/lockstep.h"
#include "format/arch.h"
#include "format/printable.h"

int pith_model_load(const char *path, const pith_model_options *opt, pith_model **out, pith_err *err) {
    *out = NULL;
    pith_model_file *file;
    if (pith_model_file_open(path, &file, err)) return -1;
    const pith_hparams *hp = pith_model_file_hparams(file);
    pith_model_options defaults = {0};
    if (!opt) opt = &defaults;
    const pith_arch *arch = pith_arch_find(hp->arch);
    int rc;
    if ((opt->tp > 1 || opt->pp > 1) && !opt->comm) {
        rc = pith_errf(err, "--tp %d --pp %d needs the ranks' communicator (start with mpirun)", opt->tp, opt->pp);
    } else if (opt->mtp && hp->n_mtp_layers == 0 && arch) {
        rc = pith_errf(err, "%s: the file has no multi-token-prediction (MTP) layers", path);
    } else if (arch && arch->build) {
        rc = arch->build(file, opt, out, err);
        if (!rc && opt->mtp && !(*out)->has_mtp) {
            /* the message first: hp (and the name in it) belongs to the file, which the model frees */
            pith_errf(err, "%s: Pith cannot run the MTP layers of architecture '%s' yet", path, hp->arch);
            pith_model_free(*out);
            *out = NULL;
            return -1;
        }
    } else {
        char names[256], shown[PITH_PRINTABLE_CAP];
        rc = pith_errf(err, "%s: unsupported architecture '%s' (supported: %s)", path,
                       pith_printable(shown, sizeof shown, hp->arch, strlen(hp->arch)),
                       pith_arch_names(names, sizeof names, false));
    }
    /* the ranks agree on the load: one that failed (a stage without a layer of some group, memory) fails
     * them all, instead of leaving the others waiting for it */
    const bool dist = opt->comm && (opt->tp > 1 || opt->pp > 1);
    if (dist) {
        pith_err agree_err = {{0}};
        int v = rc ? pith_comm_rank(opt->comm) + 1 : 0;
        if (pith_comm_allreduce_max(opt->comm, &v, &agree_err)) v = -1;
        if (v != 0 && !rc) {
            pith_model_free(*out);
            *out = NULL;
            rc = v > 0 ? pith_errf(err, "%s: rank %d of %d failed to load the model (its standard error says why)", path,
                                   v - 1, pith_comm_size(opt->comm))
                       : pith_errf(err, "%s: %s", path, agree_err.msg);
            return rc;
        }
    }
    if (rc) {
        pith_model_file_close(file);
        return rc;
    }
    (*out)->tp = opt->tp > 1 ? opt->tp : 1;
    (*out)->pp = opt->pp > 1 ? opt->pp : 1;
    /* tensor and pipeline parallelism: rank 0 drives every rank's shard; the others hand theirs to
     * pith_dist_worker */
    if (opt->comm && ((*out)->tp > 1 || (*out)->pp > 1) && pith_comm_rank(opt->comm) == 0)
        return pith_dist_leader(*out, opt->comm, out, err);
    return 0;
}

int pith_model_prepare(pith_model *m, const pith_model_limits *lim, pith_err *err) {
    if (lim->max_batch_tokens < 1 || lim->max_num_seqs < 1 || lim->max_seq_len < 1 || lim->max_logits < 1)
        return pith_errf(err, "model limits must be positive");
    return m->ops->prepare ? m->ops->prepare(m, lim, err) : 0;
}

int pith_model_mem_alloc(pith_model *m, const pith_mem_layout *layout, pith_err *err) {
    if (!m->ops->mem_alloc) return pith_errf(err, "this model cannot allocate memory");
    if (layout->n_groups != m->mem.n_groups)
        return pith_errf(err, "memory layout of %d groups for a model that declared %d", layout->n_groups, m->mem.n_groups);
    return m->ops->mem_alloc(m, layout, err);
}

void pith_model_mem_free(pith_model *m) {
    if (m->ops->mem_free) m->ops->mem_free(m);
}

int pith_model_copy_blocks(pith_model *m, int group, const int32_t *src, const int32_t *dst, int n, pith_err *err) {
    if (!m->ops->copy_blocks) return pith_errf(err, "this model cannot copy memory blocks");
    if (group < 0 || group >= m->mem.n_groups)
        return pith_errf(err, "copy_blocks: this model has no memory group %d", group);
    if (n < 0) return pith_errf(err, "copy_blocks: negative count");
    return n ? m->ops->copy_blocks(m, group, src, dst, n, err) : 0;
}

int pith_model_forward(pith_model *m, const pith_batch *b, float *logits, pith_err *err) {
    if (b->n_groups != m->mem.n_groups)
        return pith_errf(err, "batch carries %d memory groups; the model declared %d", b->n_groups, m->mem.n_groups);
    if (b->want_hidden && (!m->has_hidden || !b->hidden))
        return pith_errf(err, m->has_hidden ? "batch asks for hidden states without a buffer" : "this model cannot return hidden states");
    if (b->embed_rows && (!m->has_embeds || !b->embeds))
        return pith_errf(err, m->has_embeds ? "batch names embedding rows without embeddings" : "this model takes no image inputs");
    if (b->embed_rows && b->embed_stride && b->embed_stride != m->hp.dim * (m->embed_parts > 1 ? m->embed_parts : 1))
        return pith_errf(err, "batch embedding rows of %d floats; this model reads rows of %d", b->embed_stride,
                         m->hp.dim * (m->embed_parts > 1 ? m->embed_parts : 1));
    if (b->rope_pos && !m->has_mrope)
        return pith_errf(err, "this model's RoPE takes one position per token (the batch gives M-RoPE positions)");
    if (b->attend_last && !m->bidirectional_spans)
        return pith_errf(err, "this model's attention is causal only (the batch asks for look-ahead spans)");
    return m->ops->forward(m, b, logits, err);
}

int pith_model_mtp_draft(pith_model *m, const pith_batch *b, int n_steps, int32_t *draft, float *logits, pith_err *err) {
    if (!m->has_mtp || !m->ops->mtp_draft) return pith_errf(err, "this model was not loaded with an MTP head");
    if (n_steps < 1 || n_steps > 16) return pith_errf(err, "mtp_draft: %d steps (1..16)", n_steps);
    if (b->n_groups != m->mem.n_groups)
        return pith_errf(err, "batch carries %d memory groups; the model declared %d", b->n_groups, m->mem.n_groups);
    return m->ops->mtp_draft(m, b, n_steps, draft, logits, err);
}

int pith_model_mem_layers(const pith_model *m) { return m->hp.n_layers + (m->has_mtp ? m->hp.n_mtp_layers : 0); }

void pith_model_free(pith_model *m) {
    if (!m) return;
    pith_model_file *file = m->file;
    m->ops->destroy(m);
    pith_model_file_close(file);
}
