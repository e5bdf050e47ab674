// A worker of the official TypeScript SDK for the placement suite. Env:
//   INTEROP_TS_SET           task set of placement_tasks.mjs (labels | sticky | misc)
//   INTEROP_TS_WORKER_NAME   worker name
//   INTEROP_TS_SLOTS         default slots (20)
//   INTEROP_TS_DURABLE_SLOTS durable slots (only when set)
//   INTEROP_TS_LABELS        worker labels, a JSON object of string / int values
// Run-time label changes: the suite writes <markers>/ctl-<name>-<seq>.json ({"labels": {...}});
// this process applies each file once, in order, with the SDK's worker.upsertLabels(labels) and
// answers with <markers>/ctl-<name>-<seq>.done ({"labels": worker.getLabels()}).

import { existsSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { SETS, hatchet, marker } from './placement_tasks.mjs';

const set = process.env.INTEROP_TS_SET || 'misc';
const name = process.env.INTEROP_TS_WORKER_NAME || `tsp-${set}-worker`;
const slots = Number(process.env.INTEROP_TS_SLOTS || '20');
const durableSlots = process.env.INTEROP_TS_DURABLE_SLOTS ? Number(process.env.INTEROP_TS_DURABLE_SLOTS) : undefined;
const labels = process.env.INTEROP_TS_LABELS ? JSON.parse(process.env.INTEROP_TS_LABELS) : undefined;

if (!SETS[set]) {
  console.error(`unknown task set ${set}`);
  process.exit(2);
}

// The SDK's upsertLabels does not await its UpsertWorkerLabels call: a failing call would be an
// unhandled rejection, which ends a node process. Keep the worker alive and say so.
process.on('unhandledRejection', (e) => {
  console.error(`unhandledRejection: ${e?.stack ?? e}`);
});

const worker = await hatchet.worker(name, {
  workflows: SETS[set],
  slots,
  ...(durableSlots ? { durableSlots } : {}),
  ...(labels ? { labels } : {}),
});
console.log(`worker ${name}: set ${set}, ${slots} slots, durable ${durableSlots}, labels ${JSON.stringify(labels)}`);

const markersDir = marker('.');
const prefix = `ctl-${name}-`;
let busy = false;
setInterval(async () => {
  if (busy) return;
  busy = true;
  try {
    const pending = readdirSync(markersDir)
      .filter((f) => f.startsWith(prefix) && f.endsWith('.json'))
      .map((f) => f.slice(prefix.length, -'.json'.length))
      .filter((seq) => !existsSync(marker(`${prefix}${seq}.done`)))
      .sort((a, b) => Number(a) - Number(b));
    for (const seq of pending) {
      const { labels: next } = JSON.parse(readFileSync(marker(`${prefix}${seq}.json`), 'utf8'));
      const now = await worker.upsertLabels(next);
      console.log(`upsertLabels(${JSON.stringify(next)}) -> ${JSON.stringify(now)}`);
      writeFileSync(marker(`${prefix}${seq}.done`), JSON.stringify({ labels: worker.getLabels() }));
    }
  } catch (e) {
    console.error(`label control: ${e?.stack ?? e}`);
  } finally {
    busy = false;
  }
}, 200);

await worker.start();
