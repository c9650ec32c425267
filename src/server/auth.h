/* API keys: the set of accepted keys and the check of a request's "Authorization: Bearer KEY" header.
 *
 * The check takes the same time whatever the presented key shares with an accepted one: every key is
 * stored zero-padded to AUTH_MAX_KEY bytes and every comparison runs over all of them, over every key,
 * with no early exit. A key file holds one key per line; blank lines and lines starting with '#' are
 * skipped, surrounding whitespace is trimmed. */
#ifndef PITH_SERVER_AUTH_H
#define PITH_SERVER_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "pith/status.h"

#define AUTH_MAX_KEY 256
#define AUTH_MAX_KEYS 1024

typedef struct auth_key {
    unsigned char bytes[AUTH_MAX_KEY];
    size_t len;
} auth_key;

typedef struct auth_keys {
    auth_key *keys;
    int n;
} auth_keys;

/* Adds one key (1..AUTH_MAX_KEY bytes, printable ASCII, no spaces). */
int auth_add_key(auth_keys *a, const char *key, pith_err *err);
/* Reads keys from a regular file (a FIFO, device or directory is refused, never waited on); one that
 * holds no key is an error. */
int auth_add_key_file(auth_keys *a, const char *path, pith_err *err);
/* True when group or others have any access to the file (worth a warning: it holds secrets). */
bool auth_key_file_shared(const char *path);
void auth_free(auth_keys *a);

bool auth_enabled(const auth_keys *a);
/* header: the Authorization header's value (NULL when absent). True when no keys are set, or when it is
 * "Bearer K" with K one of the keys. */
bool auth_check(const auth_keys *a, const char *header);
/* key: a key as given on its own (Anthropic's x-api-key header; NULL when absent). True when no keys are
 * set, or when it is one of the keys; the same constant-time comparison. */
bool auth_check_key(const auth_keys *a, const char *key);

#endif
