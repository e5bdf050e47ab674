// A worker of the official TypeScript SDK for the interop suite. Registers the task set
// named by INTEROP_TS_SET (main | registrar | prio, see tasks.mjs) under the name
// INTEROP_TS_WORKER_NAME with INTEROP_TS_SLOTS slots, from the HATCHET_CLIENT_* environment.
// The SDK's worker handles SIGTERM itself (pauses the worker at the engine, drains, exits 0).
// Set `otel` turns on the SDK's OpenTelemetry instrumentation first (otel.mjs).

const set = process.env.INTEROP_TS_SET || 'main';
if (set === 'otel') await import('./otel.mjs');
const { SETS, hatchet } = await import('./tasks.mjs');

const name = process.env.INTEROP_TS_WORKER_NAME || `ts-${set}-worker`;
const slots = Number(process.env.INTEROP_TS_SLOTS || '20');

if (!SETS[set]) {
  console.error(`unknown task set ${set}`);
  process.exit(2);
}

const worker = await hatchet.worker(name, { workflows: SETS[set], slots });
console.log(`worker ${name}: set ${set}, ${slots} slots, starting`);
await worker.start();
