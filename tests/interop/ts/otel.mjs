// Turns on the official TypeScript SDK's OpenTelemetry instrumentation (HatchetInstrumentor,
// with its exporter to the engine's OTLP collector, connection from the HATCHET_CLIENT_*
// environment) in this process. Import it before anything that loads the SDK: the
// instrumentor patches the SDK's modules as they are required.

import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { registerInstrumentations } = require('@opentelemetry/instrumentation');
const { context, propagation, trace } = require('@opentelemetry/api');
const { W3CTraceContextPropagator } = require('@opentelemetry/core');
const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks');
const { HatchetInstrumentor } = require('@hatchet-dev/typescript-sdk/opentelemetry');

// What a Node service's OpenTelemetry setup (NodeSDK) registers, and the instrumentor's own
// provider (a BasicTracerProvider) does not: a context manager, without which a task's spans
// start traces of their own, and the W3C propagator, without which a worker reads no parent
// from a run's `traceparent`.
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
propagation.setGlobalPropagator(new W3CTraceContextPropagator());
registerInstrumentations({ instrumentations: [new HatchetInstrumentor()] });

/** The tracer a task makes its own spans with. */
export const tracer = trace.getTracer('ts-interop');

/** Exports every span ended so far (the collector's batch processor would wait its interval). */
export async function flushSpans() {
  const provider = trace.getTracerProvider();
  const real = typeof provider.getDelegate === 'function' ? provider.getDelegate() : provider;
  if (typeof real.forceFlush === 'function') await real.forceFlush();
}
