/* `pith serve`: the OpenAI-compatible HTTP server (pith/server.h) as a command. Listens at once, loads
 * the model on a second thread (/health answers 503 until it is in), and drains on SIGTERM or SIGINT:
 * stop accepting, let requests finish up to --drain-timeout, cancel the rest, exit 0. */
#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "model/vision.h"
#include "pith/dist.h"
#include "pith/server.h"
#include "server/log.h"

#define MAX_KEYS 64
#define MAX_CORS 64
#define MAX_HOSTS 64
#define MAX_MEDIA_DOMAINS 256
#define MAX_MODELS 256

typedef struct serve_opts {
    pith_server_options srv;
    const char *keys[MAX_KEYS];
    const char *admin_keys[MAX_KEYS];
    const char *cors[MAX_CORS];
    const char *hosts[MAX_HOSTS];
    pith_server_model models[MAX_MODELS];
    char *model_args[MAX_MODELS]; /* -m NAME=PATH copies, split at '=' in place */
    const char *mmproj_args[MAX_MODELS]; /* --mmproj values, paired with the models after parsing */
    int n_mmproj;
    char *hosts_buf;   /* --allowed-hosts values, split at commas in place */
    const char *media_domains[MAX_MEDIA_DOMAINS];
    char *media_domain_copies[MAX_MEDIA_DOMAINS]; /* what media_domains points at, owned */
    double drain_timeout_s;
} serve_opts;

static void serve_usage(FILE *out) {
    fprintf(out,
            "usage: pith serve [-m MODEL] [options]\n"
            "\n"
            "OpenAI-compatible HTTP server: POST /v1/completions, /v1/chat/completions, /v1/responses,\n"
            "Anthropic's /v1/messages and /v1/messages/count_tokens (streaming with \"stream\": true),\n"
            "/v1/embeddings, /v1/rerank, /infill, /apply-template, /tokenize, /detokenize (also under\n"
            "/v1/); GET (and HEAD) /v1/models, /metrics (Prometheus, with the vllm: gauges the Gateway\n"
            "API Inference Extension reads), /health (readiness: 503 while loading, asleep or draining),\n"
            "/health/live (liveness: 200 while the process runs), and a chat page for the browser at\n"
            "GET /. See docs/api.md.\n"
            "\n"
            "  -m, --model PATH          GGUF file, Hugging Face directory or llama2.c .bin (default: the\n"
            "                            model, as for pith run)\n"
            "      --tokenizer PATH      tokenizer file (needed for llama2.c checkpoints)\n"
            "      --chat-template FILE  Jinja chat template overriding the model's (default: the model's,\n"
            "                            else ChatML)\n"
            "      --model-name NAME     model id clients use (default: the model file's base name)\n"
            "      --mmproj FILE         the model's vision projector (llama.cpp's mmproj GGUF: Gemma 3,\n"
            "                            Qwen3.5): chat\n"
            "                            image_url parts, Responses input_image and Messages image blocks\n"
            "                            (docs/multimodal.md); without it, a model that carries its own\n"
            "                            vision tower (a Hugging Face directory) uses that\n"
            "\n"
            "several models (the request's \"model\" picks one; see docs/api.md, Several models):\n"
            "  -m, --model NAME=PATH     serve PATH as NAME (repeatable; loaded on first use)\n"
            "      --mmproj NAME=FILE    the vision projector of the model -m NAME=PATH (repeatable); a\n"
            "                            plain --mmproj FILE is refused here (which model would it go with?)\n"
            "      --models-dir DIR      serve every model in DIR: NAME.gguf, or a directory NAME with\n"
            "                            config.json or one model's GGUF file(s); in a directory, a file\n"
            "                            mmproj*.gguf is that model's projector (two: its load fails).\n"
            "                            New entries are found when a request names them\n"
            "      --models-max N        models loaded at once; the least recently used idle one is\n"
            "                            unloaded to make room (default: no limit)\n"
            "      --models-mem BYTES    bytes loaded at once: weight and projector files, memory pools\n"
            "                            (e.g. 16G; default: no limit)\n"
            "      --models-ttl SECONDS  unload a model idle this long (default: never)\n"
            "      --models-load-timeout SECONDS  how long a request waits for its model to load\n"
            "                            (default 300); POST /v1/admin/models/load and /unload with\n"
            "                            an admin key load and unload one at will\n"
            "\n"
            "      --host ADDR           address to listen on (default 127.0.0.1)\n"
            "      --port N              TCP port, 0 = any free one (default 8080)\n"
            "      --api-key-file FILE   require 'Authorization: Bearer KEY' with a KEY from FILE (one per\n"
            "                            line, '#' comments allowed; keep it chmod 600)\n"
            "      --api-key KEY         the same for one key (repeatable); other users can read it in ps,\n"
            "                            so prefer --api-key-file or $PITH_API_KEY (used when neither\n"
            "                            option is given)\n"
            "      --admin-key-file FILE enable POST /v1/admin/* (reload weights, pause, resume, sleep,\n"
            "                            wake, abort) for the keys in FILE (default: no admin endpoints,\n"
            "                            they answer 403; see docs/rl.md)\n"
            "      --admin-key KEY       the same for one key (repeatable; visible in ps: prefer the file or\n"
            "                            $PITH_ADMIN_KEY, used when neither admin option is given)\n"
            "      --weight-version LABEL  version of the weights loaded at start, in every response's\n"
            "                            weight_version and system_fingerprint (default 0)\n"
            "      --cors-origin ORIGIN  let browser pages from ORIGIN (scheme://host[:port], or * for any)\n"
            "                            call the API: CORS headers and preflight answers (repeatable;\n"
            "                            default: no CORS headers)\n"
            "      --allowed-hosts H,H   on a loopback address, Host names accepted besides localhost,\n"
            "                            127.x.x.x and [::1]; * for any (default: those only, others get\n"
            "                            403, which stops DNS rebinding)\n"
            "      --allowed-media-domains H,H  hosts whose http(s) image URLs (image_url parts) the server\n"
            "                            fetches; *.example.com for any name below example.com (repeatable;\n"
            "                            default: none, only data: URLs are accepted)\n"
            "      --media-max-bytes BYTES  largest image, sent as data: or fetched, e.g. 5M (default 20M);\n"
            "                            larger gets 413\n"
            "      --media-timeout SECONDS  how long fetching one image URL may take, connecting and\n"
            "                            redirects included (default 10)\n"
            "      --image-max-tokens N  each image's tokens at most, for models whose images take any size\n"
            "                            (Qwen3.5, Qwen3-VL): larger ones are resized to fit (default %d;\n"
            "                            0: the model's processor's own budget, Qwen3-VL's up to 16384)\n"
            "  -t, --threads N           model worker threads (default: all online CPUs)\n"
            "  -dev, --device DEV        where the model runs: cpu, vulkan (the first usable Vulkan device)\n"
            "                            or vulkan:N ('pith devices'; default: $PITH_DEVICE, else cpu)\n"
            "  -ngl, --gpu-layers N      with a device: the last N layers on it, the rest on the CPU (0:\n"
            "                            the CPU alone; auto, the default: as many as its memory holds)\n"
            "      --cpu-moe             with a device: every MoE layer's experts on the CPU\n"
            "      --n-cpu-moe N         with a device: the experts of the first N layers on the CPU\n"
            "%s"
            "\n"
            "engine:\n", PITH_VISION_DEFAULT_MAX_TOKENS, cli_tp_help(true));
    cli_engine_usage(out);
    fprintf(out,
            "      --max-queue N         requests waiting beyond the running ones before 429 (default 256)\n"
            "\n"
            "connections:\n"
            "      --max-body BYTES      largest request body, e.g. 1M (default 4M); larger gets 413\n"
            "      --max-body-memory BYTES  request bodies held at once, all clients together (default\n"
            "                            64M, at least twice --max-body); over it a request waits up to\n"
            "                            2 s for room, then gets 503\n"
            "      --max-connections N   open connections at once (default 256)\n"
            "      --max-conns-per-ip N  open connections from one client address, 0 = no limit (default\n"
            "                            64; raise it behind a proxy, whose clients share its address)\n"
            "      --timeout SECONDS     close a connection idle (or stalled reading/writing) this long\n"
            "                            (default 60)\n"
            "      --header-timeout SECS close a connection whose request headers are not all in this long\n"
            "                            after it opened (or after its request's first byte), 0 = never\n"
            "                            (default 10)\n"
            "      --min-body-rate BYTES close a connection whose request body arrives slower than BYTES/s\n"
            "                            on average, once --header-timeout has passed, 0 = never\n"
            "                            (default 1K)\n"
            "      --drain-timeout SECS  on SIGTERM, how long running requests may take to finish before\n"
            "                            they are cancelled (default 30)\n"
            "      --quiet               no access log lines\n"
            "\n"
            "KV-cache events for prefix-aware routers (llm-d; docs/kv-events.md):\n"
            "      --kv-events ENDPOINT  publish the prefix cache's changes as vLLM's KV events on a ZeroMQ\n"
            "                            PUB socket, e.g. tcp://*:5557 (binds; a host other than * or ::\n"
            "                            connects to a subscriber that binds)\n"
            "      --kv-events-replay ENDPOINT  ROUTER socket where a late subscriber asks for the batches\n"
            "                            it missed, e.g. tcp://*:5558 (default: none)\n"
            "      --kv-events-topic T   topic frame (default kv@HOSTNAME@MODEL_NAME, llm-d's kv@POD@MODEL)\n"
            "      --kv-events-hash ALGO block hash: sha256_cbor (default) or sha256_cbor_64bit\n"
            "      --kv-events-hash-seed S  seed of the hash chain, as vLLM's PYTHONHASHSEED (default empty)\n"
            "      --kv-events-buffer N  batches kept for replay (default 10000)\n"
            "\n"
            "logs (on stderr; see docs/api.md, Logs):\n"
            "      --log-level LEVEL     error, warn, info or debug: the lines shown (default info: the\n"
            "                            start-up summary, one access line per request, warnings, errors)\n"
            "      --log-format FORMAT   text (default) or json: one JSON object per line with ts, level,\n"
            "                            msg and the line's fields\n"
            "  -h, --help                show this help\n");
}

/* The --mmproj values to their models: with one model, one plain FILE; with several, each NAME=FILE goes
 * to the model -m NAME=PATH (a model of --models-dir takes the mmproj*.gguf of its directory instead).
 * NAME=FILE is told from a file path as -m's NAME=PATH is: no '/' before the '=' and no such file.
 * 0, or -1 with a message printed. */
static int pair_projectors(serve_opts *o, bool several) {
    pith_server_options *s = &o->srv;
    if (!several) {
        if (o->n_mmproj > 1) {
            fprintf(stderr, "pith serve: --mmproj is given %d times; one model takes one projector\n", o->n_mmproj);
            return -1;
        }
        s->mmproj_path = o->n_mmproj ? o->mmproj_args[0] : NULL;
        return 0;
    }
    for (int k = 0; k < o->n_mmproj; k++) {
        const char *v = o->mmproj_args[k];
        const char *eq = strchr(v, '=');
        if (!eq || eq == v || memchr(v, '/', (size_t)(eq - v)) || !access(v, F_OK) || !eq[1]) {
            fprintf(stderr, "pith serve: --mmproj %s: with several models, pair each projector with its model: "
                            "--mmproj NAME=FILE, NAME as in -m NAME=PATH\n", v);
            return -1;
        }
        size_t len = (size_t)(eq - v);
        int i = 0;
        while (i < s->n_models && (strlen(o->models[i].name) != len || strncmp(o->models[i].name, v, len))) i++;
        if (i == s->n_models) {
            fprintf(stderr, "pith serve: --mmproj %s: no model is named '%.*s' (the names are given with -m NAME=PATH; "
                            "a model of --models-dir takes the mmproj*.gguf of its own directory)\n", v, (int)len, v);
            return -1;
        }
        if (o->models[i].mmproj_path) {
            fprintf(stderr, "pith serve: --mmproj: the model '%s' is given two projectors\n", o->models[i].name);
            return -1;
        }
        o->models[i].mmproj_path = eq + 1;
    }
    return 0;
}

/* Returns 0 to continue, 1 for --help, -1 on a usage error (message printed). */
static int parse_serve_args(int argc, char **argv, serve_opts *o) {
    memset(o, 0, sizeof *o);
    pith_server_options *s = &o->srv;
    pith_engine_options *e = &s->engine;
    s->port = 8080;
    s->log_requests = true;
    s->api_keys = o->keys;
    s->admin_keys = o->admin_keys;
    s->cors_origins = o->cors;
    s->allowed_hosts = o->hosts;
    s->allowed_media_domains = o->media_domains;
    s->models = o->models;
    e->max_waiting = 256;
    o->drain_timeout_s = 30;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v;
        long long iv;
        double fv;
#define VALUE() do { if (!(v = cli_value("serve", argc, argv, &i))) return -1; } while (0)
#define INT_OPT(name, field, lo, hi)                                              \
        else if (!strcmp(a, name)) {                                              \
            VALUE();                                                              \
            if (!cli_parse_int("serve", a, v, lo, hi, &iv)) return -1;            \
            field = (int)iv;                                                      \
        }
        int tp_rc = cli_tp_arg("serve", argc, argv, &i, &s->tp, &s->pp, &s->no_ep);
        if (tp_rc < 0) return -1;
        if (tp_rc > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            return 1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            VALUE();
            const char *eq = strchr(v, '=');
            if (eq && eq > v && !memchr(v, '/', (size_t)(eq - v)) && access(v, F_OK)) { /* NAME=PATH */
                if (s->n_models == MAX_MODELS) {
                    fprintf(stderr, "pith serve: at most %d -m NAME=PATH options (use --models-dir)\n", MAX_MODELS);
                    return -1;
                }
                char *copy = strdup(v);
                if (!copy) return -1;
                copy[eq - v] = 0;
                o->model_args[s->n_models] = copy;
                o->models[s->n_models++] = (pith_server_model){.name = copy, .path = copy + (eq - v) + 1};
            } else {
                s->model_path = v;
            }
        } else if (!strcmp(a, "--models-dir")) {
            VALUE(); s->models_dir = v;
        } else if (!strcmp(a, "--models-mem")) {
            VALUE(); if (!cli_parse_size("serve", a, v, &s->models_mem)) return -1;
        } else if (!strcmp(a, "--models-ttl")) {
            VALUE(); if (!cli_parse_float("serve", a, v, 0, 1e9, &fv)) return -1;
            s->models_ttl_s = fv;
        } else if (!strcmp(a, "--models-load-timeout")) {
            VALUE(); if (!cli_parse_float("serve", a, v, 0.001, 1e9, &fv)) return -1;
            s->models_load_timeout_s = fv;
        } else if (!strcmp(a, "--tokenizer")) {
            VALUE(); s->tokenizer_path = v;
        } else if (!strcmp(a, "--chat-template")) {
            VALUE(); s->chat_template_path = v;
        } else if (!strcmp(a, "--mmproj")) {
            VALUE();
            if (o->n_mmproj == MAX_MODELS) {
                fprintf(stderr, "pith serve: at most %d --mmproj options\n", MAX_MODELS);
                return -1;
            }
            o->mmproj_args[o->n_mmproj++] = v;
        } else if (!strcmp(a, "--model-name")) {
            VALUE(); s->model_name = v;
        } else if (!strcmp(a, "--host")) {
            VALUE(); s->host = v;
        } else if (!strcmp(a, "--api-key")) {
            VALUE();
            if (s->n_api_keys == MAX_KEYS) {
                fprintf(stderr, "pith serve: at most %d --api-key options (use --api-key-file)\n", MAX_KEYS);
                return -1;
            }
            o->keys[s->n_api_keys++] = v;
        } else if (!strcmp(a, "--cors-origin")) {
            VALUE();
            if (s->n_cors_origins == MAX_CORS) {
                fprintf(stderr, "pith serve: at most %d --cors-origin options\n", MAX_CORS);
                return -1;
            }
            o->cors[s->n_cors_origins++] = v;
        } else if (!strcmp(a, "--allowed-hosts")) {
            VALUE();
            free(o->hosts_buf);
            if (!(o->hosts_buf = strdup(v))) return -1;
            s->n_allowed_hosts = 0;
            for (char *save = NULL, *h = strtok_r(o->hosts_buf, ",", &save); h; h = strtok_r(NULL, ",", &save)) {
                if (s->n_allowed_hosts == MAX_HOSTS) {
                    fprintf(stderr, "pith serve: at most %d --allowed-hosts names\n", MAX_HOSTS);
                    return -1;
                }
                o->hosts[s->n_allowed_hosts++] = h;
            }
            if (s->n_allowed_hosts == 0) {
                fprintf(stderr, "pith serve: --allowed-hosts needs at least one name (or *)\n");
                return -1;
            }
        } else if (!strcmp(a, "--allowed-media-domains")) {
            VALUE();
            const char *p = v;
            while (*p) {
                size_t len = strcspn(p, ",");
                if (len) {
                    if (memchr(p, '/', len) || memchr(p, '@', len) || memchr(p, ' ', len) ||
                        (len == 1 && *p == '*')) {
                        fprintf(stderr, "pith serve: --allowed-media-domains takes host names (or *.DOMAIN), "
                                        "not '%.*s'\n", (int)len, p);
                        return -1;
                    }
                    if (s->n_allowed_media_domains == MAX_MEDIA_DOMAINS) {
                        fprintf(stderr, "pith serve: at most %d --allowed-media-domains names\n", MAX_MEDIA_DOMAINS);
                        return -1;
                    }
                    char *h = strndup(p, len);
                    if (!h) return -1;
                    o->media_domain_copies[s->n_allowed_media_domains] = h;
                    o->media_domains[s->n_allowed_media_domains++] = h;
                }
                p += len + (p[len] == ',');
            }
        } else if (!strcmp(a, "--media-max-bytes")) {
            VALUE(); if (!cli_parse_size("serve", a, v, &s->media_max_bytes)) return -1;
        } else if (!strcmp(a, "--image-max-tokens")) {
            VALUE(); if (!cli_parse_int("serve", a, v, 0, 1 << 20, &iv)) return -1;
            s->image_max_tokens = iv ? (int)iv : -1; /* pith_server_options: 0 is the default, -1 none */
        } else if (!strcmp(a, "--media-timeout")) {
            VALUE(); if (!cli_parse_float("serve", a, v, 0.001, 86400, &fv)) return -1;
            s->media_timeout_s = fv;
        } else if (!strcmp(a, "--api-key-file")) {
            VALUE(); s->api_key_file = v;
        } else if (!strcmp(a, "--admin-key")) {
            VALUE();
            if (s->n_admin_keys == MAX_KEYS) {
                fprintf(stderr, "pith serve: at most %d --admin-key options (use --admin-key-file)\n", MAX_KEYS);
                return -1;
            }
            o->admin_keys[s->n_admin_keys++] = v;
        } else if (!strcmp(a, "--admin-key-file")) {
            VALUE(); s->admin_key_file = v;
        } else if (!strcmp(a, "--weight-version")) {
            VALUE(); s->weight_version = v;
        } else if (!strcmp(a, "--log-level")) {
            VALUE();
            if (!(s->log_level = log_parse_level(v))) {
                fprintf(stderr, "pith serve: --log-level must be error, warn, info or debug, not '%s'\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--log-format")) {
            VALUE();
            if (strcmp(v, "text") && strcmp(v, "json")) {
                fprintf(stderr, "pith serve: --log-format must be text or json, not '%s'\n", v);
                return -1;
            }
            s->log_json = !strcmp(v, "json");
        } else if (!strcmp(a, "--kv-events")) {
            VALUE(); s->kv_events.endpoint = v;
        } else if (!strcmp(a, "--kv-events-replay")) {
            VALUE(); s->kv_events.replay_endpoint = v;
        } else if (!strcmp(a, "--kv-events-topic")) {
            VALUE(); s->kv_events.topic = v;
        } else if (!strcmp(a, "--kv-events-hash")) {
            VALUE();
            if (strcmp(v, "sha256_cbor") && strcmp(v, "sha256_cbor_64bit")) {
                fprintf(stderr, "pith serve: --kv-events-hash must be sha256_cbor or sha256_cbor_64bit, not '%s'\n", v);
                return -1;
            }
            s->kv_events.hash = v;
        } else if (!strcmp(a, "--kv-events-hash-seed")) {
            VALUE(); s->kv_events.hash_seed = v;
        } else if (!strcmp(a, "--kv-events-buffer")) {
            VALUE(); if (!cli_parse_int("serve", a, v, 1, 1 << 24, &iv)) return -1;
            s->kv_events.buffer_steps = (int)iv;
        } else if (!strcmp(a, "--quiet")) {
            s->log_requests = false;
        } else if (!strcmp(a, "--max-body-memory")) {
            VALUE(); if (!cli_parse_size("serve", a, v, &s->max_body_memory)) return -1;
        } else if (!strcmp(a, "--max-body")) {
            VALUE(); if (!cli_parse_size("serve", a, v, &s->max_body_bytes)) return -1;
        } else if (!strcmp(a, "-ngl") || !strcmp(a, "--gpu-layers") || !strcmp(a, "--n-gpu-layers")) {
            VALUE(); if (!cli_parse_gpu_layers("serve", a, v)) return -1;
            s->gpu_layers = v;
        } else if (!strcmp(a, "--cpu-moe")) {
            s->n_cpu_moe = -1;
        } else if (!strcmp(a, "--n-cpu-moe") || !strcmp(a, "-ncmoe")) {
            VALUE(); if (!cli_parse_int("serve", a, v, 0, 100000, &iv)) return -1;
            s->n_cpu_moe = (int)iv;
        } else if (!strcmp(a, "-dev") || !strcmp(a, "--device")) {
            VALUE(); if (!cli_parse_device("serve", a, v)) return -1;
            s->device = v;
        } else if (!strcmp(a, "--header-timeout")) {
            VALUE(); if (!cli_parse_float("serve", a, v, 0, 86400, &fv)) return -1;
            s->header_timeout_s = fv > 0 ? fv : -1;
        } else if (!strcmp(a, "--min-body-rate")) {
            size_t rate;
            VALUE(); if (!cli_parse_size("serve", a, v, &rate)) return -1;
            s->min_body_rate = rate > 0 ? (double)rate : -1;
        } else if (!strcmp(a, "--max-conns-per-ip")) {
            VALUE(); if (!cli_parse_int("serve", a, v, 0, 65536, &iv)) return -1;
            s->max_conns_per_ip = iv > 0 ? (int)iv : -1;
        } else if (!strcmp(a, "--drain-timeout")) {
            VALUE(); if (!cli_parse_float("serve", a, v, 0, 86400, &fv)) return -1;
            o->drain_timeout_s = fv;
        }
        INT_OPT("--port", s->port, 0, 65535)
        INT_OPT("-t", s->n_threads, 1, 1024)
        INT_OPT("--threads", s->n_threads, 1, 1024)
        INT_OPT("--max-queue", e->max_waiting, 1, 1 << 20)
        INT_OPT("--max-connections", s->max_connections, 1, 65536)
        INT_OPT("--models-max", s->models_max, 1, 1 << 20)
        INT_OPT("--timeout", s->idle_timeout_s, 1, 86400)
        else {
            int r = cli_engine_arg("serve", argc, argv, &i, e);
            if (r < 0) return -1;
            if (r == 0) {
                fprintf(stderr, "pith serve: unknown option '%s' (try 'pith serve --help')\n", a);
                return -1;
            }
        }
#undef INT_OPT
#undef VALUE
    }
    const pith_kv_events_options *kv = &s->kv_events;
    if (!kv->endpoint && (kv->replay_endpoint || kv->topic || kv->hash || kv->hash_seed || kv->buffer_steps)) {
        fprintf(stderr, "pith serve: the --kv-events-* options need --kv-events ENDPOINT\n");
        return -1;
    }
    bool several = s->n_models > 0 || s->models_dir;
    if (several && s->model_path) {
        fprintf(stderr, "pith serve: -m %s: with several models (-m NAME=PATH, --models-dir) every -m needs a NAME=\n", s->model_path);
        return -1;
    }
    if (several && (s->tp > 1 || s->pp > 1)) {
        fprintf(stderr, "pith serve: --tp and --pp serve one model (-m PATH), not several\n");
        return -1;
    }
    if (several && s->model_name) {
        fprintf(stderr, "pith serve: --model-name names the one model; with several, -m NAME=PATH names each\n");
        return -1;
    }
    if (pair_projectors(o, several)) return -1;
    if (!several && (s->models_max || s->models_mem || s->models_ttl_s > 0 || s->models_load_timeout_s > 0)) {
        fprintf(stderr, "pith serve: --models-max, --models-mem, --models-ttl and --models-load-timeout need several "
                        "models (-m NAME=PATH or --models-dir)\n");
        return -1;
    }
    /* Keys from the environment when the command line names none: unlike arguments, other users
     * cannot read them in ps. Set but empty is an error, never a server left open by mistake. */
    static const struct { const char *var; bool admin; } env_keys[] = {{"PITH_API_KEY", false}, {"PITH_ADMIN_KEY", true}};
    for (size_t k = 0; k < sizeof env_keys / sizeof *env_keys; k++) {
        const char *val = getenv(env_keys[k].var);
        bool admin = env_keys[k].admin;
        if (!val || (admin ? s->n_admin_keys || s->admin_key_file : s->n_api_keys || s->api_key_file)) continue;
        if (!*val) {
            fprintf(stderr, "pith serve: $%s is set but empty\n", env_keys[k].var);
            return -1;
        }
        if (admin) o->admin_keys[s->n_admin_keys++] = val;
        else o->keys[s->n_api_keys++] = val;
    }
    return 0;
}

/* The sink: JSON lines carry their own time stamp; text lines get one here. */
static void log_line(void *user, const char *line) {
    if (user) { /* json */
        fprintf(stderr, "%s\n", line);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    fprintf(stderr, "%02d:%02d:%02d.%03ld pith serve: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, line);
}

typedef struct loader {
    pith_server *srv;
    atomic_int state; /* 0 loading, 1 loaded, -1 failed */
    pith_err err;
} loader;

static void *load_thread(void *arg) {
    loader *l = arg;
    int rc = pith_server_load(l->srv, &l->err);
    atomic_store(&l->state, rc ? -1 : 1);
    return NULL;
}

static int serve(serve_opts *op);

static void serve_opts_free(serve_opts *o) {
    free(o->hosts_buf);
    for (int i = 0; i < o->srv.n_models; i++) free(o->model_args[i]);
    for (int i = 0; i < o->srv.n_allowed_media_domains; i++) free(o->media_domain_copies[i]);
}

int pith_cmd_serve(int argc, char **argv) {
    serve_opts o;
    int pr = parse_serve_args(argc, argv, &o);
    if (pr == 1) {
        serve_opts_free(&o);
        serve_usage(stdout);
        return 0;
    }
    if (pr < 0) {
        serve_opts_free(&o);
        return PITH_EXIT_USAGE;
    }
    if (o.srv.tp > 1 || o.srv.pp > 1) {
        if (!o.srv.model_path && !(o.srv.model_path = cli_default_model())) {
            cli_no_default_model("serve");
            serve_opts_free(&o);
            return PITH_EXIT_USAGE;
        }
        if (!cli_dist_begin("serve", o.srv.tp, o.srv.pp, &o.srv.comm)) {
            serve_opts_free(&o);
            return 1;
        }
        if (pith_comm_rank(o.srv.comm) != 0) {
            pith_model_options mo = {.n_threads = o.srv.n_threads, .device = o.srv.device,
                                     .gpu_layers = o.srv.gpu_layers, .n_cpu_moe = o.srv.n_cpu_moe,
                                     .mtp = o.srv.engine.spec_type == PITH_SPEC_MTP, .comm = o.srv.comm,
                                     .tp = o.srv.tp, .pp = o.srv.pp, .no_ep = o.srv.no_ep};
            int rc = cli_dist_worker("serve", o.srv.comm, o.srv.model_path, &mo);
            serve_opts_free(&o);
            return rc;
        }
    }
    int rc = serve(&o);
    rc = cli_dist_end(o.srv.comm, rc);
    serve_opts_free(&o);
    return rc;
}

/* glibc raises its mmap threshold to the largest block freed so far (up to 32 MiB), after which blocks
 * that size come from the heaps of the connection threads' arenas and stay there when freed: a request
 * that briefly needs tens of MiB (a large body, a grammar refused at its size limit) would leave each
 * arena that served one that much larger for good. A fixed threshold keeps large blocks mapped, so
 * they go back to the system when freed and RSS returns to its baseline after the request. */
static void serve_malloc_policy(void) {
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 256 << 10);
    mallopt(M_TRIM_THRESHOLD, 1 << 20);
#endif
}

static int serve(serve_opts *op) {
    serve_malloc_policy();
    serve_opts o = *op;
    bool several = o.srv.n_models > 0 || o.srv.models_dir;
    if (!several && !o.srv.model_path && !(o.srv.model_path = cli_default_model())) {
        cli_no_default_model("serve");
        return PITH_EXIT_USAGE;
    }
    o.srv.log = log_line;
    o.srv.log_user = o.srv.log_json ? (void *)"json" : NULL;
    log_ctx lg = {.level = o.srv.log_level, .json = o.srv.log_json, .sink = log_line, .user = o.srv.log_user};

    /* Every thread started from here on inherits the mask, so only sigtimedwait below sees them. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    pith_err err = {{0}};
    pith_server *srv;
    if (pith_server_create(&o.srv, &srv, &err)) {
        fprintf(stderr, "pith serve: %s\n", err.msg);
        return 1;
    }
    char line[700];
    const char *host = o.srv.host ? o.srv.host : "127.0.0.1";
    bool v6 = strchr(host, ':') != NULL;
    snprintf(line, sizeof line, "listening on http://%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", pith_server_port(srv));
    log_emit(&lg, PITH_LOG_INFO, line, NULL);

    loader l = {.srv = srv};
    pthread_t tid;
    if (several) { /* each model loads on its first request (models.h) */
        atomic_store(&l.state, 1);
    } else if (pthread_create(&tid, NULL, load_thread, &l)) {
        fprintf(stderr, "pith serve: cannot start the loader thread\n");
        pith_server_free(srv);
        return 1;
    }
    int rc = 0, sig = 0;
    for (;;) {
        struct timespec tick = {0, 100 * 1000 * 1000};
        sig = sigtimedwait(&stop_signals, NULL, &tick);
        if (sig > 0) break;
        if (atomic_load(&l.state) < 0) {
            snprintf(line, sizeof line, "cannot load the model: %s", l.err.msg);
            log_emit(&lg, PITH_LOG_ERROR, line, NULL);
            rc = 1;
            break;
        }
    }
    if (sig > 0) {
        snprintf(line, sizeof line, "%s: draining (up to %g s)", sig == SIGTERM ? "SIGTERM" : "SIGINT", o.drain_timeout_s);
        log_emit(&lg, PITH_LOG_INFO, line, NULL);
    }
    pith_server_drain(srv, rc ? 0 : o.drain_timeout_s);
    if (!several) pthread_join(tid, NULL);
    pith_server_free(srv);
    if (rc == 0) log_emit(&lg, PITH_LOG_INFO, "stopped", NULL);
    return rc;
}
