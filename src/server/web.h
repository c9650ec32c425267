/* The built-in chat page: `GET /` on `pith serve` answers with assets/web/index.html, which the build
 * compiles into the binary (assets/web/embed.cmake turns it into the array below), so an installed or
 * copied `pith` serves it with no files next to it. The page is static; it talks to
 * /v1/chat/completions from the browser (docs/api.md, "The web page"). */
#ifndef PITH_SERVER_WEB_H
#define PITH_SERVER_WEB_H

#include <stddef.h>

#include "server/http.h"

/* The page's bytes (NUL-terminated, the NUL not counted in the length); generated at build time. */
extern const unsigned char pith_web_index_html[];
extern const size_t pith_web_index_html_len;

/* GET /: 200 text/html with the page. Needs no API key: the page asks for one when the API says 401. */
enum MHD_Result handle_web_page(http_request *r);

#endif
