/* server/web.c: the embedded page's routes (MHD thread). */
#include "server/web.h"

#include <stdio.h>
#include <string.h>

#include "server/server-impl.h"

const struct web_file *web_find(const char *url) {
    if (!url)
        return NULL;
    if (!strcmp(url, "/"))
        url = "/index.html";
    for (const struct web_file *f = web_files; f->path; f++)
        if (!strcmp(f->path, url))
            return f;
    return NULL;
}

/* FNV-1a of the content: the ETag, so a reload after an upgrade fetches the
 * new page and an unchanged one costs a 304. */
static void etag_of(const struct web_file *f, char out[24]) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < f->len; i++)
        h = (h ^ f->data[i]) * 0x100000001b3ull;
    snprintf(out, 24, "\"%016llx\"", (unsigned long long)h);
}

enum MHD_Result web_respond(struct exchange *ex, const struct web_file *f) {
    char etag[24];
    etag_of(f, etag);
    const char *inm = MHD_lookup_connection_value(ex->conn, MHD_HEADER_KIND, "If-None-Match");
    const bool fresh = inm && strstr(inm, etag);
    struct MHD_Response *r =
        fresh ? MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT)
              : MHD_create_response_from_buffer(f->len, (void *)f->data, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    if (!fresh)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, f->content_type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_ETAG, etag);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    /* The page runs only its own script and talks only to this daemon: a
     * model's output rendered as text can never load or run anything. */
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'none'; script-src 'self'; style-src 'self'; "
                            "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
                            "form-action 'none'; frame-ancestors 'none'");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    return http_respond_raw(ex, fresh ? 304 : 200, r);
}
