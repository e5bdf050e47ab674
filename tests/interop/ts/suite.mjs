// Interop proof: the official TypeScript SDK (@hatchet-dev/typescript-sdk, pinned in
// package.json) against hatchet-dev-engine, plus our Rust example worker and client.
//
// Starts the engine as the Python scenarios do (`-handshake-file F -grpc-port 0 -api-port 0`,
// stdin a pipe), points the SDK at it with HATCHET_CLIENT_* env, starts TS workers (worker.mjs)
// and our Rust example worker, then runs one counted check each (lines `PASS <id> ...` /
// `FAIL <id> ...`, each bounded by a timeout):
//   t1  a TS worker registers its tasks; the TS client `run`s ts-echo and gets its output
//   t2  the ts-dag run returns both task outputs
//   t3  ts-fails: its on-failure task runs and sees the failed task's error via ctx.errors()
//   t4  ts-slow run with runNoWait, cancelled with hatchet.runs.cancel({ids}): the abort signal
//       fires in the worker and the run reads CANCELLED
//   t4b the same through the run reference's cancel()
//   t5  ts-flaky fails its first run; hatchet.runs.replay({ids}) makes the run complete
//   t6  runMany of N inputs returns N results, in order
//   t7  ts-logger logs through ctx.log (levels); hatchet.logs.list(taskRunId) reads them back
//   t8  runs.get / get_status / runs.list for runs queued, running, failed, cancelled, completed
//   t9  runs queued with priorities LOW/MEDIUM/HIGH while no worker serves them run highest first
//   t10 our Rust client runs ts-echo on the TS worker; the TS client runs the Rust worker's
//       rust-echo
//   t11 the engine exits when its stdin closes (our engine only)
//   t12 hatchet.batchTask: two runs of group a come in one batch of two (its size starts it),
//       one of group b in a batch of one (its interval does); each run reads its own output
//   t13 traces (HatchetInstrumentor in a worker and a client of their own, otel.mjs): a run's
//       trace holds the client's hatchet.run_workflow, the worker's hatchet.start_step_run
//       with the task's own span under it, and the engine's workflow_run, queued and
//       start_step_run, once each in one trace (6); an event's run has hatchet.push_event and
//       hatchet.engine.event in place of run_workflow (7)
//   t14 webhooks: create (GENERIC, HMAC-SHA256 hex, a static payload), list, get, update (the
//       static payload), a bad signature is refused 403, a signed request answers its event
//       (key from CEL over the body, the updated static payload merged), delete, then get 404
//   t16 runs.branchDurableTask: a durable task that sleeps 1 s three times, reset from node 2
//       of branch 1, answers branch 2 and runs again with its first sleep replayed (instant)
//       and the other two slept; reset from node 3 of branch 2, branch 3, only the last slept
//   t17 durable eviction (a task's evictionPolicy, ttl 1 s): a task waiting for an event reads
//       isEvicted, runs.restoreTask brings it back (a second invocation) and the event ends
//       it; another, evicted, is brought back by its event alone
//   t18 events.list finds a pushed event by its key and by its metadata (its id the push's)
//   t19 runs.get of a DAG whose first task failed once and passed its retry: taskEvents hold
//       attempt 1's FAILED (with its error), attempt 2's FINISHED and the next task's
//   t20 a status-based idempotency key (`idempotency: {strategy: 'status'}`): a second run
//       while the first runs fails with IdempotencyCollisionError naming it; after its cancel
//       the key is free, and after a run's completion too (any terminal status releases it)
//   t21 durable children (ctx.spawnChild, ctx.spawnChildren: the durable stream's trigger
//       runs): the parent (evictionPolicy ttl 1 s) is evicted while its 4 s child runs, the
//       child's completion restores it, the replay finds the child in the durable log; each
//       child runs once, the engine lists four child runs of the parent, the outputs arrive
//   t22 onSuccess: a DAG's onSuccess task runs once after both tasks completed; a run whose
//       first task fails ends FAILED and its onSuccess task never runs
//   t23 workflows.get / workflows.list find a registered workflow by name; metrics
//       getTaskStatusMetrics counts this suite's completed runs; a task-level concurrency
//       limit (GROUP_ROUND_ROBIN, one per group) runs three runs of a group one at a time
//       while another group's run overlaps them
//   t15 workers.pause: a run of a task only the paused 1-slot worker serves stays QUEUED, and
//       workers.unpause lets it complete (isPaused reads each state)
// With HATCHET_REAL_ENGINE=1 (scripts/real-engine.sh's client env) the checks run against the
// real engine instead, which is already running (t11 is skipped).
// Env: HATCHET_DEV_ENGINE_BIN (required), HATCHET_RUST_WORKER_BIN, HATCHET_RUST_CLIENT_BIN
// (t10), INTEROP_PIDFILE (optional, for run.sh's trap), INTEROP_KEEP=1 keeps the work dir.
// Every REST call the SDK makes is logged to <work>/rest.log; failed ones are also printed.

import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import {
  appendFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { isDeepStrictEqual } from 'node:util';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  bounded,
  check,
  describe,
  expect,
  failures,
  forgetPid,
  log,
  rememberPid,
  sleep,
  stopChild,
  tail,
  Timeout,
  waitUntil,
} from './util.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const TS_WORKER = 'ts-interop-worker';
const RUST_WORKER = 'rust-worker'; // the name examples/worker.rs registers with

const work = mkdtempSync(join(process.env.TMPDIR || tmpdir(), 'hatchet-interop-ts-'));
const markers = join(work, 'markers');
mkdirSync(markers);
process.chdir(work); // the SDK reads .hatchet.yaml from the current directory: keep it clean
log(`work dir ${work}`);

const children = []; // [child, name], stopped in reverse order at the end
let engine = null;
let hs = null;
let exiting = false;

function startEngine() {
  const hsPath = join(work, 'handshake.json');
  const child = spawn(
    process.env.HATCHET_DEV_ENGINE_BIN,
    ['-handshake-file', hsPath, '-grpc-port', '0', '-api-port', '0'],
    { stdio: ['pipe', 'ignore', openSync(join(work, 'engine.log'), 'w')] },
  );
  rememberPid(child.pid);
  return [child, hsPath];
}

function startChild(name, argv, env) {
  const out = openSync(join(work, `${name}.log`), 'w');
  const child = spawn(argv[0], argv.slice(1), {
    env: { ...process.env, ...env },
    stdio: ['ignore', out, out],
  });
  rememberPid(child.pid);
  children.push([child, name]);
  return child;
}

function startTsWorker(name, set, slots) {
  return startChild(name, [process.execPath, join(HERE, 'worker.mjs')], {
    INTEROP_TS_SET: set,
    INTEROP_TS_WORKER_NAME: name,
    INTEROP_TS_SLOTS: String(slots),
  });
}

async function stopNamed(child) {
  const i = children.findIndex(([c]) => c === child);
  if (i < 0) return;
  const [, name] = children[i];
  children.splice(i, 1);
  await stopChild(child, name, 10000);
}

async function restGet(path) {
  const res = await fetch(hs.api_url + path, {
    headers: { Authorization: `Bearer ${hs.token}` },
    signal: AbortSignal.timeout(5000),
  });
  if (!res.ok) throw new Error(`GET ${path}: HTTP ${res.status} ${await res.text()}`);
  return res.json();
}

async function workerRows() {
  return (await restGet(`/api/v1/tenants/${hs.tenant_id}/worker`)).rows || [];
}

async function waitRegistered(name, actions, proc, ms) {
  await waitUntil(
    `worker ${name} ACTIVE with ${actions.join(', ')}`,
    async () => {
      expect(proc.exitCode === null, `${name} exited with ${proc.exitCode}`);
      const rows = await workerRows();
      return rows.some(
        (w) =>
          w.name === name &&
          w.status === 'ACTIVE' &&
          actions.every((a) => (w.actions || []).includes(a)),
      );
    },
    ms,
    300,
  );
}

function rustClient(args, ms = 60000) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.env.HATCHET_RUST_CLIENT_BIN, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    rememberPid(child.pid);
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const timer = setTimeout(() => {
      stopChild(child, 'rust client', 5000).finally(() =>
        reject(new Error(`the Rust client did not exit within ${ms / 1000}s: ${err.slice(-500)}`)),
      );
    }, ms);
    child.on('exit', (code) => {
      clearTimeout(timer);
      forgetPid(child.pid);
      resolve({ code, out, err });
    });
  });
}

/** Log every REST call of the SDK (method, url, query, body, status) to rest.log. */
function traceRest(api) {
  const restLog = join(work, 'rest.log');
  const line = (cfg, status, data) => {
    const q = cfg.params ? ` query=${JSON.stringify(cfg.params)}` : '';
    const b = cfg.data ? ` body=${typeof cfg.data === 'string' ? cfg.data : JSON.stringify(cfg.data)}` : '';
    const d = data === undefined ? '' : ` -> ${JSON.stringify(data).slice(0, 400)}`;
    return `${cfg.method?.toUpperCase()} ${cfg.url}${q}${b} => ${status}${d}`;
  };
  api.instance.interceptors.response.use(
    (res) => {
      appendFileSync(restLog, line(res.config, res.status, res.data) + '\n');
      return res;
    },
    (e) => {
      const cfg = e.config || {};
      const l = line(cfg, e.response?.status ?? e.code, e.response?.data);
      appendFileSync(restLog, l + '\n');
      log(`[rest] ${l}`);
      return Promise.reject(e);
    },
  );
}

const statusOf = async (t, id) => String(await bounded(t.hatchet.runs.get_status(id), 10000, 'runs.get_status'));

async function runChecks() {
  const t = await import('./tasks.mjs'); // builds the client from the env set by main()
  const { hatchet } = t;
  const Priority = (await import('@hatchet-dev/typescript-sdk')).default.Priority;
  traceRest(hatchet.api);

  const tsWorker = startTsWorker(TS_WORKER, 'main', 20);
  let rustWorker = null;
  if (process.env.HATCHET_RUST_WORKER_BIN) {
    rustWorker = startChild('rust-worker', [process.env.HATCHET_RUST_WORKER_BIN], {});
  }
  const mainActions = [
    'ts-echo:ts-echo',
    'ts-dag:first',
    'ts-dag:second',
    'ts-fails:boom',
    'ts-fails:on-failure-task',
    'ts-slow:ts-slow',
    'ts-flaky:ts-flaky',
    'ts-logger:ts-logger',
  ];

  const nonce = () => randomUUID().replaceAll('-', '');
  const seen = (name) => existsSync(join(markers, name));
  const readMarker = (name) => readFileSync(join(markers, name), 'utf8');

  await check('t1', 'TS worker registers tasks; run() returns ts-echo output', 60000, async () => {
    await waitRegistered(TS_WORKER, mainActions, tsWorker, 40000);
    const names = ((await bounded(hatchet.workers.list(), 10000, 'workers.list')).rows || []).map((w) => w.name);
    expect(names.includes(TS_WORKER), `workers.list() shows only ${JSON.stringify(names)}`);
    const n = nonce();
    const out = await bounded(t.echo.run({ nonce: n }), 30000, 'ts-echo run');
    expect(isDeepStrictEqual(out, { nonce: n, mark: t.ECHO_MARK }), `unexpected output ${JSON.stringify(out)}`);
  });

  await check('t2', 'ts-dag returns both task outputs', 30000, async () => {
    const out = await bounded(t.dag.run({ n: 4 }), 25000, 'ts-dag run');
    log(`ts-dag output ${JSON.stringify(out)}`);
    expect(
      out?.first?.n === 5 && out?.second?.n === 50,
      `unexpected output ${JSON.stringify(out)}`,
    );
  });

  await check('t3', 'on-failure task runs and sees the failed task error via ctx.errors()', 40000, async () => {
    const n = nonce();
    const ref = await bounded(t.failing.runNoWait({ nonce: n }), 10000, 'ts-fails runNoWait');
    const runId = await ref.getWorkflowRunId();
    let rejected = null;
    try {
      const out = await bounded(ref.output, 25000, 'ts-fails result');
      log(`ts-fails resolved (not rejected) with ${JSON.stringify(out)}`);
    } catch (e) {
      rejected = e;
      log(`ts-fails result rejected: ${describe(e)}`);
    }
    await waitUntil(`the on-failure marker of run ${runId}`, () => seen(`onfailure-${n}`), 15000);
    const got = JSON.parse(readMarker(`onfailure-${n}`));
    log(`on-failure saw errors=${JSON.stringify(got.errors)}`);
    log(`on-failure action payload: ${got.actionPayload}`);
    const errs = got.errors || {};
    const keys = Object.keys(errs);
    expect(keys.length > 0, 'ctx.errors() is empty in the on-failure task');
    expect(
      keys.some((k) => k.includes('boom') && String(errs[k]).includes(`boom ${n}`)),
      `ctx.errors() lacks boom's error: ${JSON.stringify(errs)}`,
    );
    expect(rejected !== null, 'the failed run resolved instead of rejecting');
    // The real engine's read model trails the run (a read right after it ended can be a 404).
    let status;
    await waitUntil(`run ${runId} to read FAILED`, async () => (status = await statusOf(t, runId)) === 'FAILED', 15000, 300)
      .catch(() => {});
    expect(status === 'FAILED', `the run reads ${status}, not FAILED`);
  });

  const slowRun = async () => {
    const n = nonce();
    const ref = await bounded(t.slow.runNoWait({ nonce: n }), 10000, 'ts-slow runNoWait');
    const id = await ref.getWorkflowRunId();
    await waitUntil('ts-slow to start', () => seen(`slow-started-${n}`), 20000);
    return { n, ref, id };
  };
  const expectCancelled = async ({ n, id, ref }) => {
    await waitUntil('the abort signal to fire in the worker', () => seen(`slow-aborted-${n}`), 15000);
    await waitUntil(
      'the run to read CANCELLED',
      async () => {
        const s = await statusOf(t, id);
        return s === 'CANCELLED';
      },
      10000,
      300,
    );
    const run = await bounded(hatchet.runs.get(id), 10000, 'runs.get');
    expect(run?.run?.status === 'CANCELLED', `runs.get(id).run.status is ${run?.run?.status}`);
    // the run reference's result must not resolve with the task's output. Against the real
    // engine the SDK resolves a cancelled run with {} (the engine reports a cancelled task with
    // an empty error, which the SDK does not read as a failure); our engine answers the same.
    let outcome;
    try {
      outcome = `resolved with ${JSON.stringify(await bounded(ref.output, 10000, 'the cancelled run result'))}`;
    } catch (e) {
      if (e instanceof Timeout) throw e;
      outcome = null;
      log(`the cancelled run's result rejected: ${describe(e)}`);
    }
    expect(outcome === null || outcome === 'resolved with {}', `the cancelled run's result ${outcome}`);
  };

  await check('t4', 'runs.cancel({ids}) fires the abort signal; run reads CANCELLED', 50000, async () => {
    const r = await slowRun();
    const res = await bounded(hatchet.runs.cancel({ ids: [r.id] }), 10000, 'runs.cancel');
    log(`runs.cancel answered HTTP ${res.status} ${JSON.stringify(res.data)}`);
    await expectCancelled(r);
  });

  await check('t4b', 'run reference cancel() fires the abort signal; run reads CANCELLED', 50000, async () => {
    const r = await slowRun();
    await bounded(r.ref.cancel(), 10000, 'ref.cancel');
    await expectCancelled(r);
  });

  await check('t5', 'runs.replay({ids}) re-runs a failed run to completion', 50000, async () => {
    const n = nonce();
    const ref = await bounded(t.flaky.runNoWait({ nonce: n }), 10000, 'ts-flaky runNoWait');
    const id = await ref.getWorkflowRunId();
    await waitUntil('the first run to fail', async () => (await statusOf(t, id)) === 'FAILED', 20000, 300);
    const res = await bounded(hatchet.runs.replay({ ids: [id] }), 10000, 'runs.replay');
    log(`runs.replay answered HTTP ${res.status} ${JSON.stringify(res.data)}`);
    await waitUntil('the replayed run to complete', async () => (await statusOf(t, id)) === 'COMPLETED', 20000, 300);
    expect(readMarker(`flaky-${n}`).includes('succeeded'), 'the task did not run again');
    const run = await bounded(hatchet.runs.get(id), 10000, 'runs.get');
    const outs = (run.tasks || []).map((x) => x.output);
    expect(
      outs.some((o) => o && o.recovered === true && o.nonce === n),
      `runs.get(id).tasks[].output lacks the replayed output: ${JSON.stringify(outs)}`,
    );
  });

  await check('t6', 'runMany of N inputs returns N results in order', 45000, async () => {
    const N = 6;
    const inputs = Array.from({ length: N }, (_, i) => ({ nonce: nonce(), i }));
    const outs = await bounded(t.echo.runMany(inputs.map((input) => ({ input }))), 40000, 'runMany');
    expect(Array.isArray(outs) && outs.length === N, `got ${JSON.stringify(outs)?.slice(0, 300)}`);
    outs.forEach((o, i) =>
      expect(
        o?.nonce === inputs[i].nonce && o?.i === i && o?.mark === t.ECHO_MARK,
        `result ${i} is ${JSON.stringify(o)}`,
      ),
    );
    // run() with an array of inputs is the other bulk form
    const outs2 = await bounded(t.echo.run(inputs.slice(0, 3)), 30000, 'run([...])');
    expect(
      Array.isArray(outs2) && outs2.length === 3 && outs2.every((o, i) => o?.nonce === inputs[i].nonce),
      `run([..]) gave ${JSON.stringify(outs2)?.slice(0, 300)}`,
    );
  });

  await check('t12', 'batchTask: runs come in batches by key, each reads its own output', 60000, async () => {
    const n = nonce();
    const inputs = [
      { nonce: `${n}-a0`, group: 'a' },
      { nonce: `${n}-a1`, group: 'a' },
      { nonce: `${n}-b`, group: 'b' },
    ];
    const outs = await bounded(Promise.all(inputs.map((i) => t.batch.run(i))), 50000, 'ts-batch runs');
    outs.forEach((o, i) =>
      expect(
        o?.nonce === inputs[i].nonce && o?.size === (inputs[i].group === 'a' ? 2 : 1),
        `run ${i} (group ${inputs[i].group}) read ${JSON.stringify(o)}`,
      ),
    );
    log(`t12 batch sizes ${outs.map((o) => o?.size).join(',')}`);
  });

  await check('t7', 'ctx.log lines (with levels) are read back through hatchet.logs.list', 40000, async () => {
    const n = nonce();
    const out = await bounded(t.logger.run({ nonce: n }), 25000, 'ts-logger run');
    const taskId = out.taskRunExternalId;
    expect(typeof taskId === 'string' && taskId.length > 0, `no task run id in ${JSON.stringify(out)}`);
    const want = {
      [`plain line ${n}`]: 'INFO',
      [`info line ${n}`]: 'INFO',
      [`debug line ${n}`]: 'DEBUG',
      [`warn line ${n}`]: 'WARN',
      [`error line ${n}`]: 'ERROR',
      [`logger.info line ${n}`]: 'INFO',
    };
    let rows = [];
    await waitUntil(
      'all six log lines',
      async () => {
        const list = await bounded(hatchet.logs.list(taskId, { limit: 100 }), 10000, 'logs.list');
        rows = list.rows || [];
        return Object.keys(want).every((m) => rows.some((r) => r.message === m));
      },
      10000,
      500,
    );
    for (const [m, level] of Object.entries(want)) {
      const row = rows.find((r) => r.message === m);
      expect(row.level === level, `"${m}" has level ${row.level}, not ${level}`);
    }
    const warnOnly = await bounded(hatchet.logs.list(taskId, { levels: ['WARN'] }), 10000, 'logs.list levels');
    const msgs = (warnOnly.rows || []).map((r) => r.message);
    expect(
      msgs.length === 1 && msgs[0] === `warn line ${n}`,
      `levels=[WARN] filter answered ${JSON.stringify(msgs)}`,
    );
  });

  await check('t8', 'runs.get / get_status / runs.list for queued, running, failed, cancelled, completed', 90000, async () => {
    // the orphan (queued) and prio (t9) workflows: registered by a worker that then leaves
    const reg = startTsWorker('ts-registrar', 'registrar', 1);
    await waitRegistered('ts-registrar', ['ts-orphan:ts-orphan', 'ts-prio:ts-prio'], reg, 40000);
    await stopNamed(reg);
    const tag = nonce();
    const meta = { additionalMetadata: { t8: tag } };
    const runs = {};
    const problems = [];
    const step = async (what, fn) => {
      try {
        await fn();
      } catch (e) {
        problems.push(`${what}: ${describe(e)}`);
      }
    };
    await step('queued', async () => {
      const ref = await t.orphan.runNoWait({ nonce: nonce() }, meta);
      runs.QUEUED = await ref.getWorkflowRunId();
    });
    await step('completed', async () => {
      const ref = await t.echo.runNoWait({ nonce: nonce() }, meta);
      runs.COMPLETED = await ref.getWorkflowRunId();
      await bounded(ref.output, 20000, 'ts-echo result');
    });
    await step('failed', async () => {
      const ref = await t.flaky.runNoWait({ nonce: nonce() }, meta);
      runs.FAILED = await ref.getWorkflowRunId();
      await waitUntil('the run to fail', async () => (await statusOf(t, runs.FAILED)) === 'FAILED', 20000, 300);
    });
    let running = null;
    await step('running', async () => {
      const n = nonce();
      const ref = await t.slow.runNoWait({ nonce: n }, meta);
      running = await ref.getWorkflowRunId();
      runs.RUNNING = running;
      await waitUntil('ts-slow to start', () => seen(`slow-started-${n}`), 20000);
    });
    await step('cancelled', async () => {
      const n = nonce();
      const ref = await t.slow.runNoWait({ nonce: n }, meta);
      const id = await ref.getWorkflowRunId();
      await waitUntil('ts-slow to start', () => seen(`slow-started-${n}`), 20000);
      await bounded(hatchet.runs.cancel({ ids: [id] }), 10000, 'runs.cancel');
      runs.CANCELLED = id;
      await waitUntil('the run to read CANCELLED', async () => (await statusOf(t, id)) === 'CANCELLED', 10000, 300);
    });
    // The real engine's REST reads trail its result stream and its workers' events: wait for
    // each run's status read to say what the run did (the lists read the same rows).
    for (const [want, id] of Object.entries(runs)) {
      await step(`the status read of ${want}`, () =>
        waitUntil(`run ${id} to read ${want}`, async () => (await statusOf(t, id)) === want, 15000, 300));
    }
    for (const [want, id] of Object.entries(runs)) {
      await step(`get_status ${want}`, async () => {
        const s = await statusOf(t, id);
        expect(s === want, `run ${id} reads ${s}`);
      });
      await step(`runs.get ${want}`, async () => {
        const d = await bounded(hatchet.runs.get(id), 10000, 'runs.get');
        expect(d?.run?.status === want, `runs.get(${id}).run.status is ${d?.run?.status}`);
        expect(d?.run?.metadata?.id === id, `runs.get(${id}).run.metadata.id is ${d?.run?.metadata?.id}`);
        expect(Array.isArray(d?.tasks) && d.tasks.length >= 1, `runs.get(${id}).tasks is ${JSON.stringify(d?.tasks)}`);
      });
    }
    await step('runs.list', async () => {
      const list = await bounded(hatchet.runs.list({ additionalMetadata: { t8: tag }, limit: 50 }), 10000, 'runs.list');
      const byRun = Object.fromEntries((list.rows || []).map((r) => [r.workflowRunExternalId ?? r.metadata?.id, r.status]));
      for (const [want, id] of Object.entries(runs)) {
        expect(byRun[id] === want, `runs.list shows run ${id} as ${byRun[id]}, not ${want}`);
      }
      const q = await bounded(
        hatchet.runs.list({ additionalMetadata: { t8: tag }, statuses: ['QUEUED'] }),
        10000,
        'runs.list statuses',
      );
      const ids = (q.rows || []).map((r) => r.workflowRunExternalId ?? r.metadata?.id);
      expect(
        ids.length === 1 && ids[0] === runs.QUEUED,
        `runs.list(statuses=[QUEUED]) answered ${JSON.stringify(ids)}`,
      );
      // workflowNames: the SDK looks each name up (GET .../workflows?name=) and sends workflow_ids
      const w = await bounded(
        hatchet.runs.list({ additionalMetadata: { t8: tag }, workflowNames: [t.flaky.name] }),
        10000,
        'runs.list workflowNames',
      );
      const wids = (w.rows || []).map((r) => r.workflowRunExternalId ?? r.metadata?.id);
      expect(
        wids.length === 1 && wids[0] === runs.FAILED,
        `runs.list(workflowNames=[ts-flaky]) answered ${JSON.stringify(wids)}`,
      );
    });
    if (running) {
      await hatchet.runs.cancel({ ids: [running] }).catch(() => undefined); // let it go
    }
    const missing = ['QUEUED', 'RUNNING', 'FAILED', 'CANCELLED', 'COMPLETED'].filter((s) => !runs[s]);
    expect(problems.length === 0, problems.join(' | '));
    expect(missing.length === 0, `no run reached ${missing.join(', ')}`);
  });

  await check('t9', 'runs queued with priorities execute highest first', 70000, async () => {
    // ts-prio was registered in t8 by a worker that has left; queue runs, then serve them
    // with a one-slot worker.
    if (!(await workerRows()).some((w) => (w.actions || []).includes('ts-prio:ts-prio'))) {
      const reg = startTsWorker('ts-registrar', 'registrar', 1);
      await waitRegistered('ts-registrar', ['ts-prio:ts-prio'], reg, 40000);
      await stopNamed(reg);
    }
    const batch = nonce();
    const plan = [
      ['low-1', Priority.LOW],
      ['med-1', Priority.MEDIUM],
      ['high-1', Priority.HIGH],
      ['low-2', Priority.LOW],
      ['high-2', Priority.HIGH],
      ['med-2', Priority.MEDIUM],
    ];
    const refs = [];
    for (const [label, priority] of plan) {
      refs.push(await bounded(t.prio.runNoWait({ batch, label }, { priority }), 10000, 'ts-prio runNoWait'));
    }
    await sleep(500);
    const ids = await Promise.all(refs.map((r) => r.getWorkflowRunId()));
    // Every run reads QUEUED (the real engine's rows can still be missing this soon: a 404
    // is waited out, a run that ran never reads QUEUED again).
    let early = [];
    await waitUntil('six runs to read QUEUED', async () => {
      early = await Promise.all(ids.map((id) => statusOf(t, id)));
      return early.every((s) => s === 'QUEUED');
    }, 10000, 300).catch((e) => { if (!(e instanceof Timeout)) throw e; });
    expect(early.every((s) => s === 'QUEUED'), `runs did not wait for a worker: ${early}`);
    const pw = startTsWorker('ts-prio-worker', 'prio', 1);
    try {
      await Promise.all(refs.map((r) => bounded(r.output, 50000, 'ts-prio result')));
    } finally {
      await stopNamed(pw);
    }
    const order = readMarker(`prio-order-${batch}`).trim().split('\n');
    log(`ts-prio start order ${order.join(' ')}`);
    const rank = (l) => (l.startsWith('high') ? 3 : l.startsWith('med') ? 2 : 1);
    const ranks = order.map(rank);
    expect(order.length === plan.length, `ran ${order.length} of ${plan.length}`);
    expect(
      ranks.every((r, i) => i === 0 || ranks[i - 1] >= r),
      `runs did not start highest priority first: ${order.join(' ')}`,
    );
  });

  await check('t13', "traces: the SDK's instrumentor and the engine's spans, one trace per run", 120000, async () => {
    const worker = startTsWorker('ts-otel-worker', 'otel', 5);
    await waitRegistered('ts-otel-worker', ['ts-traced:ts-traced'], worker, 30000);
    const n = nonce();
    const client = startChild('ts-traced-client', [process.execPath, join(HERE, 'traced_client.mjs')], {
      INTEROP_TRACE_NONCE: n,
    });
    await waitUntil('the traced client to exit', () => client.exitCode !== null, 60000, 200);
    expect(client.exitCode === 0, `the traced client exited with ${client.exitCode}`);
    const ids = JSON.parse(readFileSync(join(work, 'ts-traced-client.log'), 'utf8').trim().split('\n').pop());
    const problems = [];
    const traceOf = async (runId, want) => {
      let spans = [];
      const read = async () => {
        try {
          const q = `run_external_id=${runId}&limit=1000`;
          spans = (await restGet(`/api/v1/stable/tenants/${hs.tenant_id}/traces?${q}`)).rows || [];
        } catch {
          spans = []; // 404 until the spans are written
        }
        return spans.length >= want;
      };
      await waitUntil(`${want} spans in run ${runId}'s trace`, read, 45000, 500).catch(() => {});
      await sleep(1500); // later exports would show as too many spans
      await read();
      return spans;
    };
    const judge = (what, spans, want, names) => {
      const got = spans.map((s) => s.spanName).sort();
      if (spans.length !== want) problems.push(`${what}: ${spans.length} spans, want ${want}: ${got}`);
      const distinct = [...new Set(got)];
      if (!isDeepStrictEqual(distinct, [...names].sort())) {
        problems.push(`${what}: span names ${distinct}, want ${[...names].sort()}`);
      }
      if (new Set(spans.map((s) => s.traceId)).size !== 1) problems.push(`${what}: more than one trace id`);
      if (new Set(spans.map((s) => s.spanId)).size !== spans.length) problems.push(`${what}: a span id repeats`);
      const work = spans.find((s) => s.spanName === 'ts.work');
      const step = spans.find((s) => s.spanName === 'hatchet.start_step_run');
      if (work && step && work.parentSpanId !== step.spanId) {
        problems.push(`${what}: the task's span is not under the SDK's step span`);
      }
    };
    const engineSpans = ['hatchet.engine.workflow_run', 'hatchet.engine.queued', 'hatchet.engine.start_step_run'];
    const base = ['hatchet.start_step_run', 'ts.work', ...engineSpans];
    const direct = await traceOf(ids.run, 6);
    judge('a run', direct, 6, ['hatchet.run_workflow', ...base]);
    const note = direct.find((s) => s.spanName === 'ts.work')?.spanAttributes?.['ts.note'];
    if (note !== 'direct') problems.push(`the task's own span reads ts.note=${note}`);
    const since = new Date(Date.now() - 600000).toISOString();
    const listed = await waitUntil(
      "the event's run to complete",
      async () => {
        const q = `since=${since}&only_tasks=false&triggering_event_external_id=${ids.event}`;
        const rows = (await restGet(`/api/v1/stable/tenants/${hs.tenant_id}/workflow-runs?${q}`)).rows || [];
        return rows.find((r) => r.status === 'COMPLETED');
      },
      45000,
      500,
    );
    const viaEvent = await traceOf(listed.metadata.id, 7);
    judge("an event's run", viaEvent, 7, ['hatchet.push_event', 'hatchet.engine.event', ...base]);
    const key = viaEvent.find((s) => s.spanName === 'hatchet.engine.event')?.spanAttributes?.['hatchet.event_key'];
    if (key !== 'ts:traced') problems.push(`the engine's event span reads hatchet.event_key=${key}`);
    log(`t13 traces: ${direct.length} spans for a run, ${viaEvent.length} for an event's run`);
    await stopNamed(worker);
    expect(!problems.length, problems.join('; '));
  });

  await check('t14', 'webhooks: create (HMAC), list, get, update, a signed request answers its event, delete', 60000, async () => {
    const { createHmac } = await import('node:crypto');
    const n = nonce();
    const name = `ts-hook-${n.slice(0, 12)}`;
    const secret = 'ts-secret';
    const made = await bounded(
      hatchet.webhooks.create({
        sourceName: 'GENERIC',
        name,
        eventKeyExpression: "'ts:hooked:' + input.nonce",
        staticPayload: { via: 'webhook' },
        auth: { algorithm: 'SHA256', encoding: 'HEX', signatureHeaderName: 'X-Signature', signingSecret: secret },
      }),
      20000,
      'webhooks.create',
    );
    expect(made?.name === name, `webhooks.create answered ${JSON.stringify(made)}`);
    const listed = ((await bounded(hatchet.webhooks.list({ webhookNames: [name] }), 20000, 'webhooks.list')).rows || []).map((w) => w.name);
    expect(listed.includes(name), `webhooks.list lacks ${name}: ${listed}`);
    const got = await bounded(hatchet.webhooks.get(name), 20000, 'webhooks.get');
    expect(got?.authType === 'HMAC', `webhooks.get: ${JSON.stringify(got)}`);
    const updated = await bounded(
      hatchet.webhooks.update(name, { staticPayload: { via: 'updated' } }),
      20000,
      'webhooks.update',
    );
    expect(isDeepStrictEqual(updated?.staticPayload, { via: 'updated' }), `webhooks.update answered ${JSON.stringify(updated)}`);
    const url = `${hs.api_url}/api/v1/stable/tenants/${hs.tenant_id}/webhooks/${name}`;
    const body = JSON.stringify({ nonce: n });
    const post = async (signature) => {
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'X-Signature': signature },
        body,
        signal: AbortSignal.timeout(20000),
      });
      return [res.status, await res.text()];
    };
    const [bad] = await post('0'.repeat(64));
    expect(bad === 403, `a bad signature answered ${bad}, not 403`);
    const good = createHmac('sha256', secret).update(body).digest('hex');
    const [code, answer] = await post(`sha256=${good}`);
    expect(code === 200, `a good signature answered ${code}: ${answer.slice(0, 300)}`);
    const event = JSON.parse(answer).event || {};
    expect(event.key === `ts:hooked:${n}`, `the webhook's event key is ${event.key}`);
    expect(
      isDeepStrictEqual(event.payload, { nonce: n, via: 'updated' }),
      `the webhook's event payload is ${JSON.stringify(event.payload)}`,
    );
    await bounded(hatchet.webhooks.delete(name), 20000, 'webhooks.delete');
    let gone = false;
    try {
      await bounded(hatchet.webhooks.get(name), 20000, 'webhooks.get');
    } catch (e) {
      gone = e?.response?.status === 404 || /404/.test(String(e));
    }
    expect(gone, 'webhooks.get of a deleted webhook did not answer 404');
  });

  await check('t15', 'workers.pause holds a new run QUEUED on a paused worker; unpause lets it run', 90000, async () => {
    const worker = startTsWorker('ts-pausable-worker', 'prio', 1);
    await waitRegistered('ts-pausable-worker', ['ts-prio:ts-prio'], worker, 30000);
    const row = (await workerRows()).find((w) => w.name === 'ts-pausable-worker' && w.status === 'ACTIVE');
    expect(row, 'the worker row');
    const id = row.metadata.id;
    await bounded(hatchet.workers.pause(id), 20000, 'workers.pause');
    await waitUntil('the worker to read PAUSED', async () => (await hatchet.workers.get(id))?.status === 'PAUSED', 20000, 300);
    expect(await bounded(hatchet.workers.isPaused(id), 20000, 'workers.isPaused'), 'isPaused');
    // The real engine's scheduler rereads its workers every 5 s: until then it still assigns
    // to a worker paused since its last read.
    await sleep(6500);
    const n = nonce();
    const ref = await bounded(t.prio.runNoWait({ batch: n, label: 'paused' }), 20000, 'runNoWait');
    const runId = await ref.getWorkflowRunId();
    await sleep(1500); // a few scheduler passes
    const held = await statusOf(t, runId);
    expect(held.endsWith('QUEUED'), `a run on the paused worker's only task reads ${held}`);
    await bounded(hatchet.workers.unpause(id), 20000, 'workers.unpause');
    await bounded(ref.output, 40000, 'the run after unpause');
    expect(!(await bounded(hatchet.workers.isPaused(id), 20000, 'workers.isPaused')), 'still paused');
    await stopNamed(worker);
  });

  await check('t16', 'runs.branchDurableTask resets a durable task from a node: earlier sleeps replay, later ones sleep again', 150000, async () => {
    const ref = await bounded(t.resettable.runNoWait({}), 20000, 'runNoWait');
    const runId = await ref.getWorkflowRunId();
    const output = async () => {
      const d = await bounded(hatchet.runs.getDetails(runId), 10000, 'runs.getDetails');
      const task = Object.values(d?.taskRuns || {})[0];
      return d?.done && String(d.status).endsWith('COMPLETED') ? task?.output : undefined;
    };
    let last = await waitUntil('the first execution', output, 60000, 300);
    const taskId = await bounded(hatchet.runs.getTaskExternalId(runId), 10000, 'getTaskExternalId');
    const problems = [];
    for (const [node, branch, wantBranch, replayed] of [
      [2, 1, 2, 1],
      [3, 2, 3, 2],
    ]) {
      const before = last.at;
      const resp = await bounded(hatchet.runs.branchDurableTask(taskId, node, branch), 20000, 'branchDurableTask');
      if (resp?.data?.branchId !== wantBranch) {
        problems.push(`reset from node ${node} of branch ${branch} answered ${JSON.stringify(resp?.data)}`);
      }
      last = await waitUntil(
        `the run reset from node ${node} to complete again`,
        async () => {
          const out = await output();
          return out && out.at !== before ? out : undefined;
        },
        60000,
        500,
      );
      log(`t16 reset from node ${node} of branch ${branch}: slept ${JSON.stringify(last.took)}`);
      last.took.forEach((d, i) => {
        if (i < replayed && d >= 0.9) problems.push(`reset from node ${node}: sleep ${i + 1} took ${d}s, not replayed`);
        if (i >= replayed && d < 0.9) problems.push(`reset from node ${node}: sleep ${i + 1} took ${d}s, not slept again`);
      });
    }
    expect(!problems.length, problems.join('; '));
  });

  await check('t17', 'durable eviction: a waiting task is evicted by its policy, restored by runs.restoreTask and by its event', 120000, async () => {
    const evicted = async (runId) => {
      const d = await bounded(hatchet.runs.getDetails(runId), 10000, 'runs.getDetails');
      return Object.values(d?.taskRuns || {})[0]?.isEvicted === true;
    };
    const invocations = (n) => (seen(`evictable-${n}`) ? readMarker(`evictable-${n}`).split('\n').filter(Boolean).length : 0);
    // Restored by hand: evicted, restoreTask brings it back (a second invocation), then the
    // event ends it. Restored by its event: evicted, the event alone brings it back.
    for (const byHand of [true, false]) {
      const n = nonce();
      const ref = await bounded(t.evictable.runNoWait({ nonce: n }), 20000, 'runNoWait');
      const runId = await ref.getWorkflowRunId();
      await waitUntil(`run ${runId} evicted`, () => evicted(runId), 30000, 300);
      expect(invocations(n) === 1, `${invocations(n)} invocations before the restore`);
      if (byHand) {
        const taskId = await bounded(hatchet.runs.getTaskExternalId(runId), 10000, 'getTaskExternalId');
        const resp = await bounded(hatchet.runs.restoreTask(taskId), 20000, 'runs.restoreTask');
        expect(resp?.status === 200, `restoreTask answered ${resp?.status}`);
        await waitUntil('a second invocation after the restore', () => invocations(n) === 2, 30000, 200);
      }
      await bounded(hatchet.events.push(`ts:wake:${n}`, { n }), 20000, 'events.push');
      const out = await bounded(ref.output, 60000, 'the restored run');
      expect(out?.nonce === n, `output ${JSON.stringify(out)}`);
      log(`t17 ${byHand ? 'restoreTask' : 'the event'}: ${invocations(n)} invocations`);
    }
  });

  await check('t18', 'events.list finds a pushed event by key and by metadata', 40000, async () => {
    const n = nonce();
    const key = `ts:listed:${n}`;
    const since = new Date(Date.now() - 60000).toISOString();
    const pushed = await bounded(
      hatchet.events.push(key, { n }, { additionalMetadata: { listed: n } }),
      20000,
      'events.push',
    );
    const byKey = await waitUntil(
      'the pushed event listed by key',
      async () => {
        const rows = (await hatchet.events.list({ keys: [key], since })).rows || [];
        return rows.length ? rows : undefined;
      },
      30000,
      500,
    );
    expect(byKey.length === 1 && byKey[0].key === key, `by key: ${JSON.stringify(byKey)}`);
    expect(byKey[0].metadata?.id === pushed.eventId, `the listed id ${byKey[0].metadata?.id}, pushed ${pushed.eventId}`);
    const byMeta = (await hatchet.events.list({ additionalMetadata: [`listed:${n}`], since })).rows || [];
    expect(byMeta.length === 1 && byMeta[0].key === key, `by metadata: ${JSON.stringify(byMeta)}`);
  });

  await check('t19', "runs.get: a DAG run's task events per attempt (a failed first attempt, its retry, the next task)", 60000, async () => {
    const n = nonce();
    const ref = await bounded(t.retriedDag.runNoWait({ nonce: n }), 20000, 'runNoWait');
    const runId = await ref.getWorkflowRunId();
    await bounded(ref.output, 40000, 'the DAG');
    const want = (events) => {
      const of = (task, attempt, type) =>
        events.some((e) => e.taskDisplayName?.startsWith(task) && e.attempt === attempt && e.eventType === type);
      return of('wobbly', 1, 'FAILED') && of('wobbly', 2, 'FINISHED') && of('after', 1, 'FINISHED');
    };
    // The real engine writes task events on their own path: wait for them.
    const events = await waitUntil(
      'the DAG run details to list its task events',
      async () => {
        const d = await hatchet.runs.get(runId);
        return want(d?.taskEvents || []) ? d.taskEvents : undefined;
      },
      40000,
      500,
    );
    const failed = events.find((e) => e.eventType === 'FAILED');
    expect(
      String(failed?.errorMessage || '').includes(`first attempt of ${n} fails`),
      `the failed attempt's event: ${JSON.stringify(failed)}`,
    );
    expect(
      events.every((e) => e.retryCount === e.attempt - 1),
      `attempt is retryCount + 1: ${JSON.stringify(events.map((e) => [e.attempt, e.retryCount]))}`,
    );
  });

  await check('t20', 'a status-based idempotency key: held by a running run, released by its cancel and by a completion', 90000, async () => {
    const sdk = (await import('@hatchet-dev/typescript-sdk')).default;
    const n = nonce();
    const collides = async (input) => {
      try {
        await t.keyed.runNoWait(input);
        return null;
      } catch (e) {
        if (e?.constructor?.name === 'IdempotencyCollisionError' || e instanceof (sdk.IdempotencyCollisionError ?? class {})) {
          return e.existingRunExternalId || 'collided';
        }
        throw e;
      }
    };
    // Held while the run runs.
    const parked = await bounded(t.keyed.runNoWait({ key: `${n}-a`, park: true }), 20000, 'runNoWait');
    const parkedId = await parked.getWorkflowRunId();
    await waitUntil('the parked run to run', async () => (await statusOf(t, parkedId)).endsWith('RUNNING'), 30000, 200);
    const existing = await bounded(collides({ key: `${n}-a` }), 20000, 'a second run');
    expect(existing === parkedId, `a second run with the key: ${existing}, want the collision naming ${parkedId}`);
    // A cancel releases it.
    await bounded(hatchet.runs.cancel({ ids: [parkedId] }), 20000, 'runs.cancel');
    await waitUntil('the parked run cancelled', async () => (await statusOf(t, parkedId)).endsWith('CANCELLED'), 30000, 200);
    const again = await waitUntil(
      'the key released by the cancel',
      async () => {
        const c = await collides({ key: `${n}-a` });
        return c === null ? 'free' : undefined;
      },
      20000,
      500,
    );
    expect(again === 'free', 'the key is still held');
    // So does a completion (any terminal status releases it, as the real engine does).
    const done = await bounded(t.keyed.run({ key: `${n}-b` }), 30000, 'a run to completion');
    expect(done?.key === `${n}-b`, `output ${JSON.stringify(done)}`);
    const free = await waitUntil(
      'the key released by the completion',
      async () => ((await collides({ key: `${n}-b` })) === null ? 'free' : undefined),
      20000,
      500,
    );
    expect(free === 'free', 'a completed run still holds its key');
  });

  await check('t22', 'onSuccess runs once after every task completed, and is skipped when a task fails', 60000, async () => {
    const [ok, bad] = [nonce(), nonce()];
    const out = await bounded(t.succeeding.run({ nonce: ok, n: 1 }), 40000, 'the run');
    expect(out?.b?.n === 20, `the run's output ${JSON.stringify(out)}`);
    const ran = await waitUntil(
      'the onSuccess marker',
      async () => seen(`onsuccess-${ok}`) && readMarker(`onsuccess-${ok}`).trim().split('\n'),
      30000,
    );
    expect(ran.length === 1, `onSuccess ran ${ran.length} times`);
    const badRef = await bounded(t.succeeding.runNoWait({ nonce: bad, n: -1 }), 20000, 'runNoWait');
    const badId = await badRef.getWorkflowRunId();
    await waitUntil('the failing run FAILED', async () => (await statusOf(t, badId)).endsWith('FAILED'), 30000, 200);
    expect(!seen(`onsuccess-${bad}`), 'onSuccess ran for a run whose task failed');
  });

  await check('t23', 'workflows.get/list and task metrics; a task-level concurrency limit runs a group one at a time', 90000, async () => {
    const since = new Date(Date.now() - 3600_000).toISOString();
    const wf = await bounded(hatchet.workflows.get('ts-echo'), 20000, 'workflows.get');
    expect(wf?.name === 'ts-echo' && wf?.metadata?.id, `workflows.get: ${JSON.stringify(wf)?.slice(0, 200)}`);
    // By name: an engine that keeps many workflows (a long-lived test tenant) may list ts-echo
    // past the first page.
    const listed = await bounded(hatchet.workflows.list({ name: 'ts-echo' }), 20000, 'workflows.list');
    expect((listed.rows || []).some((r) => r.metadata?.id === wf.metadata.id), 'workflows.list lacks ts-echo');
    const n = nonce();
    const groups = ['g', 'g', 'g', 'h'];
    const refs = await Promise.all(groups.map((group) => bounded(t.limited.runNoWait({ nonce: n, group }), 20000, 'runNoWait')));
    await Promise.all(refs.map((r) => bounded(r.output, 60000, 'a limited run')));
    const rows = readMarker(`limited-${n}`).trim().split('\n').map((l) => l.split(' '));
    expect(rows.length === 4, `${rows.length} executions for 4 runs`);
    const spans = (g) => rows.filter((r) => r[0] === g).map((r) => [Number(r[1]), Number(r[2])]).sort((a, b) => a[0] - b[0]);
    const g = spans('g');
    for (let i = 1; i < g.length; i++) {
      expect(g[i][0] >= g[i - 1][1], `two runs of group g overlapped: ${JSON.stringify(g)}`);
    }
    const [h] = spans('h');
    expect(h[0] < g[g.length - 1][1], `group h waited for group g: h ${JSON.stringify(h)}, g ${JSON.stringify(g)}`);
    // The four runs just completed: the tenant's task metrics count them (the real engine's
    // read model trails by a moment).
    const counts = await waitUntil(
      'task status metrics counting the four runs',
      async () => {
        const c = await hatchet.metrics.getTaskStatusMetrics({ since });
        return c.completed >= 4 ? c : undefined;
      },
      30000,
      500,
    );
    expect(counts.completed >= 4, `task status metrics ${JSON.stringify(counts)}`);
  });

  await check('t21', 'durable children over the durable stream: evicted while a child runs, replayed without a re-spawn', 120000, async () => {
    const n = nonce();
    const count = (name) => (seen(name) ? readMarker(name).split('\n').filter(Boolean).length : 0);
    const problems = [];
    const ref = await bounded(t.durableParent.runNoWait({ nonce: n }), 20000, 'runNoWait');
    const runId = await ref.getWorkflowRunId();
    // The first child runs 4 s; the parent's policy evicts it after 1 s of waiting.
    await waitUntil(
      `parent ${runId} evicted while its first child runs`,
      async () => {
        const d = await bounded(hatchet.runs.getDetails(runId), 10000, 'runs.getDetails');
        return Object.values(d?.taskRuns || {})[0]?.isEvicted === true;
      },
      30000,
      200,
    );
    if (count(`kid-${n}-0`) !== 1) problems.push(`the first child ran ${count(`kid-${n}-0`)} times before the eviction was read`);
    const out = await bounded(ref.output, 90000, 'the parent');
    if (!isDeepStrictEqual(out?.first, { nonce: n, i: 0 })) problems.push(`spawnChild's result read ${JSON.stringify(out?.first)}`);
    if (!isDeepStrictEqual(out?.rest, [1, 2, 3].map((i) => ({ nonce: n, i })))) {
      problems.push(`spawnChildren's results read ${JSON.stringify(out?.rest)}`);
    }
    // The child's completion restored the parent; the replay found that child in the log.
    if (count(`dparent-${n}`) < 2) problems.push(`${count(`dparent-${n}`)} parent invocation(s), want a second after the restore`);
    for (let i = 0; i < 4; i += 1) {
      if (count(`kid-${n}-${i}`) !== 1) problems.push(`child ${i} ran ${count(`kid-${n}-${i}`)} times, not once`);
    }
    const taskId = await bounded(hatchet.runs.getTaskExternalId(runId), 10000, 'getTaskExternalId');
    let kids = [];
    try {
      await waitUntil(
        "the parent's four child runs listed",
        async () => {
          const list = await bounded(hatchet.runs.list({ parentTaskExternalId: taskId, since: new Date(Date.now() - 3600000), limit: 50 }), 10000, 'runs.list');
          kids = list?.rows || [];
          return kids.length >= 4;
        },
        30000,
        500,
      );
    } catch (e) {
      if (!(e instanceof Timeout)) throw e;
    }
    if (kids.length !== 4) problems.push(`${kids.length} child runs at the engine, not 4`);
    log(`t21 durable children: ${count(`dparent-${n}`)} parent invocations, ${kids.length} child runs`);
    expect(!problems.length, problems.join('; '));
  });

  await check('t10', 'Rust client runs ts-echo on the TS worker; TS client runs rust-echo on the Rust worker', 90000, async () => {
    expect(process.env.HATCHET_RUST_CLIENT_BIN, 'HATCHET_RUST_CLIENT_BIN is not set');
    expect(rustWorker, 'HATCHET_RUST_WORKER_BIN is not set');
    const n = nonce();
    const { code, out, err } = await rustClient([t.echo.name, JSON.stringify({ nonce: n })], 45000);
    log(`rust client: exit ${code}, stdout ${JSON.stringify(out.trim())}`);
    expect(code === 0, `rust client exit code ${code}, stderr ${JSON.stringify(err.trim().slice(-500))}`);
    const got = JSON.parse(out);
    expect(isDeepStrictEqual(got, { nonce: n, mark: t.ECHO_MARK }), `rust client printed ${out.trim()}`);
    await waitRegistered(RUST_WORKER, ['rust-echo:echo'], rustWorker, 30000);
    const sent = { nonce: nonce(), n: 7, nested: { list: [1, 'two', null] } };
    const res = await bounded(hatchet.run('rust-echo', sent), 30000, "hatchet.run('rust-echo')");
    log(`rust-echo via hatchet.run: ${JSON.stringify(res)}`);
    expect(
      isDeepStrictEqual(res, { echo: { echo: sent, worker: 'rust' } }),
      `unexpected output ${JSON.stringify(res)}`,
    );
  });
}

async function shutdown() {
  for (const [child, name] of children.splice(0).reverse()) {
    await stopChild(child, name, 10000);
  }
  if (engine) {
    try {
      const counters = await restGet('/_dev/counters');
      writeFileSync(join(work, 'counters.json'), JSON.stringify(counters, null, 1));
    } catch {}
    const eng = engine;
    engine = null;
    await check('t11', 'engine exits when its stdin closes', 20000, async () => {
      eng.stdin.end();
      try {
        await waitUntil('the engine to exit', () => eng.exitCode !== null || eng.signalCode !== null, 10000, 100);
      } finally {
        await stopChild(eng, 'engine', 3000);
      }
    });
  }
}

async function main() {
  if (!process.env.HATCHET_DEV_ENGINE_BIN) {
    process.stdout.write('FAIL setup: HATCHET_DEV_ENGINE_BIN is not set\n');
    return 1;
  }
  try {
    let hsPath;
    try {
      if (['1', 'true'].includes(process.env.HATCHET_REAL_ENGINE)) {
        // The real Hatchet engine (scripts/real-engine.sh env): already running; t11 is ours.
        const env = process.env;
        hs = {
          token: env.HATCHET_CLIENT_TOKEN,
          tenant_id: env.HATCHET_CLIENT_TENANT_ID,
          grpc_address: env.HATCHET_CLIENT_HOST_PORT,
          api_url: env.HATCHET_CLIENT_SERVER_URL,
        };
        throw Object.assign(new Error('real engine'), { real: true });
      }
      [engine, hsPath] = startEngine();
      hs = await waitUntil(
        "the engine's handshake file",
        () => {
          if (engine.exitCode !== null) throw new Error(`engine exited with ${engine.exitCode}`);
          try {
            return JSON.parse(readFileSync(hsPath, 'utf8'));
          } catch {
            return null;
          }
        },
        20000,
      );
    } catch (e) {
      if (!e?.real) {
        failures.push('setup');
        process.stdout.write(`FAIL setup: engine start: ${describe(e)}\n`);
        return 1;
      }
    }
    log(`engine up: grpc ${hs.grpc_address}, api ${hs.api_url}`);
    Object.assign(process.env, {
      HATCHET_CLIENT_TOKEN: hs.token,
      HATCHET_CLIENT_HOST_PORT: hs.grpc_address,
      HATCHET_CLIENT_API_URL: hs.api_url, // the TS SDK's name
      HATCHET_CLIENT_SERVER_URL: hs.api_url, // the Rust runtime's and Python SDK's name
      HATCHET_CLIENT_TLS_STRATEGY: process.env.HATCHET_CLIENT_TLS_STRATEGY || 'none',
      INTEROP_MARKER_DIR: markers,
    });
    await runChecks();
  } catch (e) {
    failures.push('setup');
    process.stdout.write(`FAIL setup: ${describe(e)}\n${e?.stack ?? ''}\n`);
  } finally {
    await shutdown();
    if (failures.length) {
      for (const f of ['ts-interop-worker.log', 'rust-worker.log', 'ts-prio-worker.log', 'engine.log']) {
        const s = tail(join(work, f));
        if (s) process.stdout.write(`----- ${join(work, f)} (tail) -----\n${s}\n`);
      }
      process.stdout.write(`interop-ts: kept ${work} (rest.log, counters.json, markers)\n`);
    } else if (process.env.INTEROP_KEEP !== '1') {
      rmSync(work, { recursive: true, force: true });
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
