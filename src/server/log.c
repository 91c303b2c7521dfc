/* SPDX-License-Identifier: MIT */
/*
 * The server's log (see log.h): a level filter and a line formatter writing to stderr.
 *
 * The timestamp is read from the wall clock when a line is written; logging is never on the
 * per-request path (per-request events are at debug level, off by default), so this read does
 * not break the rule that the loop reads its clock once per turn.
 */
#include "server/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static log_level min_level = LOG_LEVEL_INFO;

static const char *const level_names[] = {"DEBUG", "INFO", "WARN", "ERROR"};

void log_set_level(log_level level)
{
    min_level = level;
}

int log_parse_level(const char *name, log_level *out)
{
    static const struct {
        const char *name;
        log_level level;
    } names[] = {
        {"debug", LOG_LEVEL_DEBUG},  {"info", LOG_LEVEL_INFO},   {"warn", LOG_LEVEL_WARN},
        {"warning", LOG_LEVEL_WARN}, {"error", LOG_LEVEL_ERROR},
    };

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(name, names[i].name) == 0) {
            *out = names[i].level;
            return 0;
        }
    }
    return -1;
}

int log_enabled(log_level level)
{
    return level >= min_level;
}

void log_msg(log_level level, const char *fmt, ...)
{
    char line[1024];
    struct timespec ts;
    struct tm tm;
    size_t n, head;
    va_list ap;
    int m;

    if (!log_enabled(level))
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    m = snprintf(line + n, sizeof(line) - n, ".%03ldZ %s ", ts.tv_nsec / 1000000L,
                 level_names[level]);
    n += m > 0 ? (size_t)m : 0;
    head = n;
    va_start(ap, fmt);
    m = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    n += (size_t)m < sizeof(line) - n - 1 ? (size_t)m : sizeof(line) - n - 2;
    for (size_t i = head; i < n; i++) {
        if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
            line[i] = ' ';
    }
    line[n++] = '\n';
    fwrite(line, 1, n, stderr);
    fflush(stderr);
}
