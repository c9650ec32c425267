#include "server/web.h"

enum MHD_Result handle_web_page(http_request *r) {
    return http_send_text(r, 200, "text/html; charset=utf-8", (const char *)pith_web_index_html,
                          pith_web_index_html_len);
}
