// t13's client: with the SDK's OpenTelemetry instrumentation on (otel.mjs, imported before the
// SDK), runs ts-traced once and pushes one `ts:traced` event, exports its spans, and prints
// one JSON line: {"run": <the run's id>, "event": <the event's id>}. A process of its own, so
// the traceparent the instrumentor adds to every run's metadata stays out of the other checks.

import { flushSpans } from './otel.mjs';

const { hatchet, traced } = await import('./tasks.mjs');
const nonce = process.env.INTEROP_TRACE_NONCE || 'n';
const ref = await traced.runNoWait({ nonce: `${nonce}-run`, note: 'direct' });
const run = await ref.getWorkflowRunId();
await ref.output;
const event = await hatchet.events.push('ts:traced', { nonce: `${nonce}-ev`, note: 'event' });
await flushSpans();
console.log(JSON.stringify({ run, event: event.eventId }));
process.exit(0);
