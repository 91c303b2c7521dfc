/* SPDX-License-Identifier: MIT */
/*
 * The server's log: one line per event on standard error,
 *
 *   2025-01-31T12:00:00.123Z INFO listening on 127.0.0.1:7379
 *
 * (UTC timestamp with milliseconds, level, message). Lines below the configured level are not
 * formatted at all. A message never spans lines: CR, LF and other control bytes in it are written
 * as spaces. Each line is written with one call, so lines from several processes sharing the
 * stream do not interleave. Not thread-safe (the server logs from its loop thread only).
 */
#ifndef SLUICE_SERVER_LOG_H
#define SLUICE_SERVER_LOG_H

#include "base/attr.h"

typedef enum log_level {
    LOG_LEVEL_DEBUG = 0, /* every connection and command error */
    LOG_LEVEL_INFO,      /* start, stop, configuration changes, engine events */
    LOG_LEVEL_WARN,      /* refused clients, clients closed for abuse */
    LOG_LEVEL_ERROR,     /* failures the server survives (out of memory on a client...) */
} log_level;

/* Sets the least severe level written (default LOG_LEVEL_INFO). */
void log_set_level(log_level level);

/* Parses "debug", "info", "warn" (or "warning") or "error" into *out. Returns 0, or -1 for
 * anything else (*out unchanged). */
int log_parse_level(const char *name, log_level *out);

/* Returns 1 when a message at `level` would be written. */
int log_enabled(log_level level);

/* Writes one line at `level` when it is enabled. */
void log_msg(log_level level, const char *fmt, ...) PRINTF_ATTR(2, 3);

#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)

#endif
