/* Image URLs from requests (OpenAI chat "image_url" parts) turned into the file's bytes: a data: URL is
 * decoded in memory, an http(s) URL is fetched with libcurl from the hosts the operator allowed
 * (pith serve --allowed-media-domains). Owns nothing between calls: every call allocates and frees its
 * own state; the one process-wide thing is libcurl's global init, done once (pthread_once) and never
 * undone.
 *
 * Invariants:
 *   - no request reaches a host that is not on the list: the host is checked on the URL as libcurl itself
 *     parsed it (that same parse is what it connects to), and again on every redirect, which Pith
 *     follows itself (at most 3), never libcurl; with an empty list nothing remote is fetched at all.
 *     The list is of names: a name that resolves to an internal address is the operator's to avoid;
 *   - only http and https, no userinfo (user@host), no cookies, no .netrc; proxies come from the usual
 *     environment variables (http_proxy, https_proxy, no_proxy), as for any libcurl client;
 *   - never more than max_bytes held: a data: URL's decoded size is computed before anything is
 *     allocated, a remote body is refused at its Content-Length or, without one, as soon as the bytes
 *     received pass the limit (the transfer is aborted then, not read to the end);
 *   - a remote fetch ends within timeout_s, redirects included;
 *   - on failure nothing is returned (*data NULL, *n 0) and err holds a 4xx with fixed wording that
 *     names at most the URL's host and the HTTP status: never a library message or a response body.
 *
 * Error codes (status; param "messages" unless the caller names another):
 *   invalid_image_url        400  not a data:, http:// or https:// URL; malformed; userinfo in it
 *   invalid_image            400  a data: URL whose media type is missing or not image/...
 *   invalid_image_data       400  a data: URL whose payload is not valid base64 / percent-encoding, or
 *                                 is empty
 *   media_too_large          413  the decoded or fetched image is over max_bytes
 *   media_domain_not_allowed 400  the host (or a redirect's host) is not in allowed_domains
 *   media_fetch_unavailable  400  an http(s) URL on a server built without libcurl
 *   media_fetch_timeout      400  the fetch took longer than timeout_s (the URL's fault, so 4xx)
 *   media_fetch_failed       400  the remote answered non-2xx, or could not be reached, or redirected too
 *                                 often or to something that is not http(s), or sent no bytes
 *   internal_error           500  out of memory */
#ifndef PITH_SERVER_MEDIA_H
#define PITH_SERVER_MEDIA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pith/server.h"
#include "server/api_error.h"

typedef struct media_limits {
    const char *const *allowed_domains; /* hosts whose http(s) URLs may be fetched: an exact name or
                                           address (ASCII case ignored, a trailing dot too; IPv6 with or
                                           without brackets), or "*.example.com" for any name below
                                           example.com (not example.com itself, never an IP address).
                                           A lone "*" is not a wildcard. None: no remote fetching */
    int n_allowed;
    size_t max_bytes;    /* 0: 20 MiB. A larger file (Content-Length or bytes received) is refused */
    double timeout_s;    /* <= 0: 10 s for the whole fetch (connect + transfer, every redirect) */
} media_limits;

#define MEDIA_DEFAULT_MAX_BYTES ((size_t)20 << 20)
#define MEDIA_DEFAULT_TIMEOUT_S 10.0
#define MEDIA_MAX_REDIRECTS 3

/* url: "data:<mediatype>[;params][;base64],<data>" (base64 in the standard alphabet, padding optional,
 * ASCII whitespace skipped; otherwise percent-encoded) or "http(s)://host/...". lim NULL: the defaults
 * and no allowed host. Returns 0 with *data (malloc'd, caller frees; never empty) and *n, or -1 with
 * err filled (codes above) and *data NULL, *n 0. Safe to call from any number of threads at once. */
int media_fetch(const media_limits *lim, const char *url, const char *param, uint8_t **data, size_t *n,
                api_error *err);

/* Whether host (as it appears in a URL: "example.com", "127.0.0.1", "[::1]") is on lim's list. */
bool media_host_allowed(const media_limits *lim, const char *host);

/* Whether this build can fetch http(s) URLs at all (built with libcurl). */
bool media_remote_available(void);

/* The limits a server's options ask for (pointers into opt, which must outlive out's use). */
void server_media_limits(const pith_server_options *opt, media_limits *out);

#endif
