/* JSON files a load reads (tokenizer.json, tokenizer_config.json, config.json, index files), parsed with
 * a bound on what the parse may build.
 *
 * cJSON spends about 80 bytes on every value (a node and its allocation) and 32 more on every key and
 * string, so a file of small values ("0,0,0,...") costs 40 times its size: 1.35 GB for 32 MB. The values
 * are counted first, in one pass over the text, and a file with more than max_values is refused before
 * any tree is built ("PATH: more than N JSON values"). The largest real tokenizer.json files hold under
 * 2 million (Gemma 3's: 1.86 million in 33 MB). */
#ifndef PITH_FORMAT_JSON_FILE_H
#define PITH_FORMAT_JSON_FILE_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "pith/status.h"

/* The value bound every loader uses: twice Gemma 3's tokenizer.json; at most ~600 MB of cJSON tree. */
#define PITH_JSON_MAX_VALUES ((size_t)4 << 20)

/* An upper bound on the values in text: one, plus one per ',', '[' and '{' outside strings. */
size_t pith_json_count_values(const char *text, size_t len);

/* Parses text (errors name path): "PATH: more than N JSON values" or "PATH: not valid JSON". */
int pith_json_parse(const char *path, const char *text, size_t len, size_t max_values, cJSON **out, pith_err *err);

/* Reads (pith_read_small_file: a regular file of at most max_bytes) and parses path. With optional, a
 * file that does not exist gives 0 with *out NULL. */
int pith_json_read(const char *path, size_t max_bytes, size_t max_values, bool optional, cJSON **out, pith_err *err);

#endif
