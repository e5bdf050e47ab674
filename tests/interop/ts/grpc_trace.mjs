// gRPC trace for the placement suite: when INTEROP_GRPC_TRACE names a file, every request of
// the types below that this process sends, and every response or stream message of the types
// below that it receives, is appended to that file as one JSON line
//   {"t": <ms>, "dir": "send" | "recv", "type": "<message>", "msg": <ts-proto toJSON, bytes decoded>}
// It wraps the `encode` / `decode` functions of the SDK's generated message objects, which
// nice-grpc captures when a client is created: import this module before the SDK client is
// built (HatchetClient.init()). Only top-level calls are logged (nested messages are encoded with
// a writer argument and decoded with a length argument).

import { appendFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const FILE = process.env.INTEROP_GRPC_TRACE;
const P = '@hatchet-dev/typescript-sdk/protoc/';

const SENT = {
  'dispatcher/dispatcher': ['WorkerRegisterRequest', 'UpsertWorkerLabelsRequest'],
  'v1/workflows': ['CreateWorkflowVersionRequest'],
  'v1/shared/trigger': ['TriggerWorkflowRequest'],
  'workflows/workflows': ['BulkTriggerWorkflowRequest'],
  'events/events': ['PushEventRequest'],
  'v1/dispatcher': ['DurableTaskRequest'],
};
const RECEIVED = {
  'dispatcher/dispatcher': [
    'WorkerRegisterResponse',
    'UpsertWorkerLabelsResponse',
    'AssignedAction',
    'WorkflowRunEvent',
  ],
  'v1/shared/trigger': [],
  'workflows/workflows': ['TriggerWorkflowResponse'],
  'v1/dispatcher': ['DurableTaskResponse'],
};

const text = new TextDecoder();

/** toJSON output, with every bytes field (base64 in toJSON) replaced by its UTF-8 text. */
function readable(raw, json) {
  if (raw instanceof Uint8Array) return { $bytes: text.decode(raw) };
  if (Array.isArray(json)) return json.map((j, i) => readable(raw?.[i], j));
  if (json && typeof json === 'object') {
    const out = {};
    for (const [k, v] of Object.entries(json)) out[k] = readable(raw?.[k], v);
    return out;
  }
  return json;
}

function write(dir, type, T, msg) {
  try {
    // worker_status is sent every second while a durable wait is pending: keep it out
    if (type === 'DurableTaskRequest' && msg?.workerStatus) return;
    const json = readable(msg, T.toJSON(msg));
    appendFileSync(FILE, JSON.stringify({ t: Date.now(), dir, type, msg: json }) + '\n');
  } catch (e) {
    appendFileSync(FILE, JSON.stringify({ t: Date.now(), dir, type, traceError: String(e) }) + '\n');
  }
}

if (FILE) {
  for (const [mod, names] of Object.entries(SENT)) {
    const m = require(P + mod);
    for (const name of names) {
      const T = m[name];
      const encode = T.encode;
      T.encode = function (message, writer) {
        if (writer === undefined) write('send', name, T, message);
        return encode.call(this, message, writer);
      };
    }
  }
  for (const [mod, names] of Object.entries(RECEIVED)) {
    const m = require(P + mod);
    for (const name of names) {
      const T = m[name];
      const decode = T.decode;
      T.decode = function (input, length) {
        const message = decode.call(this, input, length);
        if (length === undefined) write('recv', name, T, message);
        return message;
      };
    }
  }
}
