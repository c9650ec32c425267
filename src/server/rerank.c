/* POST /v1/rerank (also /rerank and /v1/reranking): the Jina / Cohere shape.
 *
 *   {"query", "documents": [string | {"text"}], "top_n", "return_documents", "instruction" (extension)}
 *   → {"id", "object": "list", "model", "results": [{"index", "relevance_score", "document"?: {"text"}}],
 *      "usage": {"prompt_tokens", "total_tokens"}}, best first.
 *
 * Scoring as Qwen3-Reranker's model card does with a causal LM: each document becomes one prompt
 *   <|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the
 *   Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n
 *   <Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}<|im_end|>\n<|im_start|>assistant\n
 *   <think>\n\n</think>\n\n
 * (the fixed parts with special tokens recognised, the user's text without), and its score is
 * exp(l_yes) / (exp(l_yes) + exp(l_no)) of the last position's logits for the tokens "yes" and "no".
 *
 * The engine gives that without a new capability: each document is an engine request for one token,
 * constrained by a grammar compiled against a vocabulary in which only the "yes" and "no" tokens are
 * allowed (every other entry marked special), sampled at temperature 1 with no filters, with processed
 * logprobs (engine.h: PITH_LOGPROBS_PROCESSED), which are then the log-softmax over exactly those two
 * logits: the two top logprobs are log(score) and log(1 - score). The documents are submitted together,
 * one request each (one job, job.h), and so batched with whatever runs; they share the prompt's prefix
 * through the prefix cache.
 *
 * A model is served as a reranker when its GGUF says pooling type 4 (llama.cpp's RANK) or its name
 * (--model-name, or the file or directory name) contains "rerank" (any case): Qwen3-Reranker-0.6B and its
 * GGUF conversions. Any other model answers 400. A classification head (llama.cpp's cls.output) is not
 * read: the loader has no such tensor, and the score comes from the LM head's two rows. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pith/grammar.h"
#include "server/buf.h"
#include "server/generate.h"
#include "server/handlers.h"
#include "server/job.h"

#define MAX_DOCUMENTS 1024

static const char PREFIX[] =
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n";
static const char SUFFIX[] = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
static const char DEFAULT_INSTRUCTION[] = "Given a web search query, retrieve relevant passages that answer the query";

/* The grammar that allows only "yes" and "no", per (vocabulary size, yes id, no id). Entries are never
 * freed: a grammar's vocabulary must outlive it, and running requests hold grammars. There is one entry
 * per served vocabulary, so in practice one. */
typedef struct yes_no_grammar {
    int n_vocab;
    int32_t yes, no;
    pith_grammar_vocab *vocab;
    pith_grammar *grammar;
    struct yes_no_grammar *next;
} yes_no_grammar;

static pthread_mutex_t grammars_lock = PTHREAD_MUTEX_INITIALIZER;
static yes_no_grammar *grammars;

static pith_grammar *yes_no(int n_vocab, int32_t yes, int32_t no, pith_err *err) {
    pthread_mutex_lock(&grammars_lock);
    yes_no_grammar *g = grammars;
    while (g && (g->n_vocab != n_vocab || g->yes != yes || g->no != no)) g = g->next;
    if (!g) {
        const char **bytes = calloc((size_t)n_vocab, sizeof *bytes);
        size_t *lens = calloc((size_t)n_vocab, sizeof *lens);
        uint8_t *kinds = malloc((size_t)n_vocab);
        yes_no_grammar *e = calloc(1, sizeof *e);
        static const char rules[] = "root ::= \"yes\" | \"no\"";
        if (bytes && lens && kinds && e) {
            for (int i = 0; i < n_vocab; i++) bytes[i] = "";
            memset(kinds, PITH_GRAMMAR_TOKEN_SPECIAL, (size_t)n_vocab);
            bytes[yes] = "yes", lens[yes] = 3, kinds[yes] = PITH_GRAMMAR_TOKEN_NORMAL;
            bytes[no] = "no", lens[no] = 2, kinds[no] = PITH_GRAMMAR_TOKEN_NORMAL;
            if (!pith_grammar_vocab_new(n_vocab, bytes, lens, kinds, &e->vocab, err) &&
                !pith_grammar_compile(e->vocab, PITH_GRAMMAR_GBNF, rules, sizeof rules - 1, &e->grammar, err)) {
                e->n_vocab = n_vocab, e->yes = yes, e->no = no;
                e->next = grammars;
                grammars = g = e;
                e = NULL;
            }
        } else {
            pith_errf(err, "out of memory");
        }
        if (e) pith_grammar_vocab_free(e->vocab);
        free(e);
        free(bytes);
        free(lens);
        free(kinds);
    }
    pith_grammar *out = g ? pith_grammar_retain(g->grammar) : NULL;
    pthread_mutex_unlock(&grammars_lock);
    return out;
}

static bool has_rerank(const char *s) {
    for (; s && *s; s++)
        if (!strncasecmp(s, "rerank", 6)) return true;
    return false;
}

/* 0 when the served model is a reranker (see the top), else 400 saying how to make it one. */
static int check_reranker(pith_server *srv, api_error *err) {
    const char *path = srv->model_path, *base = path;
    for (const char *c = path; c && *c; c++)
        if (c[0] == '/' && c[1]) base = c + 1;
    if (has_rerank(srv->model_name) || has_rerank(base)) return 0;
    bool rank = false;
    pthread_rwlock_rdlock(&srv->model_lock);
    const pith_model_file *f = srv->model ? srv->model->file : NULL;
    const pith_gguf *g = f ? pith_model_file_gguf(f) : NULL;
    pith_str arch;
    if (g && pith_gguf_get_str(g, "general.architecture", &arch) && arch.len < 64) {
        char key[96];
        snprintf(key, sizeof key, "%.*s.pooling_type", (int)arch.len, arch.ptr);
        int64_t v;
        rank = pith_gguf_get_i64(g, key, &v) && v == 4; /* llama.cpp's LLAMA_POOLING_TYPE_RANK */
    }
    pthread_rwlock_unlock(&srv->model_lock);
    if (rank) return 0;
    return api_errorf(err, 400, "invalid_request", NULL,
                      "this model is not a reranker: /v1/rerank serves models whose GGUF has pooling type 4 (rank) "
                      "or whose name contains \"rerank\" (e.g. Qwen3-Reranker; --model-name sets the name)");
}

/* Appends text's tokens to out (special-token texts recognised or not). */
static int append_text(pith_server *srv, gen_prompt *out, const char *text, size_t len, bool special, api_error *err) {
    int32_t *ids = NULL;
    int n = 0;
    pith_err why;
    if (len && pith_tokenizer_encode(srv->tok, text, len, special ? PITH_TOK_PARSE_SPECIAL : 0, &ids, &n, &why)) {
        server_log(srv, PITH_LOG_ERROR, "tokenizer: %s", why.msg);
        return api_errorf(err, 400, "invalid_value", "documents", "the text could not be tokenized");
    }
    if (n) {
        int32_t *grown = realloc(out->ids, (size_t)(out->n + n) * sizeof *grown);
        if (!grown) {
            free(ids);
            return api_errorf(err, 500, "internal_error", NULL, "out of memory");
        }
        out->ids = grown;
        memcpy(out->ids + out->n, ids, (size_t)n * sizeof *ids);
        out->n += n;
    }
    free(ids);
    return 0;
}

/* The document's text (a string or {"text": string}), NULL when it is neither. */
static const char *doc_text(const cJSON *d) {
    if (cJSON_IsString(d)) return d->valuestring;
    const cJSON *t = cJSON_IsObject(d) ? cJSON_GetObjectItemCaseSensitive(d, "text") : NULL;
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

typedef struct rerank_req {
    const char *query, *instruction;
    const cJSON *docs;
    int n_docs;
    int top_n;
    bool return_documents;
} rerank_req;

static int read_request(pith_server *srv, const cJSON *body, rerank_req *q, api_error *err) {
    memset(q, 0, sizeof *q);
    if (!cJSON_IsObject(body)) return api_errorf(err, 400, "invalid_type", NULL, "the request body must be a JSON object");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(body, "model");
    if (model && !cJSON_IsNull(model) && !cJSON_IsString(model))
        return api_errorf(err, 400, "invalid_type", "model", "'model' must be a string");
    if (cJSON_IsString(model) && gen_check_model(srv, model->valuestring, err)) return -1;
    const cJSON *query = cJSON_GetObjectItemCaseSensitive(body, "query");
    if (!query || cJSON_IsNull(query)) return api_errorf(err, 400, "missing_parameter", "query", "'query' is required");
    if (!cJSON_IsString(query)) return api_errorf(err, 400, "invalid_type", "query", "'query' must be a string");
    q->query = query->valuestring;
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(body, "instruction");
    if (ins && !cJSON_IsNull(ins) && !cJSON_IsString(ins))
        return api_errorf(err, 400, "invalid_type", "instruction", "'instruction' must be a string");
    q->instruction = cJSON_IsString(ins) ? ins->valuestring : DEFAULT_INSTRUCTION;
    const cJSON *docs = cJSON_GetObjectItemCaseSensitive(body, "documents");
    if (!docs || cJSON_IsNull(docs)) return api_errorf(err, 400, "missing_parameter", "documents", "'documents' is required");
    if (!cJSON_IsArray(docs))
        return api_errorf(err, 400, "invalid_type", "documents", "'documents' must be a list of strings or {\"text\"} objects");
    q->docs = docs;
    q->n_docs = cJSON_GetArraySize(docs);
    if (q->n_docs == 0) return api_errorf(err, 400, "invalid_value", "documents", "'documents' is empty");
    if (q->n_docs > MAX_DOCUMENTS)
        return api_errorf(err, 400, "invalid_value", "documents", "at most %d documents per request", MAX_DOCUMENTS);
    int i = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, docs) {
        if (!doc_text(d))
            return api_errorf(err, 400, "invalid_type", "documents", "documents[%d] must be a string or {\"text\": string}", i);
        i++;
    }
    q->top_n = q->n_docs;
    const cJSON *top = cJSON_GetObjectItemCaseSensitive(body, "top_n");
    if (top && !cJSON_IsNull(top)) {
        int64_t v;
        if (!json_get_int(top, &v) || v < 1)
            return api_errorf(err, 400, "invalid_value", "top_n", "'top_n' must be an integer, 1 or more");
        if (v < q->top_n) q->top_n = (int)v;
    }
    const cJSON *rd = cJSON_GetObjectItemCaseSensitive(body, "return_documents");
    if (rd && !cJSON_IsNull(rd) && !cJSON_IsBool(rd))
        return api_errorf(err, 400, "invalid_type", "return_documents", "'return_documents' must be a boolean");
    q->return_documents = cJSON_IsTrue(rd);
    return 0;
}

/* The documents' prompts (see the top). */
static int build_prompts(pith_server *srv, const rerank_req *q, gen_prompt *prompts, api_error *err) {
    gen_prompt head = {0}, tail = {0};
    buf mid = {0};
    int rc = append_text(srv, &head, PREFIX, sizeof PREFIX - 1, true, err) ||
             append_text(srv, &tail, SUFFIX, sizeof SUFFIX - 1, true, err);
    int i = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, q->docs) {
        if (rc) break;
        mid.len = 0;
        buf_printf(&mid, "<Instruct>: %s\n<Query>: %s\n<Document>: %s", q->instruction, q->query, doc_text(d));
        gen_prompt *p = &prompts[i];
        if (mid.failed || !(p->ids = malloc((size_t)head.n * sizeof *p->ids))) {
            rc = api_errorf(err, 500, "internal_error", NULL, "out of memory");
            break;
        }
        memcpy(p->ids, head.ids, (size_t)head.n * sizeof *p->ids);
        p->n = head.n;
        rc = append_text(srv, p, mid.data, mid.len, false, err);
        if (!rc && tail.n) {
            int32_t *grown = realloc(p->ids, (size_t)(p->n + tail.n) * sizeof *grown);
            if (!grown) {
                rc = api_errorf(err, 500, "internal_error", NULL, "out of memory");
                break;
            }
            p->ids = grown;
            memcpy(p->ids + p->n, tail.ids, (size_t)tail.n * sizeof *p->ids);
            p->n += tail.n;
        }
        if (!rc && p->n >= srv->max_seq_len)
            rc = api_errorf(err, 400, "context_length_exceeded", "documents",
                            "this model's maximum context length is %d tokens, but document %d gives a prompt of %d tokens",
                            srv->max_seq_len, i, p->n);
        i++;
    }
    free(head.ids);
    free(tail.ids);
    buf_free(&mid);
    return rc ? -1 : 0;
}

typedef struct scored {
    int index;
    double score;
} scored;

static int by_score(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    return (x->index > y->index) - (x->index < y->index);
}

static enum MHD_Result fail(http_request *r, cJSON *body, gen_prompt *in, int n_in, const api_error *e) {
    gen_prompts_free(in, n_in);
    cJSON_Delete(body);
    return http_send_error(r, e);
}

static enum MHD_Result rerank(http_request *r) {
    pith_server *srv = r->srv;
    enum MHD_Result rc;
    if (gen_refuse_unready(r, &rc)) return rc;
    cJSON *body = gen_parse_body(r, &rc);
    if (!body) return rc;
    api_error e = {0};
    rerank_req q;
    if (read_request(srv, body, &q, &e) || check_reranker(srv, &e)) return fail(r, body, NULL, 0, &e);
    int32_t yes = pith_tokenizer_token_id(srv->tok, "yes", 3), no = pith_tokenizer_token_id(srv->tok, "no", 2);
    int n_vocab = server_n_vocab(srv);
    if (yes < 0 || no < 0 || yes >= n_vocab || no >= n_vocab || yes == no)
        return fail(r, body, NULL, 0, (api_errorf(&e, 400, "invalid_request", NULL,
                                                  "this model's vocabulary has no \"yes\" and \"no\" tokens to score with"), &e));
    pith_err why;
    pith_grammar *g = yes_no(n_vocab, yes, no, &why);
    if (!g) {
        server_log(srv, PITH_LOG_ERROR, "rerank: %s", why.msg);
        return fail(r, body, NULL, 0, (api_errorf(&e, 500, "internal_error", NULL, "the yes/no constraint could not be built"), &e));
    }
    gen_prompt *prompts = calloc((size_t)q.n_docs, sizeof *prompts);
    scored *scores = calloc((size_t)q.n_docs, sizeof *scores);
    bool *got = calloc((size_t)q.n_docs, sizeof *got);
    if (!prompts || !scores || !got || build_prompts(srv, &q, prompts, &e) ||
        job_create(srv, q.n_docs, r->t_arrival, &r->job)) {
        if (!prompts || !scores || !got || e.status == 0) api_errorf(&e, 500, "internal_error", NULL, "out of memory");
        pith_grammar_release(g);
        free(scores);
        free(got);
        return fail(r, body, prompts, prompts ? q.n_docs : 0, &e);
    }
    int prompt_tokens = 0;
    for (int i = 0; i < q.n_docs; i++) {
        pith_request rq = {
            .prompt = prompts[i].ids, .n_prompt = prompts[i].n, .max_tokens = 1,
            .sampling = {.temperature = 1.0f, .top_p = 1.0f, .repetition_penalty = 1.0f},
            .logprobs = true, .top_logprobs = 2, .logprobs_mode = PITH_LOGPROBS_PROCESSED, .grammar = g,
        };
        int sr = job_submit(r->job, i, &rq, &why);
        if (sr == 0) {
            prompt_tokens += prompts[i].n;
            continue;
        }
        job_cancel(r->job);
        if (sr == PITH_SUBMIT_BUSY && atomic_load(&srv->draining))
            api_errorf(&e, 503, "shutting_down", NULL, "the server is shutting down");
        else if (sr == PITH_SUBMIT_BUSY)
            api_errorf(&e, 429, "queue_full", NULL, "too many requests are waiting; retry later");
        else
            api_errorf(&e, 400, "invalid_request", NULL, "the request cannot be served with these parameters");
        server_log(srv, PITH_LOG_WARN, "request refused by the engine: %s", why.msg);
        pith_grammar_release(g);
        free(scores);
        free(got);
        return fail(r, body, prompts, q.n_docs, &e);
    }
    pith_grammar_release(g); /* the engine holds it for each request */
    gen_prompts_free(prompts, q.n_docs);

    bool failed = false, cancelled = false, oom = false;
    for (;;) {
        job_event *evs;
        int n;
        bool all_done, take_oom;
        job_take(r->job, 100, &evs, &n, &all_done, &take_oom);
        for (int i = 0; i < n; i++) {
            const job_event *ev = &evs[i];
            if (ev->choice < 0 || ev->choice >= q.n_docs) continue;
            if (ev->restart) {
                got[ev->choice] = false;
            } else if (!ev->final && !ev->prompt) {
                /* the two entries of the yes/no distribution, best first */
                double l_yes = -INFINITY, l_no = -INFINITY;
                for (int k = 0; k < ev->n_top; k++) {
                    if (ev->top[k].token == yes) l_yes = ev->top[k].logprob;
                    if (ev->top[k].token == no) l_no = ev->top[k].logprob;
                }
                double s = l_yes == -INFINITY ? 0.0 : l_no == -INFINITY ? 1.0 : 1.0 / (1.0 + exp(l_no - l_yes));
                scores[ev->choice] = (scored){ev->choice, s};
                got[ev->choice] = true;
            } else if (ev->final && ev->finish == PITH_FINISH_CANCELLED) {
                cancelled = true;
            } else if (ev->final && ev->finish == PITH_FINISH_ERROR) {
                failed = true; /* the model failed on it: job.c logged why */
            }
        }
        job_events_free(evs, n);
        if (take_oom) {
            oom = true;
            job_cancel(r->job);
            break;
        }
        if (all_done) break;
        if (http_client_gone(r)) {
            free(scores);
            free(got);
            cJSON_Delete(body);
            return http_client_cancelled(r);
        }
    }
    for (int i = 0; i < q.n_docs && !failed; i++) failed = !got[i];
    free(got);
    if (oom || failed || cancelled) {
        free(scores);
        cJSON_Delete(body);
        if (oom) api_errorf(&e, 500, "internal_error", NULL, "out of memory");
        else if (cancelled) gen_cancelled_error(srv, &e);
        else api_errorf(&e, 500, "internal_error", NULL, "the model failed during the request");
        return http_send_error(r, &e);
    }
    qsort(scores, (size_t)q.n_docs, sizeof *scores, by_score);

    cJSON *o = cJSON_CreateObject();
    char id[64];
    snprintf(id, sizeof id, "rerank-%llx%06llx", (unsigned long long)srv->created_unix,
             (unsigned long long)atomic_fetch_add(&srv->serial, 1) + 1);
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddStringToObject(o, "model", srv->model_name);
    cJSON *results = cJSON_AddArrayToObject(o, "results");
    bool ok = o && results;
    for (int i = 0; i < q.top_n && ok; i++) {
        cJSON *item = cJSON_CreateObject();
        ok = item && cJSON_AddItemToArray(results, item);
        if (!ok) {
            cJSON_Delete(item);
            break;
        }
        cJSON_AddNumberToObject(item, "index", scores[i].index);
        cJSON_AddNumberToObject(item, "relevance_score", scores[i].score);
        if (q.return_documents) {
            cJSON *doc = cJSON_AddObjectToObject(item, "document");
            ok = doc && cJSON_AddStringToObject(doc, "text", doc_text(cJSON_GetArrayItem(q.docs, scores[i].index)));
        }
    }
    cJSON *usage = cJSON_AddObjectToObject(o, "usage");
    ok = ok && usage && cJSON_AddNumberToObject(usage, "prompt_tokens", prompt_tokens) &&
         cJSON_AddNumberToObject(usage, "total_tokens", prompt_tokens);
    free(scores);
    cJSON_Delete(body);
    if (!ok) {
        cJSON_Delete(o);
        return http_send_error(r, (api_errorf(&e, 500, "internal_error", NULL, "out of memory"), &e));
    }
    return http_send_json(r, 200, o);
}

enum MHD_Result handle_rerank(http_request *r) {
    enum MHD_Result rc = rerank(r);
    gen_trim_after(r);
    return rc;
}
