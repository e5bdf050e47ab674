// The tasks of the TypeScript-SDK interop suite, declared with the official SDK
// (@hatchet-dev/typescript-sdk). Both the worker (worker.mjs) and the client side (suite.mjs)
// import this module: the client needs the declarations to run them. The client is built from
// the HATCHET_CLIENT_* environment, so import this only after that is set.
//
// Markers (files under INTEROP_MARKER_DIR) are how a task tells the suite what happened inside
// the worker process.

import { appendFileSync, existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import sdk from '@hatchet-dev/typescript-sdk';

const { HatchetClient, ConcurrencyLimitStrategy } = sdk;

export const hatchet = HatchetClient.init();

const MARKERS = process.env.INTEROP_MARKER_DIR || '.';
export const marker = (name) => join(MARKERS, name);
export const ECHO_MARK = 'ts-sdk';

/** t1, t6, t10: returns its input with a mark. */
export const echo = hatchet.task({
  name: 'ts-echo',
  retries: 0,
  fn: async (input) => ({ ...input, mark: ECHO_MARK }),
});

/** t2: a two-task DAG; `second` reads `first`'s output. */
export const dag = hatchet.workflow({ name: 'ts-dag' });
const first = dag.task({
  name: 'first',
  fn: async (input) => ({ n: (Number(input.n) || 0) + 1 }),
});
dag.task({
  name: 'second',
  parents: [first],
  fn: async (_input, ctx) => {
    const out = await ctx.parentOutput(first);
    return { n: out.n * 10 };
  },
});

/** t3: `boom` always fails; the on-failure task records what ctx.errors() shows it. */
export const failing = hatchet.workflow({ name: 'ts-fails' });
failing.task({
  name: 'boom',
  retries: 0,
  fn: async (input) => {
    throw new Error(`boom ${input.nonce}`);
  },
});
failing.onFailure({
  name: 'cleanup',
  fn: async (input, ctx) => {
    const errors = ctx.errors();
    writeFileSync(
      marker(`onfailure-${input.nonce}`),
      JSON.stringify({ errors, input, actionPayload: ctx.action?.actionPayload ?? null }),
    );
    return { errors };
  },
});

/** t4, t8: runs until its abort signal fires (at most 60 s), then records that it did. */
export const slow = hatchet.task({
  name: 'ts-slow',
  retries: 0,
  executionTimeout: '120s',
  fn: async (input, ctx) => {
    writeFileSync(marker(`slow-started-${input.nonce}`), ctx.taskRunExternalId());
    const signal = ctx.abortController.signal;
    const aborted = await new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), 60_000);
      const onAbort = () => {
        clearTimeout(timer);
        resolve(true);
      };
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
    });
    if (aborted) {
      writeFileSync(marker(`slow-aborted-${input.nonce}`), String(signal.reason ?? 'aborted'));
      throw new Error('cancelled');
    }
    return { finished: true, nonce: input.nonce };
  },
});

/** t5, t8: fails the first time it runs for a nonce, succeeds every time after. */
export const flaky = hatchet.task({
  name: 'ts-flaky',
  retries: 0,
  fn: async (input) => {
    const m = marker(`flaky-${input.nonce}`);
    if (!existsSync(m)) {
      writeFileSync(m, 'failed once');
      throw new Error(`first attempt of ${input.nonce} fails`);
    }
    appendFileSync(m, '\nsucceeded');
    return { nonce: input.nonce, recovered: true };
  },
});

/** t7: logs one line per level through the context; returns its own task run id. */
export const logger = hatchet.task({
  name: 'ts-logger',
  retries: 0,
  fn: async (input, ctx) => {
    const n = input.nonce;
    await ctx.log(`plain line ${n}`); // no level: INFO
    await ctx.log(`info line ${n}`, 'INFO');
    await ctx.log(`debug line ${n}`, 'DEBUG');
    await ctx.log(`warn line ${n}`, 'WARN');
    await ctx.log(`error line ${n}`, 'ERROR');
    await ctx.logger.info(`logger.info line ${n}`);
    return { taskRunExternalId: ctx.taskRunExternalId(), workflowRunId: ctx.workflowRunId() };
  },
});

/** t8 (queued): registered by a worker that then leaves, so its runs stay queued. */
export const orphan = hatchet.task({
  name: 'ts-orphan',
  fn: async (input) => ({ ran: true, nonce: input.nonce }),
});

/** t9: records the order in which runs start; served by a one-slot worker. */
export const prio = hatchet.task({
  name: 'ts-prio',
  retries: 0,
  fn: async (input) => {
    appendFileSync(marker(`prio-order-${input.batch}`), `${input.label}\n`);
    await new Promise((r) => setTimeout(r, 200));
    return { label: input.label };
  },
});

/** t12: a batch task keyed by input.group; each member answers with its batch's size. */
export const batch = hatchet.batchTask({
  name: 'ts-batch',
  batch: { maxSize: 2, maxInterval: 2000, groupKey: 'input.group' },
  fn: async (tasks) => {
    const size = Object.keys(tasks).length;
    const out = {};
    for (const [id, input] of Object.entries(tasks)) {
      out[id] = { nonce: input.nonce, group: input.group, size };
    }
    return out;
  },
});

/** t13: makes a span of its own (with the SDK's instrumentation on, see otel.mjs) and returns
 * its run ids; runs by trigger and on the event `ts:traced`. */
export const traced = hatchet.task({
  name: 'ts-traced',
  retries: 0,
  onEvents: ['ts:traced'],
  fn: async (input, ctx) => {
    const { tracer } = await import('./otel.mjs');
    await tracer.startActiveSpan('ts.work', async (span) => {
      span.setAttribute('ts.note', String(input.note ?? ''));
      await new Promise((r) => setTimeout(r, 5));
      span.end();
    });
    return { nonce: input.nonce, run: ctx.workflowRunId(), task: ctx.taskRunExternalId() };
  },
});

/** t16: a durable task that sleeps 1 s three times and says how long each sleep took (a
 * replayed sleep returns at once); `at` tells one execution's output from the next. */
export const resettable = hatchet.durableTask({
  name: 'ts-resettable',
  retries: 0,
  executionTimeout: '120s',
  fn: async (_input, ctx) => {
    const took = [];
    for (let i = 0; i < 3; i += 1) {
      const t0 = Date.now();
      await ctx.sleepFor('1s');
      took.push((Date.now() - t0) / 1000);
    }
    return { took, at: Date.now() };
  },
});

/** t17: a durable task evicted after 1 s of waiting (its eviction policy) for the event
 * `ts:wake:<nonce>`; counts its invocations per nonce in a marker file. */
export const evictable = hatchet.durableTask({
  name: 'ts-evictable',
  retries: 0,
  executionTimeout: '120s',
  evictionPolicy: { ttl: '1s', allowCapacityEviction: false },
  fn: async (input, ctx) => {
    appendFileSync(marker(`evictable-${input.nonce}`), 'invoked\n');
    const event = await ctx.waitForEvent(`ts:wake:${input.nonce}`);
    return { nonce: input.nonce, woke: event };
  },
});

/** t21: a child that counts its executions per (nonce, i) and runs `sleep` seconds. */
export const kid = hatchet.task({
  name: 'ts-durable-kid',
  retries: 0,
  fn: async (input) => {
    appendFileSync(marker(`kid-${input.nonce}-${input.i}`), 'ran\n');
    await new Promise((resolve) => setTimeout(resolve, (input.sleep || 0) * 1000));
    return { nonce: input.nonce, i: input.i };
  },
});

/** t21: a durable task (evicted after 1 s of waiting) that spawns a 4 s child with
 * `ctx.spawnChild`, then three with `ctx.spawnChildren`, both over the durable stream; counts
 * its invocations per nonce. */
export const durableParent = hatchet.durableTask({
  name: 'ts-durable-parent',
  retries: 0,
  executionTimeout: '120s',
  evictionPolicy: { ttl: '1s', allowCapacityEviction: false },
  fn: async (input, ctx) => {
    appendFileSync(marker(`dparent-${input.nonce}`), 'invoked\n');
    const first = await ctx.spawnChild(kid, { nonce: input.nonce, i: 0, sleep: 4 });
    const rest = await ctx.spawnChildren(
      [1, 2, 3].map((i) => ({ workflow: kid, input: { nonce: input.nonce, i } })),
    );
    return { nonce: input.nonce, first, rest };
  },
});

/** t19: a DAG whose first task fails its first attempt (retries 1) and a second after it. */
export const retriedDag = hatchet.workflow({ name: 'ts-retried-dag' });
const wobbly = retriedDag.task({
  name: 'wobbly',
  retries: 1,
  fn: async (input, ctx) => {
    if (ctx.retryCount() === 0) throw new Error(`first attempt of ${input.nonce} fails`);
    return { nonce: input.nonce };
  },
});
retriedDag.task({
  name: 'after',
  parents: [wobbly],
  fn: async (input) => ({ nonce: input.nonce, after: true }),
});

/** t20: a task with a status-based idempotency key (`input.key`); a run with `park` waits
 * for its abort signal (at most 60 s). */
export const keyed = hatchet.task({
  name: 'ts-keyed',
  retries: 0,
  executionTimeout: '120s',
  idempotency: { expression: 'input.key', strategy: 'status', fallbackTtlMs: 600000 },
  fn: async (input, ctx) => {
    if (input.park) {
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, 60_000);
        ctx.abortController.signal.addEventListener('abort', () => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return { key: input.key };
  },
});

/** t22: a DAG with an onSuccess task, which runs once both tasks completed; a negative n fails
 * `a`, and the onSuccess task is skipped. */
export const succeeding = hatchet.workflow({ name: 'ts-on-success' });
const sa = succeeding.task({
  name: 'a',
  retries: 0,
  fn: async (input) => {
    if (Number(input.n) < 0) throw new Error(`a negative n fails (${input.nonce})`);
    return { n: Number(input.n) + 1 };
  },
});
succeeding.task({
  name: 'b',
  parents: [sa],
  fn: async (_input, ctx) => ({ n: (await ctx.parentOutput(sa)).n * 10 }),
});
succeeding.onSuccess({
  name: 'celebrate',
  fn: async (input, ctx) => {
    appendFileSync(marker(`onsuccess-${input.nonce}`), `${ctx.workflowRunId()}\n`);
    return { celebrated: true };
  },
});

/** t23: a task-level concurrency limit (one run per `input.group` at a time); each run
 * records its group, start and end (ms) so the suite sees whether two of a group overlapped. */
export const limited = hatchet.task({
  name: 'ts-limited',
  retries: 0,
  concurrency: {
    expression: 'input.group',
    maxRuns: 1,
    limitStrategy: ConcurrencyLimitStrategy.GROUP_ROUND_ROBIN,
  },
  fn: async (input) => {
    const start = Date.now();
    await new Promise((resolve) => setTimeout(resolve, 300));
    appendFileSync(marker(`limited-${input.nonce}`), `${input.group} ${start} ${Date.now()}\n`);
    return { group: input.group };
  },
});

/** What each worker process (worker.mjs INTEROP_TS_SET=...) registers. */
export const SETS = {
  main: [echo, dag, failing, slow, flaky, logger, batch, resettable, evictable, retriedDag,
    keyed, kid, durableParent, succeeding, limited],
  registrar: [orphan, prio],
  prio: [prio],
  otel: [traced],
};
