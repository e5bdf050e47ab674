// Tasks of the placement suite (placement.mjs): worker labels, sticky, DAG conditions, durable
// OR waits and event filters, declared with the official TypeScript SDK. Imported by the
// workers (placement_worker.mjs) and by the client side; build the client only after the
// HATCHET_CLIENT_* environment is set. grpc_trace.mjs is imported first so that it wraps the
// message codecs before HatchetClient.init() creates the gRPC clients.
//
// Every task reports where it ran: `worker` (INTEROP_TS_WORKER_NAME of its process) and
// `workerId` (ctx.worker.id()), in its output and/or a marker file under INTEROP_MARKER_DIR.

import './grpc_trace.mjs';
import { appendFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import sdk from '@hatchet-dev/typescript-sdk';

const { HatchetClient, WorkerLabelComparator, StickyStrategy, Or, SleepCondition } = sdk;

export const hatchet = HatchetClient.init();

const MARKERS = process.env.INTEROP_MARKER_DIR || '.';
export const marker = (name) => join(MARKERS, name);
const WORKER = process.env.INTEROP_TS_WORKER_NAME || 'client';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const where = (ctx) => ({ worker: WORKER, workerId: ctx.worker.id() });

// ---------------------------------------------------------------- u1: worker labels
// Workers: tsp-lbl-fast {model: 'fast', memory: 2048}, tsp-lbl-slow {model: 'slow', memory: 512}.

const labelled = (name, desiredWorkerLabels) =>
  hatchet.task({
    name,
    retries: 0,
    ...(desiredWorkerLabels ? { desiredWorkerLabels } : {}),
    fn: async (input, ctx) => {
      appendFileSync(marker(`lbl-${input.nonce}`), `${WORKER}\n`);
      return { ...where(ctx), nonce: input.nonce };
    },
  });

const GT = WorkerLabelComparator.GREATER_THAN;
const LT = WorkerLabelComparator.LESS_THAN;

export const labels = {
  reqFast: labelled('tsp-lbl-req-fast', { model: { value: 'fast', required: true } }),
  reqSlow: labelled('tsp-lbl-req-slow', { model: { value: 'slow', required: true } }),
  memGt: labelled('tsp-lbl-mem-gt', { memory: { value: 1024, required: true, comparator: GT } }),
  memLt: labelled('tsp-lbl-mem-lt', { memory: { value: 1024, required: true, comparator: LT } }),
  none: labelled('tsp-lbl-none', { gpu: { value: 'a100', required: true } }),
  // optional labels only: fast scores 100 (memory 2048 > 1024), slow scores 10 (model)
  prefFast: labelled('tsp-lbl-pref-fast', {
    model: { value: 'slow', weight: 10 },
    memory: { value: 1024, comparator: GT, weight: 100 },
  }),
  // the same labels with the weights swapped: slow 100, fast 10
  prefSlow: labelled('tsp-lbl-pref-slow', {
    model: { value: 'slow', weight: 100 },
    memory: { value: 1024, comparator: GT, weight: 10 },
  }),
  dyn: labelled('tsp-lbl-dyn', { zone: { value: 'blue', required: true } }),
  any: labelled('tsp-lbl-any', undefined),
};

// ---------------------------------------------------------------- u2: sticky
// Workers: tsp-sticky-a and tsp-sticky-b, identical (8 default slots, 1 durable slot).

/** Sticky SOFT child workflow, spawned with {sticky: true} by the DAG roots below. */
export const stickyChild = hatchet.workflow({ name: 'tsp-sticky-child', sticky: StickyStrategy.SOFT });
stickyChild.task({ name: 'child', fn: async (_input, ctx) => where(ctx) });

function stickyDag(name, sticky) {
  const wf = hatchet.workflow({ name, sticky });
  const root = wf.task({
    name: 'root',
    fn: async (input, ctx) => {
      await sleep(200);
      // the Context API: sets TriggerWorkflowRequest.desired_worker_id to this worker
      const viaCtx = await ctx.runChild(stickyChild, { via: 'ctx.runChild' }, { sticky: true });
      // the declaration API from inside a task (recorded only, see the report)
      let viaDecl;
      try {
        viaDecl = await stickyChild.run({ via: 'declaration.run' }, { sticky: true });
      } catch (e) {
        viaDecl = { error: String(e?.message ?? e) };
      }
      return { ...where(ctx), nonce: input.nonce, viaCtx, viaDecl };
    },
  });
  const step = (n, parents) =>
    wf.task({
      name: n,
      parents,
      fn: async (_input, ctx) => {
        await sleep(200);
        return where(ctx);
      },
    });
  const left = step('left', [root]);
  const right = step('right', [root]);
  step('join', [left, right]);
  return wf;
}

export const stickySoft = stickyDag('tsp-sticky-soft', StickyStrategy.SOFT);
export const stickyHard = stickyDag('tsp-sticky-hard', StickyStrategy.HARD);

/**
 * Starts a sticky DAG from inside a task with {sticky: true}, so the DAG's "starting worker" is
 * the worker this launcher runs on. Durable, so that it takes the worker's only durable slot:
 * two launchers started together run on the two different workers.
 */
export const stickyLaunch = hatchet.durableTask({
  name: 'tsp-sticky-launch',
  executionTimeout: '60s',
  fn: async (input, ctx) => {
    const wf = input.strategy === 'hard' ? stickyHard : stickySoft;
    const out = await ctx.runChild(wf, { nonce: input.nonce }, { sticky: true });
    return { ...where(ctx), out };
  },
});

// ---------------------------------------------------------------- u3: DAG conditions

const at = (ctx, extra = {}) => ({ at: Date.now(), ...where(ctx), triggers: ctx.triggers() ?? null, ...extra });

export const cond = hatchet.workflow({ name: 'tsp-cond' });
const condStart = cond.task({
  name: 'start',
  fn: async (input) => {
    writeFileSync(marker(`cond-start-${input.nonce}`), String(Date.now()));
    return { n: input.n, at: Date.now() };
  },
});
const condTasks = [
  cond.task({ name: 'wait_sleep', parents: [condStart], waitFor: new SleepCondition('2s'), fn: async (_i, ctx) => at(ctx) }),
  cond.task({
    name: 'wait_event',
    parents: [condStart],
    waitFor: { eventKey: 'tsp-cond:go', expression: 'input.ok == true' },
    fn: async (input, ctx) => {
      writeFileSync(marker(`cond-wait_event-${input.nonce}`), String(Date.now()));
      return at(ctx);
    },
  }),
  cond.task({ name: 'skip_parent', parents: [condStart], skipIf: { parent: condStart, expression: 'output.n > 5' }, fn: async (_i, ctx) => at(ctx) }),
  cond.task({ name: 'no_skip', parents: [condStart], skipIf: { parent: condStart, expression: 'output.n > 100' }, fn: async (_i, ctx) => at(ctx) }),
  cond.task({
    name: 'skip_event',
    parents: [condStart],
    waitFor: new SleepCondition('6s'),
    skipIf: { eventKey: 'tsp-cond:skip' },
    fn: async (_i, ctx) => at(ctx),
  }),
  cond.task({
    name: 'or_event',
    parents: [condStart],
    waitFor: Or({ sleepFor: '15s' }, { eventKey: 'tsp-cond:or' }),
    fn: async (_i, ctx) => at(ctx),
  }),
  cond.task({
    name: 'or_sleep',
    parents: [condStart],
    waitFor: Or({ sleepFor: '2s' }, { eventKey: 'tsp-cond:never' }),
    fn: async (_i, ctx) => at(ctx),
  }),
  cond.task({
    name: 'and_groups',
    parents: [condStart],
    // The parent condition gates the task's sleeps (the real engine's CREATE_MATCH): it does
    // not stand in for the 5 s sleep of its Or group, so this runs at +5 s, not +1 s.
    waitFor: [Or({ parent: condStart, expression: 'output.n > 5' }, { sleepFor: '5s' }), { sleepFor: '1s' }],
    fn: async (_i, ctx) => at(ctx),
  }),
];
const skipParent = condTasks[2];
const afterSkip = cond.task({ name: 'after_skip', parents: [skipParent], fn: async (_i, ctx) => at(ctx) });
cond.task({
  name: 'final',
  parents: [condStart, ...condTasks, afterSkip],
  fn: async (_i, ctx) => {
    const seen = {};
    for (const t of [...condTasks, afterSkip]) {
      try {
        seen[t.name] = await ctx.parentOutput(t);
      } catch (e) {
        seen[t.name] = { parentOutputError: String(e?.message ?? e) };
      }
    }
    return at(ctx, { seen, parentsKeys: Object.keys(ctx.data?.parents ?? {}) });
  },
});

export const condCancel = hatchet.workflow({ name: 'tsp-cond-cancel' });
const ccStart = condCancel.task({
  name: 'start',
  fn: async (input) => {
    writeFileSync(marker(`cc-start-${input.nonce}`), String(Date.now()));
    return { n: input.n };
  },
});
const ccCancel = condCancel.task({
  name: 'cancel_parent',
  parents: [ccStart],
  cancelIf: { parent: ccStart, expression: 'output.n > 5' },
  fn: async (_i, ctx) => at(ctx),
});
condCancel.task({ name: 'after_cancel', parents: [ccCancel], fn: async (_i, ctx) => at(ctx) });
condCancel.task({ name: 'keep', parents: [ccStart], fn: async (_i, ctx) => at(ctx) });
condCancel.task({
  name: 'cancel_event',
  parents: [ccStart],
  waitFor: new SleepCondition('20s'),
  cancelIf: { eventKey: 'tsp-cond:cancel' },
  fn: async (_i, ctx) => at(ctx),
});

// ---------------------------------------------------------------- u4: durable OR waits

export const durWait = hatchet.durableTask({
  name: 'tsp-dur-wait',
  executionTimeout: '90s',
  fn: async (input, ctx) => {
    writeFileSync(marker(`dur-waiting-${input.nonce}`), String(Date.now()));
    const t0 = Date.now();
    const event = { expression: `input.nonce == '${input.nonce}'` };
    const res =
      input.mode === 'and'
        ? await ctx.waitFor([{ sleepFor: input.sleep }, { eventKey: 'tsp-dur:and', ...event }])
        : await ctx.waitFor(Or({ sleepFor: input.sleep }, { eventKey: 'tsp-dur:or', ...event }));
    return { res, waitedMs: Date.now() - t0, ...where(ctx) };
  },
});

// ---------------------------------------------------------------- u5: event filters

const filtered = (name) => {
  const wf = hatchet.workflow({ name, onEvents: ['tsp-filt:evt'] });
  wf.task({
    name: 'handle',
    fn: async (input, ctx) => {
      const seen = {
        filterPayload: ctx.filterPayload(),
        triggers: ctx.triggers() ?? null,
        input,
        meta: ctx.additionalMetadata(),
        triggeredByEvent: ctx.triggeredByEvent(),
      };
      appendFileSync(marker(`filt-${name}-${input.nonce}`), JSON.stringify(seen) + '\n');
      return seen;
    },
  });
  return wf;
};
export const filtA = filtered('tsp-filt-a');
export const filtB = filtered('tsp-filt-b');
export const filtNone = filtered('tsp-filt-none');

/** What each worker process (placement_worker.mjs INTEROP_TS_SET=...) registers. */
export const SETS = {
  labels: Object.values(labels),
  sticky: [stickyChild, stickySoft, stickyHard, stickyLaunch],
  misc: [cond, condCancel, durWait, filtA, filtB, filtNone],
};
