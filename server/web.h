/* server/web.h: the daemon's web page (GET /), served from the binary.
 *
 * The files under server/web/ are embedded at build time (embed.py writes
 * web_files[]); web_find maps a request path to one. Read-only data: any
 * thread may call it. */
#pragma once

#include <stddef.h>

struct web_file {
    const char *path; /* "/index.html" */
    const char *content_type;
    const unsigned char *data;
    size_t len;
};

/* NULL-path terminated; generated (server/web/embed.py). */
extern const struct web_file web_files[];

/* The file for a request path ("/" is "/index.html"), or NULL. */
const struct web_file *web_find(const char *url);
