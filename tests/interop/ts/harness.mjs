// Process plumbing for a TypeScript-SDK interop script (used by placement.mjs): a work dir,
// the engine started as the other scenarios do (`-handshake-file F -grpc-port 0 -api-port 0`,
// stdin a pipe), child processes stopped by pid, REST reads with the engine token, and a
// trace of the SDK's REST calls.

import { spawn } from 'node:child_process';
import { appendFileSync, mkdirSync, mkdtempSync, openSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, log, rememberPid, stopChild, waitUntil } from './util.mjs';

export class Harness {
  constructor(prefix) {
    this.work = mkdtempSync(join(process.env.TMPDIR || tmpdir(), prefix));
    this.markers = join(this.work, 'markers');
    mkdirSync(this.markers);
    this.children = []; // [child, name], stopped in reverse order
    this.engine = null;
    this.hs = null;
  }

  /** Start the engine and wait for its handshake file (throws on failure). */
  async startEngine(bin) {
    // The real Hatchet engine (scripts/real-engine.sh env): already running, nothing to start.
    if (['1', 'true'].includes(process.env.HATCHET_REAL_ENGINE)) {
      const env = process.env;
      this.hs = {
        token: env.HATCHET_CLIENT_TOKEN,
        tenant_id: env.HATCHET_CLIENT_TENANT_ID,
        grpc_address: env.HATCHET_CLIENT_HOST_PORT,
        api_url: env.HATCHET_CLIENT_SERVER_URL,
      };
      return this.hs;
    }
    const hsPath = join(this.work, 'handshake.json');
    const child = spawn(bin, ['-handshake-file', hsPath, '-grpc-port', '0', '-api-port', '0'], {
      stdio: ['pipe', 'ignore', openSync(join(this.work, 'engine.log'), 'w')],
    });
    rememberPid(child.pid);
    this.engine = child;
    this.hs = await waitUntil(
      "the engine's handshake file",
      () => {
        if (child.exitCode !== null) throw new Error(`engine exited with ${child.exitCode}`);
        try {
          return JSON.parse(readFileSync(hsPath, 'utf8'));
        } catch {
          return null;
        }
      },
      20000,
    );
    return this.hs;
  }

  /** The HATCHET_CLIENT_* environment for the SDK (client and workers). */
  clientEnv() {
    const hs = this.hs;
    return {
      HATCHET_CLIENT_TOKEN: hs.token,
      HATCHET_CLIENT_HOST_PORT: hs.grpc_address,
      HATCHET_CLIENT_API_URL: hs.api_url,
      HATCHET_CLIENT_SERVER_URL: hs.api_url,
      HATCHET_CLIENT_TLS_STRATEGY: 'none',
      INTEROP_MARKER_DIR: this.markers,
    };
  }

  startChild(name, argv, env) {
    const out = openSync(join(this.work, `${name}.log`), 'w');
    const child = spawn(argv[0], argv.slice(1), {
      env: { ...process.env, ...env },
      stdio: ['ignore', out, out],
    });
    rememberPid(child.pid);
    this.children.push([child, name]);
    return child;
  }

  async stop(child) {
    const i = this.children.findIndex(([c]) => c === child);
    if (i < 0) return;
    const [, name] = this.children[i];
    this.children.splice(i, 1);
    await stopChild(child, name, 10000);
  }

  async stopAll() {
    for (const [child, name] of this.children.splice(0).reverse()) {
      await stopChild(child, name, 10000);
    }
  }

  /** Close the engine's stdin (it exits on EOF) and make sure it is gone. */
  async stopEngine() {
    const eng = this.engine;
    this.engine = null;
    if (!eng) return;
    try {
      eng.stdin.end();
      await waitUntil('the engine to exit', () => eng.exitCode !== null || eng.signalCode !== null, 10000, 100);
    } catch {
      // fall through to the signal
    } finally {
      await stopChild(eng, 'engine', 3000);
    }
  }

  async rest(method, path, body) {
    const res = await fetch(this.hs.api_url + path, {
      method,
      headers: {
        Authorization: `Bearer ${this.hs.token}`,
        ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(5000),
    });
    const txt = await res.text();
    if (!res.ok) throw new Error(`${method} ${path}: HTTP ${res.status} ${txt.slice(0, 300)}`);
    return txt ? JSON.parse(txt) : null;
  }

  restGet(path) {
    return this.rest('GET', path);
  }

  async workerRows() {
    return (await this.restGet(`/api/v1/tenants/${this.hs.tenant_id}/worker`)).rows || [];
  }

  /** The worker row (ACTIVE, with all `actions`) of the worker registered as `name`. */
  async waitRegistered(name, actions, proc, ms) {
    return waitUntil(
      `worker ${name} ACTIVE with ${actions.join(', ')}`,
      async () => {
        expect(proc.exitCode === null, `${name} exited with ${proc.exitCode}`);
        const rows = await this.workerRows();
        return rows.find(
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

  /** Log every REST call the SDK makes through `api` (an axios-based client) to rest.log. */
  traceRest(api) {
    const restLog = join(this.work, 'rest.log');
    const line = (cfg, status, data) => {
      const q = cfg.params ? ` query=${JSON.stringify(cfg.params)}` : '';
      const b = cfg.data
        ? ` body=${typeof cfg.data === 'string' ? cfg.data : JSON.stringify(cfg.data)}`
        : '';
      const d = data === undefined ? '' : ` -> ${JSON.stringify(data).slice(0, 600)}`;
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
}
