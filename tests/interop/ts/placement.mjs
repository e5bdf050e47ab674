// Interop proof, "SDK parity (2)": worker labels, sticky, DAG conditions, durable OR waits and
// event filters with the official TypeScript SDK (@hatchet-dev/typescript-sdk, pinned in
// package.json) against hatchet-dev-engine. Tasks: placement_tasks.mjs; workers:
// placement_worker.mjs. Its own engine (started like the other scenarios), then one counted
// check each (`PASS <id> ...` / `FAIL <id> ...`, each bounded by a timeout):
//   u1a required string label: tasks requiring model=fast / model=slow run only on that worker
//   u1b required int labels with comparators: memory > 1024 -> fast, memory < 1024 -> slow
//   u1c a task requiring a label no worker has (gpu=a100) stays QUEUED and does not run
//   u1d optional weighted labels: the worker with the higher score gets the runs (both ways)
//   u1e labels upserted at run time (worker.upsertLabels) change placement: the u1c run starts
//       once its worker gains gpu=a100; a task requiring zone=blue follows the label within
//       10 s (the real engine rereads labels on its scheduler's 1-1.5 s replenish pass)
//   u1f run-level desiredWorkerLabels (runNoWait/run option) place a run, replacing task labels
//   u2a sticky SOFT: DAG tasks and a {sticky: true} child all run on the worker that started
//       the run (two identical workers; launched from a task on each worker, and directly)
//   u2b the same with sticky HARD
//   u3a DAG conditions: waitFor sleep / event with expression / Or groups / AND of groups,
//       skipIf on a parent output and on an event (+ skip propagation); outputs and statuses;
//       a parent condition in an Or group with a sleep gates the sleeps instead of standing in
//       for them (as the real engine's CREATE_MATCH does)
//   u3b cancelIf on a parent output and on an event: tasks CANCELLED (cascading), others run
//   u4a durable ctx.waitFor(Or(sleep 15s, event)): the pushed event fires first
//   u4b durable ctx.waitFor(Or(sleep 2s, event)): the sleep fires first
//   u4c durable ctx.waitFor([sleep, event]) (two groups, AND): both keys in the result
//   u5a filters create / get / list (workflowIds, scopes) / update / delete through the SDK
//   u5b a scoped push triggers only the workflows whose filter for that scope matches (CEL on
//       input, payload, additional_metadata); unscoped or unmatched scopes trigger nothing;
//       workflows without filters always run; two true filters give two runs
//   u5c each filter's payload reaches the task (ctx.filterPayload())
// Env: HATCHET_DEV_ENGINE_BIN (required), INTEROP_PIDFILE (optional, for run.sh's trap),
// INTEROP_KEEP=1 keeps the work dir. The work dir holds rest.log (every REST call of the SDK),
// grpc-<process>.jsonl (the gRPC messages each process sent / received, see grpc_trace.mjs),
// the worker logs and the markers; it is kept when a check fails.

import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import { Harness } from './harness.mjs';
import {
  bounded,
  check,
  describe,
  expect,
  failures,
  log,
  sleep,
  tail,
  Timeout,
  waitUntil,
} from './util.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const h = new Harness('hatchet-interop-tsp-');
process.chdir(h.work); // the SDK reads .hatchet.yaml from the current directory: keep it clean
log(`work dir ${h.work}`);
let exiting = false;

const FAST = 'tsp-lbl-fast';
const SLOW = 'tsp-lbl-slow';
const STICKY_A = 'tsp-sticky-a';
const STICKY_B = 'tsp-sticky-b';
const MISC = 'tsp-misc';

const nonce = () => randomUUID().replaceAll('-', '');
const markerPath = (name) => join(h.markers, name);
const seen = (name) => existsSync(markerPath(name));
const readMarker = (name) => readFileSync(markerPath(name), 'utf8');
const j = (v) => JSON.stringify(v);

function startWorker(name, set, { slots = 20, durableSlots, labels } = {}) {
  return h.startChild(name, [process.execPath, join(HERE, 'placement_worker.mjs')], {
    INTEROP_TS_SET: set,
    INTEROP_TS_WORKER_NAME: name,
    INTEROP_TS_SLOTS: String(slots),
    ...(durableSlots ? { INTEROP_TS_DURABLE_SLOTS: String(durableSlots) } : {}),
    ...(labels ? { INTEROP_TS_LABELS: JSON.stringify(labels) } : {}),
    INTEROP_GRPC_TRACE: join(h.work, `grpc-${name}.jsonl`),
  });
}

/** Trace lines of one process (grpc_trace.mjs) of a message type. */
function traced(proc, type) {
  const f = join(h.work, `grpc-${proc}.jsonl`);
  if (!existsSync(f)) return [];
  return readFileSync(f, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l))
    .filter((e) => e.type === type);
}

/** Per-task statuses of a run, keyed by task readable id, from runs.get(id).tasks[]. */
async function taskStatuses(hatchet, id) {
  const d = await bounded(hatchet.runs.get(id), 10000, 'runs.get');
  const out = {};
  for (const t of d?.tasks || []) {
    const name = (t.actionId || '').split(':').pop() || t.displayName;
    out[name] = t.status;
  }
  return { run: d?.run?.status, tasks: out };
}

async function runChecks() {
  const t = await import('./placement_tasks.mjs'); // builds the client from the env set by main()
  const { hatchet } = t;
  h.traceRest(hatchet.api);
  const statusOf = async (id) => String(await bounded(hatchet.runs.get_status(id), 10000, 'runs.get_status'));
  const push = (key, payload, opts = {}) => bounded(hatchet.events.push(key, payload, opts), 10000, `push ${key}`);

  const fast = startWorker(FAST, 'labels', { slots: 5, labels: { model: 'fast', memory: 2048 } });
  const slow = startWorker(SLOW, 'labels', { slots: 5, labels: { model: 'slow', memory: 512 } });
  const misc = startWorker(MISC, 'misc', { slots: 40, durableSlots: 10 });
  const workerIds = {};

  // ------------------------------------------------------------------ u1 worker labels
  const L = t.labels;
  const lblActions = Object.values(L).map((d) => `${d.name}:${d.name}`);
  const placed = (outs) => outs.map((o) => o?.worker);

  await check('u1a', 'required string label: model=fast / model=slow tasks run only on that worker', 60000, async () => {
    const rows = await Promise.all([
      h.waitRegistered(FAST, lblActions, fast, 40000),
      h.waitRegistered(SLOW, lblActions, slow, 40000),
    ]);
    workerIds[FAST] = rows[0].metadata.id;
    workerIds[SLOW] = rows[1].metadata.id;
    log(`label workers: ${FAST} ${workerIds[FAST]}, ${SLOW} ${workerIds[SLOW]}`);
    const outs = await bounded(
      Promise.all([
        ...[1, 2, 3].map(() => L.reqFast.run({ nonce: nonce() })),
        ...[1, 2, 3].map(() => L.reqSlow.run({ nonce: nonce() })),
      ]),
      15000,
      'six runs',
    );
    const got = placed(outs);
    log(`tsp-lbl-req-fast x3, tsp-lbl-req-slow x3 ran on ${got.join(' ')}`);
    expect(isDeepStrictEqual(got, [FAST, FAST, FAST, SLOW, SLOW, SLOW]), `placement ${got.join(' ')}`);
    expect(outs.every((o) => o.workerId === workerIds[o.worker]), `ctx.worker.id() differs from the REST id: ${j(outs)}`);
  });

  await check('u1b', 'required int labels with comparators: memory > 1024 -> fast, memory < 1024 -> slow', 20000, async () => {
    const outs = await bounded(
      Promise.all([
        ...[1, 2, 3].map(() => L.memGt.run({ nonce: nonce() })),
        ...[1, 2, 3].map(() => L.memLt.run({ nonce: nonce() })),
      ]),
      15000,
      'six runs',
    );
    const got = placed(outs);
    log(`tsp-lbl-mem-gt x3, tsp-lbl-mem-lt x3 ran on ${got.join(' ')}`);
    expect(isDeepStrictEqual(got, [FAST, FAST, FAST, SLOW, SLOW, SLOW]), `placement ${got.join(' ')}`);
  });

  let noneRun = null;
  await check('u1c', 'a task requiring a label no worker has (gpu=a100) stays QUEUED', 15000, async () => {
    const n = nonce();
    const ref = await bounded(L.none.runNoWait({ nonce: n }), 5000, 'runNoWait');
    noneRun = { n, ref, id: await ref.getWorkflowRunId() };
    await sleep(4000);
    // The real engine's row can still be missing (a 404) this soon after the trigger.
    const s = await waitUntil("the run's row", () => statusOf(noneRun.id), 8000, 300);
    const ran = seen(`lbl-${n}`) ? readMarker(`lbl-${n}`).trim() : null;
    expect(ran === null, `the run executed on ${ran}`);
    expect(s === 'QUEUED', `the run reads ${s}, not QUEUED`);
  });

  await check('u1d', 'optional weighted labels: the higher-scoring worker gets the runs (both ways)', 25000, async () => {
    const got = { prefFast: [], prefSlow: [] };
    for (let i = 0; i < 3; i += 1) {
      got.prefFast.push((await bounded(L.prefFast.run({ nonce: nonce() }), 8000, 'pref-fast run')).worker);
      got.prefSlow.push((await bounded(L.prefSlow.run({ nonce: nonce() }), 8000, 'pref-slow run')).worker);
    }
    log(`tsp-lbl-pref-fast on ${got.prefFast.join(' ')}; tsp-lbl-pref-slow on ${got.prefSlow.join(' ')}`);
    expect(
      got.prefFast.every((w) => w === FAST) && got.prefSlow.every((w) => w === SLOW),
      `pref-fast (fast scores 100, slow 10) on ${got.prefFast.join(' ')}; pref-slow (slow 100, fast 10) on ${got.prefSlow.join(' ')}`,
    );
  });

  let ctlSeq = 0;
  /** worker.upsertLabels(labels) inside worker `name`; wait for its UpsertWorkerLabels answer. */
  const upsert = async (name, labels) => {
    ctlSeq += 1;
    const before = traced(name, 'UpsertWorkerLabelsResponse').length;
    writeFileSync(markerPath(`ctl-${name}-${ctlSeq}.json`), j({ labels }));
    await waitUntil(`${name} to call worker.upsertLabels`, () => seen(`ctl-${name}-${ctlSeq}.done`), 5000);
    try {
      await waitUntil(`${name}'s UpsertWorkerLabels response`, () => traced(name, 'UpsertWorkerLabelsResponse').length > before, 5000);
    } catch (e) {
      const errs = tail(join(h.work, `${name}.log`), 4000)
        .split('\n')
        .filter((l) => /unhandledRejection|UpsertWorkerLabels|rror/.test(l))
        .slice(-3);
      throw new Error(`${describe(e)}; worker log: ${errs.join(' / ')}`);
    }
    // informational: what the engine's REST says about the worker's labels now
    try {
      const w = await h.restGet(`/api/v1/workers/${workerIds[name]}`);
      log(`after upsert ${j(labels)} on ${name}: REST labels ${j(w.labels)}`);
    } catch (e) {
      log(`after upsert on ${name}: GET /api/v1/workers/{id} failed: ${describe(e)}`);
    }
    await sleep(1500); // the real engine reloads worker labels every 1-1.5 s
  };

  await check('u1e', 'labels upserted at run time (worker.upsertLabels) change placement', 60000, async () => {
    await upsert(SLOW, { gpu: 'a100' });
    if (!noneRun) {
      const n = nonce();
      const ref = await L.none.runNoWait({ nonce: n });
      noneRun = { n, ref, id: await ref.getWorkflowRunId() };
    }
    const out = await bounded(noneRun.ref.output, 10000, 'the gpu=a100 run after slow gained gpu=a100');
    expect(out.worker === SLOW, `the gpu=a100 run ran on ${out.worker}, not ${SLOW}`);
    // The real engine's scheduler reads workers' labels on its replenish pass (every 1-1.5 s),
    // so a run triggered right after an upsert may still be placed by the old labels: runs are
    // placed by the new ones within a few seconds, then every time.
    const placedBy = async (want, what) => {
      const t0 = Date.now();
      let o = await bounded(L.dyn.run({ nonce: nonce() }), 8000, what);
      while (o.worker !== want && Date.now() - t0 < 10000) {
        await sleep(500);
        o = await bounded(L.dyn.run({ nonce: nonce() }), 8000, what);
      }
      log(`u1e ${what}: on ${o.worker} ${Date.now() - t0} ms after the upsert`);
      expect(o.worker === want, `${what} still ran on ${o.worker} 10 s after the upsert`);
      for (let i = 0; i < 2; i += 1) {
        const again = await bounded(L.dyn.run({ nonce: nonce() }), 8000, what);
        expect(again.worker === want, `${what}: a later run ran on ${again.worker}`);
      }
    };
    await upsert(FAST, { zone: 'blue' });
    await placedBy(FAST, 'zone=blue with fast{zone:blue}');
    await upsert(FAST, { zone: 'red' });
    await upsert(SLOW, { zone: 'blue' });
    await placedBy(SLOW, 'zone=blue after fast{zone:red} slow{zone:blue}');
  });

  await check('u1f', 'run-level desiredWorkerLabels place a run and replace the task labels', 25000, async () => {
    const want = (v) => ({ desiredWorkerLabels: { model: { value: v, required: true } } });
    const cases = [
      ['tsp-lbl-any {model=slow}', L.any, want('slow'), SLOW],
      ['tsp-lbl-any {model=fast}', L.any, want('fast'), FAST],
      ['tsp-lbl-req-fast {model=slow}', L.reqFast, want('slow'), SLOW],
      ['tsp-lbl-req-slow {model=fast}', L.reqSlow, want('fast'), FAST],
    ];
    const bad = [];
    for (const [what, decl, opts, expected] of cases) {
      for (let i = 0; i < 2; i += 1) {
        const o = await bounded(decl.run({ nonce: nonce() }, opts), 8000, what);
        if (o.worker !== expected) bad.push(`${what} ran on ${o.worker}`);
      }
    }
    expect(bad.length === 0, bad.join(', '));
  });

  await h.stop(fast);
  await h.stop(slow);
  const stickyA = startWorker(STICKY_A, 'sticky', { slots: 8, durableSlots: 1 });
  const stickyB = startWorker(STICKY_B, 'sticky', { slots: 8, durableSlots: 1 });

  // ------------------------------------------------------------------ u2 sticky
  const stickyActions = [
    'tsp-sticky-child:child',
    'tsp-sticky-soft:root',
    'tsp-sticky-soft:join',
    'tsp-sticky-hard:root',
    'tsp-sticky-hard:join',
    'tsp-sticky-launch:tsp-sticky-launch',
  ];
  /** Where each task of a sticky DAG output ran; problems when any is not `want`. */
  const sameWorker = (label, want, out) => {
    const got = {
      root: out?.root?.worker,
      left: out?.left?.worker,
      right: out?.right?.worker,
      join: out?.join?.worker,
      'child(ctx.runChild sticky)': out?.root?.viaCtx?.child?.worker,
    };
    const decl = out?.root?.viaDecl?.child?.worker ?? j(out?.root?.viaDecl);
    log(`${label}: ${j(got)}; child via declaration.run({sticky:true}) on ${decl}`);
    const bad = Object.entries(got).filter(([, w]) => w !== want);
    return bad.length ? [`${label}: ${bad.map(([k, w]) => `${k} on ${w}`).join(', ')} (want ${want})`] : [];
  };
  // Two launchers at once, until a pair lands on both workers (one durable slot each spreads
  // them), at most four pairs. Every launch is checked. The real engine's scheduler may not have
  // a just-registered worker yet: it learns of one from a best-effort notice on its first
  // listen, or else from its lease loop, every 5 s (`pkg/scheduling/v1/lease_manager.go`), so
  // a first pair can land on one worker (CI saw it once).
  const stickyCheck = async (strategy, decl) => {
    const problems = [];
    let spread = false;
    const seenOn = [];
    for (let pair = 0; pair < 4 && !spread; pair++) {
      const launches = await bounded(
        Promise.all([1, 2].map(() => t.stickyLaunch.run({ strategy, nonce: nonce() }))),
        20000,
        'two launchers',
      );
      const on = launches.map((o) => o.worker);
      seenOn.push(on.join('+'));
      spread = on[0] !== on[1];
      for (const o of launches) problems.push(...sameWorker(`launched from ${o.worker}`, o.worker, o.out));
    }
    if (!spread) {
      problems.push(`every pair of launchers ran on one worker: ${seenOn.join(', ')} (one durable slot per worker should have spread them)`);
    } else if (seenOn.length > 1) {
      log(`launcher pairs ran on ${seenOn.join(', ')}`);
    }
    const direct = await bounded(decl.run({ nonce: nonce() }), 15000, `${decl.name} run`);
    problems.push(...sameWorker('direct run', direct?.root?.worker, direct));
    expect(problems.length === 0, problems.join(' | '));
  };

  await check('u2a', 'sticky SOFT: DAG tasks and a sticky child run on the worker that started the run', 60000, async () => {
    await Promise.all([
      h.waitRegistered(STICKY_A, stickyActions, stickyA, 30000),
      h.waitRegistered(STICKY_B, stickyActions, stickyB, 30000),
    ]);
    await stickyCheck('soft', t.stickySoft);
  });

  await check('u2b', 'sticky HARD: DAG tasks and a sticky child run on the worker that started the run', 40000, async () => {
    await stickyCheck('hard', t.stickyHard);
  });

  await h.stop(stickyA);
  await h.stop(stickyB);

  // ------------------------------------------------------------------ u3 conditions
  const miscActions = ['tsp-cond:final', 'tsp-cond-cancel:cancel_event', 'tsp-dur-wait:tsp-dur-wait', 'tsp-filt-none:handle'];
  const skippedOut = (o) => !!o && o.skipped === true && o.at === undefined;

  await check('u3a', 'DAG waitFor (sleep, event+expression, Or, AND of groups), skipIf (parent output, event)', 45000, async () => {
    await h.waitRegistered(MISC, miscActions, misc, 15000);
    const n = nonce();
    const ref = await bounded(t.cond.runNoWait({ n: 10, nonce: n }), 5000, 'runNoWait');
    const id = await ref.getWorkflowRunId();
    await waitUntil('tsp-cond start to run', () => seen(`cond-start-${n}`), 10000);
    await sleep(1000); // conditions of tasks with parents are registered once the parents finished
    const tPush1 = Date.now();
    await push('tsp-cond:go', { ok: false, nonce: n });
    await push('tsp-cond:skip', { nonce: n });
    await push('tsp-cond:or', { nonce: n });
    await sleep(1500);
    const problems = [];
    if (seen(`cond-wait_event-${n}`)) problems.push('wait_event ran on the tsp-cond:go event with ok=false');
    const tGo = Date.now();
    await push('tsp-cond:go', { ok: true, nonce: n });
    const out = await bounded(ref.output, 20000, 'the tsp-cond result');
    log(`tsp-cond result: ${j(out)}`);
    const t0 = out?.start?.at ?? 0;
    const after = (k) => (out?.[k]?.at ?? NaN) - t0;
    const want = (ok, msg) => ok || problems.push(msg);
    want(out?.start?.n === 10, `start output ${j(out?.start)}`);
    want(!skippedOut(out?.wait_sleep) && after('wait_sleep') >= 1800, `wait_sleep (sleep 2s) at +${after('wait_sleep')}ms: ${j(out?.wait_sleep)}`);
    want(!skippedOut(out?.wait_event) && out?.wait_event?.at >= tGo - 100, `wait_event ran at +${after('wait_event')}ms, the ok=true event was pushed at +${tGo - t0}ms`);
    want(skippedOut(out?.skip_parent), `skip_parent (skipIf parent output.n > 5) gave ${j(out?.skip_parent)}, not {"skipped":true}`);
    want(skippedOut(out?.after_skip), `after_skip (only parent skipped) gave ${j(out?.after_skip)}, not {"skipped":true}`);
    want(out?.no_skip && !skippedOut(out?.no_skip) && out.no_skip.at !== undefined, `no_skip (skipIf output.n > 100) gave ${j(out?.no_skip)}`);
    want(skippedOut(out?.skip_event), `skip_event (skipIf event, waitFor 6s) gave ${j(out?.skip_event)}`);
    want(!skippedOut(out?.or_event) && after('or_event') < 12000 && out?.or_event?.at >= tPush1 - 100, `or_event Or(15s, event) at +${after('or_event')}ms (event pushed at +${tPush1 - t0}ms)`);
    want(!skippedOut(out?.or_sleep) && after('or_sleep') >= 1800 && after('or_sleep') < 12000, `or_sleep Or(2s, event never pushed) at +${after('or_sleep')}ms`);
    want(!skippedOut(out?.and_groups) && after('and_groups') >= 4800 && after('and_groups') < 20000, `and_groups [Or(parent, 5s), 1s] at +${after('and_groups')}ms (the parent gates the sleeps, it does not satisfy the 5 s group)`);
    want(skippedOut(out?.final?.seen?.skip_parent), `final: ctx.parentOutput(skip_parent) gave ${j(out?.final?.seen?.skip_parent)}`);
    // action_payload.triggers[readable_data_key] = the first item that satisfied the condition
    const trig = (k) => out?.[k]?.triggers ?? {};
    want(isDeepStrictEqual(trig('wait_sleep')['sleep-2s'], { sleep_duration: '2s' }), `wait_sleep ctx.triggers() ${j(trig('wait_sleep'))}, want key "sleep-2s" = {"sleep_duration":"2s"}`);
    want(isDeepStrictEqual(trig('wait_event')['tsp-cond:go'], { ok: true, nonce: n }), `wait_event ctx.triggers() ${j(trig('wait_event'))}, want key "tsp-cond:go" = the ok=true event payload`);
    want(isDeepStrictEqual(trig('or_event')['tsp-cond:or'], { nonce: n }) && !('sleep-15s' in trig('or_event')), `or_event ctx.triggers() ${j(trig('or_event'))}, want only the event key "tsp-cond:or"`);
    want(isDeepStrictEqual(trig('or_sleep')['sleep-2s'], { sleep_duration: '2s' }), `or_sleep ctx.triggers() ${j(trig('or_sleep'))}, want key "sleep-2s"`);
    // The real engine's REST reads trail its result stream: wait for them to say final.
    let status;
    let st;
    await waitUntil('the REST reads say completed', async () => {
      status = await statusOf(id);
      st = await taskStatuses(hatchet, id);
      return status === 'COMPLETED' && Object.values(st.tasks).filter((s) => s === 'COMPLETED').length === 11;
    }, 15000, 300).catch((e) => { if (!(e instanceof Timeout)) throw e; });
    want(status === 'COMPLETED', `run status ${status}`);
    log(`tsp-cond statuses ${j(st)}`);
    const notDone = Object.entries(st.tasks).filter(([, s]) => s !== 'COMPLETED');
    want(Object.keys(st.tasks).length === 11 && notDone.length === 0, `task statuses ${j(st.tasks)} (want 11 tasks, all COMPLETED; skipped read COMPLETED)`);
    expect(problems.length === 0, problems.join(' | '));
  });

  await check('u3b', 'cancelIf (parent output, event): tasks CANCELLED with their descendants, others run', 50000, async () => {
    const n = nonce();
    const ref = await bounded(t.condCancel.runNoWait({ n: 10, nonce: n }), 5000, 'runNoWait');
    const id = await ref.getWorkflowRunId();
    await waitUntil('tsp-cond-cancel start to run', () => seen(`cc-start-${n}`), 10000);
    await sleep(1000);
    await push('tsp-cond:cancel', { nonce: n });
    let outcome;
    try {
      outcome = `resolved with ${j(await bounded(ref.output, 22000, 'the tsp-cond-cancel result'))}`;
    } catch (e) {
      if (e instanceof Timeout) throw e;
      outcome = null;
      log(`tsp-cond-cancel result rejected: ${describe(e)}`);
    }
    // Whether the result resolves is not asserted: condition-cancelled tasks carry no error
    // text in their results (the Python SDK's official cancel_if example awaits the result
    // without an exception), so the SDK's run() may resolve. The statuses below are the proof.
    if (outcome) log(`tsp-cond-cancel result ${outcome}`);
    const problems = [];
    // The run's status and its tasks' are written together in the real engine's read model:
    // once the run reads final, so do its tasks.
    let st;
    await waitUntil('a final run status', async () => {
      st = await taskStatuses(hatchet, id);
      return st.run !== undefined && !['QUEUED', 'RUNNING'].includes(st.run);
    }, 15000, 300);
    log(`tsp-cond-cancel statuses ${j(st)}`);
    const want = { start: 'COMPLETED', keep: 'COMPLETED', cancel_parent: 'CANCELLED', after_cancel: 'CANCELLED', cancel_event: 'CANCELLED' };
    for (const [k, s] of Object.entries(want)) {
      if (st.tasks[k] !== s) problems.push(`${k} is ${st.tasks[k]}, not ${s}`);
    }
    if (st.run !== 'CANCELLED') problems.push(`run status ${st.run}, not CANCELLED`);
    expect(problems.length === 0, problems.join(' | '));
  });

  // ------------------------------------------------------------------ u4 durable OR waits
  /** Run tsp-dur-wait; push `eventKey` (if any) every 2 s once the task waits. */
  const durable = async (input, eventKey, ms) => {
    const ref = await bounded(t.durWait.runNoWait(input), 5000, 'runNoWait');
    await waitUntil('tsp-dur-wait to start', () => seen(`dur-waiting-${input.nonce}`), 10000);
    let done = false;
    const pusher = (async () => {
      if (!eventKey) return;
      await sleep(1000);
      for (let i = 0; i < 8 && !done; i += 1) {
        await push(eventKey, { nonce: input.nonce, fired: 'event' }).catch((e) => log(`push: ${describe(e)}`));
        await sleep(2000);
      }
    })();
    try {
      const out = await bounded(ref.output, ms, 'the tsp-dur-wait result');
      log(`tsp-dur-wait ${j(input)} -> ${j(out)}`);
      return out;
    } finally {
      done = true;
      await pusher;
    }
  };
  const createdKeys = (out) => Object.keys(out?.res?.CREATE ?? {}).sort();

  await check('u4a', 'durable waitFor(Or(sleep 15s, event)): the pushed event fires first', 35000, async () => {
    const n = nonce();
    const out = await durable({ mode: 'or', sleep: '15s', nonce: n }, 'tsp-dur:or', 25000);
    const keys = createdKeys(out);
    expect(isDeepStrictEqual(keys, ['tsp-dur:or']), `result keys ${j(keys)} (want ["tsp-dur:or"]): ${j(out?.res)}`);
    const item = out.res.CREATE['tsp-dur:or']?.[0];
    expect(item?.nonce === n && item?.fired === 'event', `event item ${j(item)}`);
    expect(out.waitedMs < 14000, `waited ${out.waitedMs}ms`);
  });

  await check('u4b', 'durable waitFor(Or(sleep 2s, event)): the sleep fires first', 20000, async () => {
    const out = await durable({ mode: 'or', sleep: '2s', nonce: nonce() }, null, 15000);
    const keys = createdKeys(out);
    expect(isDeepStrictEqual(keys, ['sleep-2s']), `result keys ${j(keys)} (want ["sleep-2s"]): ${j(out?.res)}`);
    const item = out.res.CREATE['sleep-2s']?.[0];
    expect(item?.sleep_duration === '2s', `sleep item ${j(item)} (want {"sleep_duration":"2s"})`);
    expect(out.waitedMs >= 1500, `waited only ${out.waitedMs}ms`);
  });

  await check('u4c', 'durable waitFor([sleep 2s, event]) (AND of two groups): both keys', 20000, async () => {
    const n = nonce();
    const out = await durable({ mode: 'and', sleep: '2s', nonce: n }, 'tsp-dur:and', 15000);
    const keys = createdKeys(out);
    expect(isDeepStrictEqual(keys, ['sleep-2s', 'tsp-dur:and']), `result keys ${j(keys)}: ${j(out?.res)}`);
  });

  // ------------------------------------------------------------------ u5 event filters
  const F = {}; // filters left by u5a for u5b
  const wfIds = {};
  const created = []; // every filter id created, deleted at the end
  const filterFields = (f) => ({ workflowId: f?.workflowId, scope: f?.scope, expression: f?.expression, payload: f?.payload });

  // A check that failed once runs again (FLAKY on the real engine): what its first attempt
  // created goes first, or the engine refuses the same filter twice.
  const dropCreated = async () => {
    for (const id of created.splice(0).filter(Boolean)) {
      try {
        await bounded(hatchet.filters.delete(id), 5000, 'filters.delete (an earlier attempt\'s)');
      } catch {
        // already gone
      }
    }
  };
  await check('u5a', 'filters create / get / list / update / delete through the SDK', 20000, async () => {
    await dropCreated();
    for (const d of [t.filtA, t.filtB, t.filtNone]) {
      wfIds[d.name] = (await bounded(hatchet.workflows.get(d), 5000, `workflows.get(${d.name})`)).metadata.id;
    }
    const A = wfIds['tsp-filt-a'];
    const B = wfIds['tsp-filt-b'];
    const specA = { workflowId: A, scope: 'scope-1', expression: "input.kind == 'x'", payload: { from: 'fA' } };
    const specB = { workflowId: B, scope: 'scope-2', expression: 'true', payload: { from: 'fB' } };
    const specC = { workflowId: A, scope: 'scope-tmp', expression: 'false' };
    const fA = await bounded(hatchet.filters.create(specA), 5000, 'filters.create A');
    created.push(fA?.metadata?.id);
    log(`filters.create -> ${j(fA)}`);
    expect(fA?.metadata?.id, `create returned ${j(fA)}`);
    expect(isDeepStrictEqual(filterFields(fA), specA), `create A returned ${j(fA)}`);
    const fB = await bounded(hatchet.filters.create(specB), 5000, 'filters.create B');
    created.push(fB?.metadata?.id);
    const fC = await bounded(hatchet.filters.create(specC), 5000, 'filters.create C');
    created.push(fC?.metadata?.id);
    expect(isDeepStrictEqual(fC?.payload, {}), `a filter created without payload has payload ${j(fC?.payload)}, not {}`);
    F.A = fA;
    F.aPayload = fA.payload;
    F.B = fB;
    const upd = await bounded(hatchet.filters.update(fA.metadata.id, { payload: { from: 'fA2' } }), 5000, 'filters.update');
    log(`filters.update -> ${j(upd)}`);
    expect(
      isDeepStrictEqual(filterFields(upd), { ...specA, payload: { from: 'fA2' } }) && upd?.metadata?.id === fA.metadata.id,
      `update(payload) returned ${j(upd)}`,
    );
    F.aPayload = upd.payload;
    const del = await bounded(hatchet.filters.delete(fC.metadata.id), 5000, 'filters.delete');
    created.splice(created.indexOf(fC.metadata.id), 1);
    expect(del?.metadata?.id === fC.metadata.id, `delete returned ${j(del)}`);
    const got = await bounded(hatchet.filters.get(fA.metadata.id), 5000, 'filters.get');
    expect(isDeepStrictEqual(filterFields(got), { ...specA, payload: { from: 'fA2' } }), `get(A) returned ${j(got)}`);
    let gone = null;
    try {
      gone = await hatchet.filters.get(fC.metadata.id);
    } catch (e) {
      expect(e?.response?.status === 404, `get(deleted) failed with ${describe(e)}, not HTTP 404`);
    }
    expect(gone === null, `get(deleted filter) returned ${j(gone)}`);
    const byWf = await bounded(hatchet.filters.list({ workflowIds: [A] }), 5000, 'filters.list workflowIds');
    const idsA = (byWf?.rows || []).map((f) => f.metadata.id).sort();
    expect(isDeepStrictEqual(idsA, [fA.metadata.id]), `list({workflowIds:[A]}) gave ${j(idsA)}, want [${fA.metadata.id}]`);
    const byScope = await bounded(hatchet.filters.list({ scopes: ['scope-2'] }), 5000, 'filters.list scopes');
    const idsS = (byScope?.rows || []).map((f) => f.metadata.id);
    expect(isDeepStrictEqual(idsS, [fB.metadata.id]), `list({scopes:['scope-2']}) gave ${j(idsS)}, want [${fB.metadata.id}]`);
    // The tenant may hold other filters (a shared real engine keeps earlier runs'): count this
    // suite's workflows' only.
    const all = await bounded(hatchet.filters.list(), 5000, 'filters.list');
    const ours = (all?.rows || []).filter((f) => f.workflowId === A || f.workflowId === B);
    expect(all?.pagination && Array.isArray(all?.rows) && ours.length === 2, `list() gave ${j(all)?.slice(0, 300)}`);
  });

  const u5runs = {}; // push id -> {A: [...], B: [...], N: [...]} of what the tasks saw
  let u5plan = [];
  await check('u5b', 'a scoped push triggers only the workflows whose filter for that scope matches', 40000, async () => {
    expect(F.A && F.B, 'u5a left no filters to push against');
    const A = wfIds['tsp-filt-a'];
    // An earlier attempt's filters go first (u5a's two stay).
    for (const id of created.splice(2).filter(Boolean)) {
      try {
        await bounded(hatchet.filters.delete(id), 5000, 'filters.delete (an earlier attempt\'s)');
      } catch {
        // already gone
      }
    }
    for (const spec of [
      { workflowId: A, scope: 'scope-3', expression: "input.kind == payload.want && additional_metadata.src == 'suite'", payload: { want: 'w' } },
      { workflowId: A, scope: 'scope-4', expression: 'true', payload: { n: 1 } },
      { workflowId: A, scope: 'scope-4', expression: 'true', payload: { n: 2 } },
    ]) {
      const f = await bounded(hatchet.filters.create(spec), 5000, 'filters.create');
      created.push(f?.metadata?.id);
    }
    // want: the filter payloads each workflow's runs must see (one entry per run)
    u5plan = [
      { id: 'p1 scope-1 kind=x', scope: 'scope-1', payload: { kind: 'x' }, want: { A: [F.aPayload], B: [], N: [{}] } },
      { id: 'p2 scope-1 kind=z', scope: 'scope-1', payload: { kind: 'z' }, want: { A: [], B: [], N: [{}] } },
      { id: 'p3 scope-2', scope: 'scope-2', payload: { kind: 'x' }, want: { A: [], B: [F.B.payload], N: [{}] } },
      { id: 'p4 no scope', payload: { kind: 'x' }, want: { A: [], B: [], N: [{}] } },
      { id: 'p5 scope-3 meta src=suite', scope: 'scope-3', payload: { kind: 'w' }, meta: { src: 'suite' }, want: { A: [{ want: 'w' }], B: [], N: [{}] } },
      { id: 'p6 scope-3 meta src=other', scope: 'scope-3', payload: { kind: 'w' }, meta: { src: 'other' }, want: { A: [], B: [], N: [{}] } },
      { id: 'p7 scope-4 two filters', scope: 'scope-4', payload: { kind: 'q' }, want: { A: [{ n: 1 }, { n: 2 }], B: [], N: [{}] } },
      { id: 'p8 scope-9 (no filter)', scope: 'scope-9', payload: { kind: 'x' }, want: { A: [], B: [], N: [{}] } },
    ];
    for (const p of u5plan) {
      p.nonce = nonce();
      await push('tsp-filt:evt', { ...p.payload, nonce: p.nonce }, {
        ...(p.scope ? { scope: p.scope } : {}),
        ...(p.meta ? { additionalMetadata: p.meta } : {}),
      });
    }
    const wf = { A: 'tsp-filt-a', B: 'tsp-filt-b', N: 'tsp-filt-none' };
    const collect = () => {
      for (const p of u5plan) {
        u5runs[p.id] = {};
        for (const [k, name] of Object.entries(wf)) {
          const f = `filt-${name}-${p.nonce}`;
          u5runs[p.id][k] = seen(f) ? readMarker(f).trim().split('\n').map((l) => JSON.parse(l)) : [];
        }
      }
    };
    const counts = (p) => Object.fromEntries(Object.keys(wf).map((k) => [k, u5runs[p.id][k].length]));
    const wantCounts = (p) => Object.fromEntries(Object.keys(wf).map((k) => [k, p.want[k].length]));
    try {
      await waitUntil(
        'the expected runs',
        () => {
          collect();
          return u5plan.every((p) => Object.keys(wf).every((k) => counts(p)[k] >= p.want[k].length));
        },
        20000,
        300,
      );
    } catch (e) {
      if (!(e instanceof Timeout)) throw e;
    }
    await sleep(2500); // runs that should not happen
    collect();
    const bad = u5plan.filter((p) => !isDeepStrictEqual(counts(p), wantCounts(p)));
    for (const p of u5plan) log(`${p.id}: runs ${j(counts(p))}, want ${j(wantCounts(p))}`);
    expect(bad.length === 0, bad.map((p) => `${p.id}: runs ${j(counts(p))} want ${j(wantCounts(p))}`).join(' | '));
  });

  await check('u5c', "each matching filter's payload reaches the task (ctx.filterPayload())", 10000, async () => {
    expect(u5plan.length && Object.keys(u5runs).length, 'u5b produced no runs to inspect');
    const key = (v) => j(v);
    const problems = [];
    for (const p of u5plan) {
      for (const k of ['A', 'B', 'N']) {
        const got = u5runs[p.id][k].map((r) => key(r.filterPayload)).sort();
        const want = p.want[k].map(key).sort();
        // compare only when the run count is right (u5b reports counts)
        if (got.length === want.length && !isDeepStrictEqual(got, want)) {
          problems.push(`${p.id} ${k}: filterPayload ${got.join(',')} want ${want.join(',')}`);
        }
        for (const r of u5runs[p.id][k]) {
          if (r.input?.nonce !== p.nonce) problems.push(`${p.id} ${k}: input ${j(r.input)}`);
        }
      }
    }
    const inspected = u5plan.reduce((s, p) => s + u5runs[p.id].A.length + u5runs[p.id].B.length, 0);
    expect(inspected > 0, 'no filtered (A or B) run happened');
    expect(problems.length === 0, problems.join(' | '));
  });

  for (const id of created.filter(Boolean)) {
    await hatchet.filters.delete(id).catch(() => undefined);
  }
}

async function shutdown() {
  await h.stopAll();
  await h.stopEngine();
}

async function main() {
  if (!process.env.HATCHET_DEV_ENGINE_BIN) {
    process.stdout.write('FAIL setup: HATCHET_DEV_ENGINE_BIN is not set\n');
    return 1;
  }
  try {
    try {
      await h.startEngine(process.env.HATCHET_DEV_ENGINE_BIN);
    } catch (e) {
      failures.push('setup');
      process.stdout.write(`FAIL setup: engine start: ${describe(e)}\n`);
      return 1;
    }
    log(`engine up: grpc ${h.hs.grpc_address}, api ${h.hs.api_url}`);
    Object.assign(process.env, h.clientEnv(), { INTEROP_GRPC_TRACE: join(h.work, 'grpc-client.jsonl') });
    await runChecks();
  } catch (e) {
    failures.push('setup');
    process.stdout.write(`FAIL setup: ${describe(e)}\n${e?.stack ?? ''}\n`);
  } finally {
    await shutdown();
    if (failures.length) {
      for (const f of [`${MISC}.log`, `${FAST}.log`, `${STICKY_A}.log`, 'engine.log']) {
        const s = tail(join(h.work, f), 1500);
        if (s) process.stdout.write(`----- ${join(h.work, f)} (tail) -----\n${s}\n`);
      }
      process.stdout.write(`interop-ts-placement: kept ${h.work} (rest.log, grpc-*.jsonl, worker logs, markers)\n`);
    } else if (process.env.INTEROP_KEEP !== '1') {
      rmSync(h.work, { recursive: true, force: true });
    }
  }
  return failures.length ? 1 : 0;
}

const stopOnSignal = (sig) => {
  if (exiting) return;
  exiting = true;
  process.stdout.write(`FAIL interrupted: ${sig}\n`);
  failures.push('interrupted');
  shutdown().finally(() => process.exit(143));
};
process.on('SIGTERM', () => stopOnSignal('SIGTERM'));
process.on('SIGINT', () => stopOnSignal('SIGINT'));

const code = await main();
process.exit(code); // SDK streams of a timed-out call must not keep the process alive
