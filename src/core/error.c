/* SPDX-License-Identifier: MIT */
/*
 * Texts and code words for the error codes of include/sluice/error.h.
 */
#include "sluice/error.h"

#include <stddef.h>

static const struct {
    int rc;
    const char *name;
    const char *text;
} errors[] = {
    {SLUICE_OK, "OK", "success"},
    {SLUICE_ENOMEM, "NOMEM", "out of memory"},
    {SLUICE_EINVAL, "INVAL", "invalid argument"},
    {SLUICE_ERANGE, "RANGE", "value out of computable range"},
    {SLUICE_EBUSY, "BUSY", "table is at its cap"},
    {SLUICE_ENOTFOUND, "NOTFOUND", "not found"},
    {SLUICE_ESTALE, "STALE", "lease expired or unknown"},
    {SLUICE_EHORIZON, "HORIZON", "slot beyond the reservation horizon"},
    {SLUICE_EEXIST, "EXISTS", "already exists"},
    {SLUICE_EPARSE, "PARSE", "syntax error"},
    {SLUICE_ESTATE, "STATE", "not allowed in the current state"},
    {SLUICE_EIO, "IO", "storage error"},
};

const char *sluice_strerror(int rc)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].rc == rc)
            return errors[i].text;
    return "unknown error";
}

const char *sluice_errname(int rc)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].rc == rc)
            return errors[i].name;
    return "ERR";
}
