/* SPDX-License-Identifier: MIT */
/*
 * The dashboard's static files (src/server/admin/dashboard/: index.html, app.js, style.css, ...),
 * embedded in the binary at build time: cmake/embed_dashboard.cmake turns every file of that
 * folder into a C array in the generated dash_assets.c, with its Content-Type (from its
 * extension) and an ETag (the SHA-1 of its bytes). Until the folder has an index.html, a
 * placeholder page (cmake/dashboard-placeholder.html) is embedded under that name.
 *
 * The table is constant data: nothing here allocates or changes.
 */
#ifndef SLUICE_SERVER_DASH_ASSETS_H
#define SLUICE_SERVER_DASH_ASSETS_H

#include <stddef.h>

typedef struct dash_file {
    const char *path;         /* the file's name in the folder, e.g. "app.js" */
    const char *content_type; /* e.g. "text/javascript; charset=utf-8" */
    const char *etag;         /* a strong ETag, quoted: "\"<sha1>\"" */
    const unsigned char *data;
    size_t len; /* bytes of data */
} dash_file;

/* Finds an embedded file by its URL path ("/app.js" or "app.js"); "/" and "" find index.html.
 * Returns NULL when there is none. The pointer is valid for the whole run. */
const dash_file *dash_find(const char *path);

/* The embedded files and how many there are (for listings and tests). */
extern const dash_file dash_files[];
extern const size_t dash_nfiles;

#endif
