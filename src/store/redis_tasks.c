/* SPDX-License-Identifier: MIT */
/*
 * The encoder and decoder of the task ops of the store script (redis_tasks.h; the argument and
 * reply layout is described at the top of src/store/redis/tasks.lua, which this file must match).
 *
 * Skeleton: the contract compiles; requests are refused until the encoder lands.
 */
#include "store/redis_tasks.h"

#include <string.h>

#include "base/alloc.h"
#include "sluice/error.h"

struct rtask_batch {
    char *prefix;
    char *channel;
    int64_t now_ns;
    size_t nreqs;
};

int rtask_batch_new(const char *prefix, rtask_batch **out)
{
    rtask_batch *b;
    size_t plen;

    *out = NULL;
    if (!prefix)
        prefix = "sluice";
    if (strchr(prefix, '{') || strchr(prefix, '}'))
        return SLUICE_EINVAL;
    plen = strlen(prefix);
    b = alloc_calloc(1, sizeof *b);
    if (!b)
        return SLUICE_ENOMEM;
    b->prefix = alloc_malloc(plen + 1);
    b->channel = alloc_malloc(plen + sizeof ":{all}:wake");
    if (!b->prefix || !b->channel) {
        rtask_batch_free(b);
        return SLUICE_ENOMEM;
    }
    memcpy(b->prefix, prefix, plen + 1);
    memcpy(b->channel, prefix, plen);
    memcpy(b->channel + plen, ":{all}:wake", sizeof ":{all}:wake");
    *out = b;
    return SLUICE_OK;
}

void rtask_batch_reset(rtask_batch *b)
{
    b->nreqs = 0;
}

void rtask_batch_free(rtask_batch *b)
{
    if (!b)
        return;
    alloc_free(b->prefix);
    alloc_free(b->channel);
    alloc_free(b);
}

void rtask_batch_set_now(rtask_batch *b, int64_t now_ns)
{
    b->now_ns = now_ns > 0 ? now_ns : 0;
}

int rtask_batch_add_add(rtask_batch *b, const rtask_add *a)
{
    (void)b;
    (void)a;
    return SLUICE_EINVAL;
}

int rtask_batch_add_claim(rtask_batch *b, const rtask_claim *c)
{
    (void)b;
    (void)c;
    return SLUICE_EINVAL;
}

static int add_done(rtask_batch *b, rtask_op op, const rtask_done *d)
{
    (void)b;
    (void)op;
    (void)d;
    return SLUICE_EINVAL;
}

int rtask_batch_add_ack(rtask_batch *b, const rtask_done *d)
{
    return add_done(b, RTASK_ACK, d);
}

int rtask_batch_add_fail(rtask_batch *b, const rtask_done *d)
{
    return add_done(b, RTASK_FAIL, d);
}

int rtask_batch_add_touch(rtask_batch *b, const rtask_done *d)
{
    return add_done(b, RTASK_TOUCH, d);
}

int rtask_batch_add_cancel(rtask_batch *b, const rtask_done *d)
{
    return add_done(b, RTASK_CANCEL, d);
}

int rtask_batch_add_info(rtask_batch *b, const rtask_done *d)
{
    return add_done(b, RTASK_INFO, d);
}

size_t rtask_batch_count(const rtask_batch *b)
{
    return b->nreqs;
}

rtask_op rtask_batch_op(const rtask_batch *b, size_t i)
{
    (void)b;
    (void)i;
    return (rtask_op)0;
}

int rtask_batch_command(rtask_batch *b, const char *sha, int *argc, const char ***argv,
                        const size_t **argvlen)
{
    (void)b;
    (void)sha;
    *argc = 0;
    *argv = NULL;
    *argvlen = NULL;
    return SLUICE_EINVAL;
}

int rtask_batch_result(const rtask_batch *b, const struct redisReply *reply, size_t i,
                       rtask_result *res)
{
    (void)b;
    (void)reply;
    (void)i;
    memset(res, 0, sizeof *res);
    return SLUICE_EINVAL;
}

int rtask_batch_task(const rtask_batch *b, const struct redisReply *reply, size_t i, size_t k,
                     rtask_task *out)
{
    (void)b;
    (void)reply;
    (void)i;
    (void)k;
    memset(out, 0, sizeof *out);
    return SLUICE_EINVAL;
}

const char *rtask_wake_channel(const rtask_batch *b)
{
    return b->channel;
}
