/* SPDX-License-Identifier: MIT */
/*
 * Error codes of libsluice.
 *
 * Every function that can fail returns an int: 0 (SLUICE_OK) on success and one of the negative
 * codes below on failure. The codes live in their own range (-1000 and below) so they can never be
 * confused with a count, a length or an errno value passed through by a caller.
 */
#ifndef SLUICE_ERROR_H
#define SLUICE_ERROR_H

#include "sluice/export.h"

#ifdef __cplusplus
extern "C" {
#endif
SLUICE_API_BEGIN

enum sluice_error {
    SLUICE_OK = 0,
    SLUICE_ENOMEM = -1001,    /* an allocation failed; nothing was changed */
    SLUICE_EINVAL = -1002,    /* an argument or a definition is invalid */
    SLUICE_ERANGE = -1003,    /* a value is outside what can be computed without overflow */
    SLUICE_EBUSY = -1004,     /* a table is at its configured cap (backpressure) */
    SLUICE_ENOTFOUND = -1005, /* no such limit, key, lease, reservation or task */
    SLUICE_ESTALE = -1006,    /* a lease that expired or was never issued */
    SLUICE_EHORIZON = -1007,  /* the earliest slot lies beyond the reservation horizon */
    SLUICE_EEXIST = -1008,    /* the name or id is already taken */
    SLUICE_EPARSE = -1009,    /* text that does not follow its grammar */
    SLUICE_ESTATE = -1010,    /* the operation does not apply in the object's current state */
    SLUICE_EIO = -1011, /* storage failed (write, fsync, disk full); nothing was made durable */
};

/* Returns a static, human-readable description of rc. Never NULL; unknown codes get a generic
 * text. The string must not be freed. */
const char *sluice_strerror(int rc);

/* Returns the stable upper-case code word of rc ("NOMEM", "INVAL", ...), used by the protocol
 * layers in error replies. Never NULL. */
const char *sluice_errname(int rc);

SLUICE_API_END

#ifdef __cplusplus
}
#endif
#endif
