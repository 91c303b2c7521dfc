// SPDX-License-Identifier: MIT
// Type definitions of sluice-client (hand-written: the package is plain JavaScript, no build
// step). They describe index.js, lib/worker.js, lib/queue.js and lib/errors.js; keep them in
// step with those files.

import { EventEmitter } from 'node:events';
import type { Redis, RedisOptions } from 'ioredis';

/** Where the server is: ioredis options ({host, port, password, ...}), a redis:// URL, or an ioredis client. */
export type Connection = (RedisOptions & { host?: string; port?: number; password?: string }) | string | Redis;

/** A refusal by the server: `code` is its code word (docs/commands.md, "Errors"). */
export class SluiceError extends Error {
  constructor(code: string, detail?: string);
  /** ERR, WRONGARGS, NOLIMIT, RATELIMITED, BUSY, NOLEASE, NOTASK, EXISTS, IOERR, ... */
  readonly code: string;
  /** The sentence after the code word. */
  readonly detail: string;
}

/** A limit said no (a -RATELIMITED reply, or a denied throttle with throwOnDeny). */
export class RateLimitedError extends SluiceError {
  constructor(detail?: string, fields?: Record<string, string>);
  /** Every name=value field as sent, percent-decoded. */
  readonly fields: Record<string, string>;
  readonly limit: string | null;
  readonly kind: string | null;
  readonly tier: string | null;
  readonly key: string | null;
  readonly limitValue: number | null;
  readonly windowMs: number | null;
  /** Milliseconds until the same request would pass; -1: never. */
  readonly retryAfter: number | null;
  /** From throttle({throwOnDeny}) only. */
  readonly remaining: number | null;
  /** From throttle({throwOnDeny}) only: ms until the key is back to full capacity. */
  readonly resetAfter: number | null;
}
/** A table is full (max_keys, max_tasks, max_parked): back off and retry. */
export class BusyError extends SluiceError {}
/** No limit (or task type) of that name. */
export class NoLimitError extends SluiceError {}
/** The task is not running for this attempt any more (its lease lapsed). */
export class NoLeaseError extends SluiceError {}
/** No task of that id. */
export class NoTaskError extends SluiceError {}
/** The task key is held by a running task. */
export class ExistsError extends SluiceError {
  readonly runningId: number | null;
}

/** Thrown by a handler whose upstream said "retry after ms": FAIL ... RETRY_AFTER ms, no attempt used up. */
export class RetryAfterError extends Error {
  constructor(ms: number, message?: string);
  readonly retryAfter: number;
}
/** Thrown by a handler for a task that can never succeed: FAIL ... DEAD. */
export class UnrecoverableError extends Error {
  constructor(message?: string);
}

/** A SluiceError for an ioredis ReplyError or an error reply's text. */
export function fromReply(err: Error | string): SluiceError;

/** One delivery of a task. */
export class Task<P = any> {
  readonly id: number;
  readonly type: string;
  /** The payload parsed from JSON (the raw text when it does not parse). */
  readonly payload: P;
  readonly rawPayload: string;
  /** 1 on the first delivery. */
  readonly attempt: number;
  /** When the lease ends (Unix ms), as of the last TASK.GET or TASK.TOUCH. */
  readonly leaseUntil: number;
  /** The cost reported with the ACK, once set. */
  readonly cost: number | null;
  /** True once the server refused a TOUCH/ACK for this attempt: another worker has the task. */
  readonly leaseLost: boolean;
  /** Aborts when the lease is lost or close() releases the task. */
  readonly signal: AbortSignal;
  /** What the task really cost (an integer 0..10^9), reported with TASK.ACK ... COST n. */
  setCost(n: number): void;
}

/** A handler's result: {cost} (or a bare integer cost) is reported with the ACK. */
export type HandlerResult = void | undefined | null | number | { cost?: number; [k: string]: unknown };
export type Handler<P = any> = (task: Task<P>) => HandlerResult | Promise<HandlerResult>;

export interface WorkerOptions {
  /** Handlers running at once (1). */
  concurrency?: number;
  connection?: Connection;
  /** How long one TASK.GET blocks, in ms (1000); close() waits at most this for it. */
  blockTimeout?: number;
  /** The type's lease, when known: renewals every third of it exactly. */
  leaseMs?: number;
  /** Longest wait between renewals when leaseMs is not given (5000 ms). */
  maxTouchInterval?: number;
  /** How long an ACK/FAIL is retried over a lost connection (60000 ms). */
  settleTimeout?: number;
  /** Start fetching at once (true); else call run(). */
  autorun?: boolean;
}

export interface WorkerStats {
  acked: number;
  failed: number;
  released: number;
  /** ACK/FAIL refused with NOLEASE: the lease had lapsed. */
  lost: number;
  reconnects: number;
}

export class Worker<P = any> extends EventEmitter {
  constructor(type: string | string[], handler: Handler<P>, opts?: WorkerOptions);
  readonly types: string[];
  readonly concurrency: number;
  readonly stats: WorkerStats;
  /** The connection ACK, FAIL and TOUCH go on (the blocking TASK.GET has its own). */
  readonly redis: Redis;
  readonly closing: boolean;
  /** Handlers running now. */
  readonly running: number;
  /** Starts fetching (once); resolves when the fetch loop ends. */
  run(): Promise<void>;
  /**
   * Graceful shutdown: no more fetching, running handlers finish (up to `timeout` ms, default
   * without end), the rest are released (back in the queue at once). Resolves when all is settled.
   */
  close(opts?: { timeout?: number }): Promise<void>;

  on(event: 'completed', listener: (task: Task<P>, result: HandlerResult) => void): this;
  on(event: 'failed', listener: (task: Task<P>, err: unknown) => void): this;
  on(event: 'lost', listener: (task: Task<P>, err: SluiceError) => void): this;
  on(event: 'error', listener: (err: Error & { context?: string }) => void): this;
  on(event: 'closed', listener: () => void): this;
}

export interface AddOptions {
  /** The key of limits with key: explicit. */
  key?: string;
  /** What the task asks of limits with units: task (1..10^9). */
  units?: number;
  priority?: number;
  /** A task key: adding it again while queued replaces the payload and keeps the id. */
  id?: string;
  /** Hold it back this many ms. */
  delay?: number;
}

export interface ThrottleOptions {
  units?: number;
  /** Decide without charging. */
  peek?: boolean;
  /** Reject a denial with a RateLimitedError instead of resolving allowed: false. */
  throwOnDeny?: boolean;
}

export interface ThrottleResult {
  allowed: boolean;
  /** The capacity of the limit reported. */
  limit: number;
  remaining: number;
  /** ms; 0 when allowed, -1 never. */
  retryAfter: number;
  resetAfter: number;
  deniedBy: string | null;
}

export interface Explanation {
  state: string;
  limit: string | null;
  key: string | null;
  position: number | null;
  queue_length: number | null;
  wake_ms: number | null;
  estimated_start_ms: number | null;
  text: string;
  [field: string]: unknown;
}

export interface TaskInfo {
  id: number;
  state: 'queued' | 'parked' | 'running' | 'done' | 'failed' | 'cancelled';
  type: string;
  payload: string;
  task_key: string | null;
  priority: number;
  units: number;
  attempt: number;
  submitted_ms: number;
  not_before_ms: number | null;
  lease_until_ms: number | null;
  fail_reason: string | null;
  fail_message: string | null;
  [field: string]: unknown;
}

export class Queue extends EventEmitter {
  constructor(opts?: { connection?: Connection });
  readonly redis: Redis;
  /** TASK.ADD; resolves to the task's id. The payload is JSON-encoded (a Buffer is sent as JSON text). */
  add(type: string, payload?: unknown, opts?: AddOptions): Promise<number>;
  /** THROTTLE on a limit or a task type's chain. */
  throttle(limit: string, key?: string, opts?: ThrottleOptions): Promise<ThrottleResult>;
  /** TASK.EXPLAIN: why a task waits and when it should start. */
  explain(id: number): Promise<Explanation>;
  /** TASK.INFO. */
  info(id: number): Promise<TaskInfo>;
  /** TASK.CANCEL: true when cancelled, false when it had finished already. */
  cancel(id: number): Promise<boolean>;
  /** Any command, refusals rejected as SluiceError. */
  call(...args: Array<string | number | Buffer>): Promise<unknown>;
  close(): Promise<void>;
  on(event: 'error', listener: (err: Error) => void): this;
}
