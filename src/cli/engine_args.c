/* Engine options, parsed the same way by every command that runs the engine. */
#include <stdint.h>
#include <string.h>

#include "cli/cli.h"

int cli_engine_arg(const char *cmd, int argc, char **argv, int *i, pith_engine_options *e) {
    const char *a = argv[*i];
    const char *v;
    long long iv;
#define VALUE() do { if (!(v = cli_value(cmd, argc, argv, i))) return -1; } while (0)
#define INT_OPT(name, field, lo, hi)                                             \
    if (!strcmp(a, name)) {                                                      \
        VALUE();                                                                 \
        if (!cli_parse_int(cmd, a, v, lo, hi, &iv)) return -1;                   \
        field = (int)iv;                                                         \
        return 1;                                                                \
    }
    if (!strcmp(a, "--kv-f32")) { /* the older spelling of --kv-type f32 */
        e->kv_type = PITH_KV_F32;
        return 1;
    }
    if (!strcmp(a, "--kv-type")) {
        VALUE();
        int t = pith_kv_type_parse(v);
        if (t < 0) {
            fprintf(stderr, "pith %s: --kv-type: '%s' is not one of f16, bf16, q8_0, f32\n", cmd, v);
            return -1;
        }
        e->kv_type = (pith_kv_type)t;
        return 1;
    }
    if (!strcmp(a, "--no-prefix-cache")) {
        e->no_prefix_cache = true;
        return 1;
    }
    if (!strcmp(a, "--kv-mem")) {
        VALUE();
        return cli_parse_size(cmd, a, v, &e->kv_mem_bytes) ? 1 : -1;
    }
    if (!strcmp(a, "--snapshot-mem")) {
        VALUE();
        if (!cli_parse_size(cmd, a, v, &e->snapshot_mem_bytes)) return -1;
        if (e->snapshot_mem_bytes == 0) e->snapshot_mem_bytes = SIZE_MAX; /* 0: none */
        return 1;
    }
    INT_OPT("--snapshot-interval", e->snapshot_interval, -1, 1 << 30)
    if (!strcmp(a, "--spec-type")) {
        VALUE();
        if (!strcmp(v, "ngram")) e->spec_type = PITH_SPEC_NGRAM;
        else if (!strcmp(v, "draft")) e->spec_type = PITH_SPEC_DRAFT;
        else if (!strcmp(v, "mtp")) e->spec_type = PITH_SPEC_MTP;
        else if (!strcmp(v, "off")) e->spec_type = PITH_SPEC_OFF;
        else {
            fprintf(stderr, "pith %s: --spec-type must be ngram, draft, mtp or off, not '%s'\n", cmd, v);
            return -1;
        }
        return 1;
    }
    if (!strcmp(a, "--draft-model") || !strcmp(a, "-md")) { /* -md: llama.cpp's spelling */
        VALUE();
        e->draft_model_path = v;
        if (e->spec_type == PITH_SPEC_OFF) e->spec_type = PITH_SPEC_DRAFT;
        return 1;
    }
    INT_OPT("--spec-max-draft", e->spec_max_draft, 1, 16)
    INT_OPT("--spec-max-seqs", e->spec_max_seqs, 1, 65536)
    INT_OPT("--max-num-seqs", e->max_num_seqs, 1, 65536)
    INT_OPT("--kv-blocks", e->kv_blocks, 1, 1 << 28)
    INT_OPT("--block-size", e->block_size, 1, 4096)
    INT_OPT("--max-batch-tokens", e->max_batch_tokens, 1, 1 << 24)
    INT_OPT("--max-seq-len", e->max_seq_len, 2, 1 << 30)
    INT_OPT("-c", e->max_seq_len, 2, 1 << 30)          /* llama.cpp's name for the context size */
    INT_OPT("--ctx-size", e->max_seq_len, 2, 1 << 30)
#undef INT_OPT
#undef VALUE
    return 0;
}

void cli_engine_usage(FILE *out) {
    fprintf(out,
            "      --max-num-seqs S      sequences per step (default 64)\n"
            "      --max-batch-tokens T  tokens per step, decode and prompt chunks (default 2048)\n"
            "      --kv-blocks B         blocks of each full-attention layer group's pool; sliding-\n"
            "                            window groups get fewer when S windows need fewer (default:\n"
            "                            from --kv-mem)\n"
            "      --kv-mem BYTES        all memory groups together, e.g. 512M (default: enough for S\n"
            "                            full-length sequences, at most 1G)\n"
            "      --block-size N        tokens per KV block, every group (default 16)\n"
            "  -c, --ctx-size N, --max-seq-len N\n"
            "                            prompt + output limit per sequence, the context size (default:\n"
            "                            the model's)\n"
            "      --kv-type T           K/V cache type: f16 (default), bf16, q8_0 (half of f16's\n"
            "                            bytes; head dims that are multiples of 32) or f32\n"
            "      --kv-f32              the same as --kv-type f32\n"
            "      --no-prefix-cache     do not reuse the K/V (or state) of shared prompt prefixes\n"
            "      --snapshot-mem BYTES  models with recurrent state: memory for state snapshots, the\n"
            "                            prefix cache of those layers; 0: none (default: two per\n"
            "                            sequence, at most 1G)\n"
            "      --snapshot-interval N snapshot long prompts every N tokens (default 1024; -1: only\n"
            "                            at prompt ends, divergence points and while decoding)\n"
            "      --spec-type ngram|draft|mtp|off\n"
            "                            speculative decoding: drafts from prompt lookup (ngram: the tokens\n"
            "                            that followed the last few tokens earlier in the prompt and output),\n"
            "                            from a draft model (draft) or from the model's own multi-token-\n"
            "                            prediction layers (mtp: Qwen3.5 files that carry them); the output\n"
            "                            is unchanged, only faster\n"
            "                            when drafts are accepted (default off; models with recurrent state\n"
            "                            need state checkpoints)\n"
            "  -md, --draft-model PATH   the draft model for --spec-type draft (implies it): a smaller model\n"
            "                            with the same vocabulary, run greedily with the same threads\n"
            "      --spec-max-draft N    tokens per draft (default 8, at most 16)\n"
            "      --spec-max-seqs N     draft only while at most N sequences decode (default 2)\n");
}
