#include "core/seq.h"

#include <stdlib.h>
#include <string.h>

#include "core/kv_pool.h"

/* Grows *buf (elements of `size` bytes) to hold at least `need`; 0 or -1 when out of memory. */
static int grow(void **buf, int *cap, int need, size_t size) {
    if (need <= *cap) return 0;
    int cap2 = *cap ? *cap : 16;
    while (cap2 < need) cap2 = cap2 > (1 << 29) ? need : cap2 * 2;
    void *p = realloc(*buf, (size_t)cap2 * size);
    if (!p) return -1;
    *buf = p;
    *cap = cap2;
    return 0;
}

int seq_create(const pith_request *r, int max_len, int block_size, int n_groups, const pith_tokenizer *tok,
               seq **out, pith_err *err) {
    *out = NULL;
    seq *s = calloc(1, sizeof *s);
    if (!s) return pith_errf(err, "out of memory");
    s->priority = r->priority;
    s->n_prompt = r->n_prompt;
    s->max_len = max_len;
    s->sampling = r->sampling;
    s->ignore_eos = r->ignore_eos;
    s->logprobs = r->logprobs;
    s->top_logprobs = r->logprobs ? r->top_logprobs : 0;
    s->return_logits = r->return_logits;
    s->logprobs_mode = r->logprobs_mode;
    s->prompt_logprobs = r->prompt_logprobs;
    s->prompt_top_logprobs = r->prompt_logprobs ? r->prompt_top_logprobs : 0;
    s->embed = r->embed;
    s->on_token = r->on_token;
    s->user = r->user;
    s->salt = kv_pool_salt_hash(r->cache_salt);
    s->n_groups = n_groups;
    s->cap_blocks = (max_len + block_size - 1) / block_size;
    for (int g = 0; g < PITH_MAX_MEM_GROUPS; g++) s->state_slot[g] = s->snap_held[g] = -1;
    int first_cap = r->n_prompt + 64 < max_len ? r->n_prompt + 64 : max_len;
    if (grow((void **)&s->tokens, &s->cap_tokens, first_cap, sizeof *s->tokens)) goto oom;
    memcpy(s->tokens, r->prompt, (size_t)r->n_prompt * sizeof *s->tokens);
    s->n_tokens = r->n_prompt;
    size_t n_entries = (size_t)(n_groups > 0 ? n_groups : 1) * (size_t)s->cap_blocks;
    if (!(s->blocks = malloc(n_entries * sizeof *s->blocks))) goto oom;
    for (size_t i = 0; i < n_entries; i++) s->blocks[i] = -1;
    if (!(s->names = malloc((size_t)s->cap_blocks * sizeof *s->names))) goto oom;
    if (r->n_stop_ids > 0) {
        if (!(s->stop_ids = malloc((size_t)r->n_stop_ids * sizeof *s->stop_ids))) goto oom;
        memcpy(s->stop_ids, r->stop_ids, (size_t)r->n_stop_ids * sizeof *s->stop_ids);
        s->n_stop_ids = r->n_stop_ids;
    }
    if (tok && r->n_stop > 0) {
        if (!(s->stop = calloc((size_t)r->n_stop, sizeof *s->stop))) goto oom;
        for (int i = 0; i < r->n_stop; i++) {
            if (!(s->stop[i] = strdup(r->stop[i]))) goto oom;
            s->n_stop = i + 1;
            int len = (int)strlen(r->stop[i]);
            if (len > s->max_stop_len) s->max_stop_len = len;
        }
    }
    if (r->grammar && r->embed == PITH_EMBED_OFF && pith_grammar_matcher_new(r->grammar, &s->matcher, err)) {
        seq_free(s);
        return -1;
    }
    if (tok) {
        pith_detok_init(&s->detok, tok, false);
        /* The prompt's text decides whether the first generated piece keeps its leading space. */
        pith_detok_skip(&s->detok, r->prompt, r->n_prompt);
        s->has_detok = true;
    }
    *out = s;
    return 0;
oom:
    seq_free(s);
    return pith_errf(err, "out of memory");
}

void seq_free(seq *s) {
    if (!s) return;
    free(s->forks);
    pith_sampler_free(s->sampler);
    pith_grammar_matcher_free(s->matcher);
    media_set_unref(s->media);
    free(s->tokens);
    free(s->blocks);
    free(s->names);
    free(s->stop_ids);
    for (int i = 0; i < s->n_stop; i++) free(s->stop[i]);
    free(s->stop);
    free(s->held);
    free(s->released);
    free(s->pool);
    free(s);
}

int seq_append(seq *s, int32_t token) {
    if (s->n_tokens >= s->max_len) return -1;
    if (grow((void **)&s->tokens, &s->cap_tokens, s->n_tokens + 1, sizeof *s->tokens)) return -1;
    s->tokens[s->n_tokens++] = token;
    return 0;
}

bool seq_is_stop_id(const seq *s, int32_t token) {
    for (int i = 0; i < s->n_stop_ids; i++)
        if (s->stop_ids[i] == token) return true;
    return false;
}

/* Length of the longest suffix of text[0..len) that is a proper prefix of some stop string. */
static int partial_stop_len(const seq *s, const char *text, int len) {
    int longest = 0;
    for (int i = 0; i < s->n_stop; i++) {
        int slen = (int)strlen(s->stop[i]);
        for (int k = slen - 1 < len ? slen - 1 : len; k > longest; k--) {
            if (!memcmp(text + len - k, s->stop[i], (size_t)k)) {
                longest = k;
                break;
            }
        }
    }
    return longest;
}

bool seq_push_text(seq *s, const char *text, int len, bool final, const char **out, int *out_len) {
    *out = "";
    *out_len = 0;
    if (grow((void **)&s->held, &s->cap_held, s->n_held + len + 1, 1)) {
        /* Out of memory: release what is held rather than lose it, and stop the sequence. */
        final = true;
        len = 0;
    }
    memcpy(s->held + s->n_held, text, (size_t)len);
    s->n_held += len;
    s->held[s->n_held] = 0;

    int release = s->n_held;
    bool stopped = false;
    /* Earliest match of any stop string. memmem is not C11; stop strings are short, so scan. */
    for (int i = 0; i < s->n_stop; i++) {
        int slen = (int)strlen(s->stop[i]);
        for (int at = 0; at + slen <= release; at++) {
            if (!memcmp(s->held + at, s->stop[i], (size_t)slen)) {
                release = at;
                stopped = true;
                break;
            }
        }
    }
    if (!stopped && !final) release -= partial_stop_len(s, s->held, s->n_held);

    if (grow((void **)&s->released, &s->cap_released, release + 1, 1)) return true;
    memcpy(s->released, s->held, (size_t)release);
    s->released[release] = 0;
    *out = s->released;
    *out_len = release;
    if (stopped || final) {
        s->n_held = 0;
    } else {
        memmove(s->held, s->held + release, (size_t)(s->n_held - release));
        s->n_held -= release;
    }
    return stopped;
}
