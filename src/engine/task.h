/* SPDX-License-Identifier: MIT */
/*
 * Task objects: one allocation per task holding the task, its resolved links, their keys and its
 * task key; the payload (which a same-task-key submit may replace) and a worker's failure
 * message are allocated apart. Also the orders tasks are kept in and their lookup tables.
 *
 * Memory per task is what a parked backlog costs, so the block is packed: a one-limit task with
 * a short key takes about 200 bytes plus its payload.
 */
#ifndef SLUICE_ENGINE_TASK_H
#define SLUICE_ENGINE_TASK_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine_impl.h"

/* A link as resolution produced it, before it is copied into a task. */
typedef struct link_spec {
    elimit *lim;
    const char *key; /* borrowed */
    size_t keylen;
    int64_t units;
    uint16_t tier;
    uint8_t flags; /* LINK_SETTLE or 0 */
} link_spec;

/* Allocates a task with copies of nlinks links (their keys), of the task key and of the
 * producer's explicit key (each NULL when none). Everything else is zeroed, hidx is HEAP_NONE,
 * park_link, fail_link and group_link LINK_NONE; the links take no reference (the caller does).
 * Returns 0 and *out, SLUICE_EINVAL when the block would pass 4 GiB or there are more than 65534
 * links, or SLUICE_ENOMEM. */
int task_new(const link_spec *links, size_t nlinks, const char *task_key, size_t task_key_len,
             const char *key, size_t key_len, task **out);

/* Frees the task, its payload and message (not the references its links hold). Accepts NULL. */
void task_free(task *t);

/* Returns a NUL-terminated copy of payload (NULL and 0 mean none: *out NULL), or SLUICE_ENOMEM. */
int task_copy_payload(const char *payload, size_t len, char **out);

/* Bytes held by the task: its block and payload. */
size_t task_size(const task *t);

/* Ready and wait-queue order: higher priority first, then earlier submission. */
int task_more_urgent(const task *a, const task *b);
int task_less_ready(const void *a, const void *b);

/* Timer order: earlier due_ns first (then id, so the order is total). */
int task_less_due(const void *a, const void *b);

/* The id table: hash of an id, and equality against a uint64_t key. */
uint64_t task_id_hash(uint64_t id);
int task_id_eq(const void *p, const void *key);

/* The task-key table: a task key given as this pair. */
typedef struct task_key_ref {
    const char *key;
    size_t len;
} task_key_ref;

uint64_t task_key_hash(const char *key, size_t len);
int task_key_eq(const void *p, const void *key);

/* Looks a task up by id; NULL when unknown (or freed). */
task *task_by_id(const sluice_engine *e, uint64_t id);

/* Looks an unfinished task up by its task key; NULL when none holds it. */
task *task_by_key(const sluice_engine *e, const char *key, size_t len);

#endif
