/* SPDX-License-Identifier: MIT */
/*
 * The encoder and decoder of the batched limits script (redis_limits.h). Skeleton: the API
 * compiles and links; the encoding follows.
 */
#include "store/redis_limits.h"

#include <hiredis.h>
#include <string.h>

#include "base/alloc.h"
#include "sluice/error.h"

extern const char rlim_lua_text[];
extern const size_t rlim_lua_text_len;

struct rlim_batch {
    size_t n;
};

int rlim_batch_new(const char *prefix, rlim_batch **out)
{
    (void)prefix;
    *out = alloc_calloc(1, sizeof **out);
    return *out ? SLUICE_OK : SLUICE_ENOMEM;
}

void rlim_batch_reset(rlim_batch *b)
{
    b->n = 0;
}

void rlim_batch_free(rlim_batch *b)
{
    alloc_free(b);
}

void rlim_batch_set_audit(rlim_batch *b, int on)
{
    (void)b;
    (void)on;
}

void rlim_batch_set_now(rlim_batch *b, int64_t now_ns)
{
    (void)b;
    (void)now_ns;
}

int rlim_batch_add(rlim_batch *b, rlim_op op, const rlim_link *links, size_t n,
                   const rlim_args *args)
{
    (void)b;
    (void)op;
    (void)links;
    (void)n;
    (void)args;
    return SLUICE_EINVAL;
}

size_t rlim_batch_count(const rlim_batch *b)
{
    return b->n;
}

int rlim_batch_command(rlim_batch *b, const char *sha, int *argc, const char ***argv,
                       const size_t **argvlen)
{
    (void)b;
    (void)sha;
    *argc = 0;
    *argv = NULL;
    *argvlen = NULL;
    return SLUICE_EINVAL;
}

int rlim_batch_result(const rlim_batch *b, const struct redisReply *reply, size_t i,
                      rlim_result *res, sluice_decision *decisions)
{
    (void)b;
    (void)reply;
    (void)i;
    (void)decisions;
    memset(res, 0, sizeof *res);
    return SLUICE_EINVAL;
}

size_t rlim_batch_link_count(const rlim_batch *b, size_t i)
{
    (void)b;
    (void)i;
    return 0;
}

const char *rlim_script(size_t *len)
{
    if (len)
        *len = rlim_lua_text_len;
    return rlim_lua_text;
}
