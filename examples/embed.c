/* SPDX-License-Identifier: MIT */
/*
 * Embedding the limiter core: a 100-per-second limit asked 101 times at one instant. The first
 * 100 pass; the 101st is told exactly how long to wait. Build against an installed sluice:
 *
 *     cc examples/embed.c $(pkg-config --cflags --libs sluice) -o embed
 */
#include <stdio.h>

#include <sluice/limit.h>

int main(void)
{
    int64_t now_ns = INT64_C(1700000000) * SLUICE_NS_PER_SEC; /* the caller's clock */
    sluice_limit_def def;
    sluice_limit *lim;
    sluice_decision d;
    char msg[128];
    int granted = 0;

    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = 100;                   /* 100 per ... */
    def.period_ns = SLUICE_NS_PER_SEC; /* ... second */
    if (sluice_limit_new(&def, &lim, msg, sizeof msg) != 0) {
        fprintf(stderr, "bad limit: %s\n", msg);
        return 1;
    }
    for (int i = 0; i < 101; i++) {
        if (sluice_limit_decide(lim, "tenant-42", 9, 1, now_ns, 0, &d) != 0)
            return 1;
        granted += d.allowed;
    }
    printf("granted %d of 101; the next may run in %lld ns\n", granted,
           (long long)d.retry_after_ns);
    sluice_limit_free(lim);
    return 0;
}
