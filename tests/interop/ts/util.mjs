// Small helpers for the TypeScript-SDK interop suite: bounded waits, counted checks (the
// `PASS <id> ...` / `FAIL <id> ...` lines run.sh counts), and children stopped by pid.

import { appendFileSync, readFileSync } from 'node:fs';

export const failures = [];

export function log(msg) {
  const t = new Date().toISOString().slice(11, 19);
  process.stdout.write(`[${t}] ${msg}\n`);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Tell run.sh's trap what to kill if this script dies without cleaning up. */
export function rememberPid(pid) {
  const f = process.env.INTEROP_PIDFILE;
  if (f) appendFileSync(f, `${pid}\n`);
}

/** `pid` is reaped by us: run.sh must not signal that id any more. */
export function forgetPid(pid) {
  const f = process.env.INTEROP_PIDFILE;
  if (f) appendFileSync(f, `done ${pid}\n`);
}

export class Timeout extends Error {}

/** Resolve with `promise`, or reject after `ms` (SDK calls have no deadline of their own). */
export function bounded(promise, ms, what = 'the call') {
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Timeout(`no answer for ${what} within ${ms / 1000}s`)), ms);
  });
  return Promise.race([Promise.resolve(promise), limit]).finally(() => clearTimeout(timer));
}

/** Poll `cond` (sync or async) until it returns a truthy value; throw after `ms`. */
export async function waitUntil(what, cond, ms, everyMs = 200) {
  const deadline = Date.now() + ms;
  let last;
  while (Date.now() < deadline) {
    try {
      const v = await cond();
      if (v) return v;
      last = undefined;
    } catch (e) {
      if (e instanceof AssertionError) throw e;
      last = e;
    }
    await sleep(everyMs);
  }
  const why = last ? ` (last error: ${describe(last)})` : '';
  throw new Timeout(`timed out after ${ms / 1000}s waiting for ${what}${why}`);
}

export class AssertionError extends Error {}

export function expect(cond, msg) {
  if (!cond) throw new AssertionError(msg);
}

/** A readable one-line account of an error, including what axios knows about a REST call. */
export function describe(e) {
  if (e === null || e === undefined) return String(e);
  if (Array.isArray(e)) return `[${e.map(describe).join('; ')}]`;
  if (typeof e !== 'object') return String(e);
  const parts = [`${e.constructor?.name ?? 'Error'}: ${e.message ?? JSON.stringify(e)}`];
  const res = e.response ?? e.cause?.response;
  const cfg = e.config ?? e.cause?.config;
  if (cfg?.method && cfg?.url) parts.push(`[${cfg.method.toUpperCase()} ${cfg.url}]`);
  if (res?.status) parts.push(`HTTP ${res.status} ${JSON.stringify(res.data ?? '').slice(0, 200)}`);
  if (e.code !== undefined && !res) parts.push(`code ${e.code}`);
  return parts.join(' ');
}

/** Run one counted check, bounded by `ms`; prints `PASS id (..s)` or `FAIL id: why`. */
/**
 * Run one counted check. On the real engine a failed check runs once more, reported as
 * `FLAKY id: why` first (run.sh lists those at the end): its read models and caches settle
 * within seconds, not at once. Checks listed as known failures there
 * (INTEROP_REAL_ENGINE_KNOWN) get one attempt, and on our engine every check gets one.
 */
export async function check(id, title, ms, fn) {
  // TS_ONLY=t17,t21 runs only those checks (for working on one; CI runs them all).
  const only = (process.env.TS_ONLY ?? '').split(',').filter(Boolean);
  if (only.length && !only.includes(id)) return true;
  const t0 = Date.now();
  const known = (process.env.INTEROP_REAL_ENGINE_KNOWN ?? '').split(/\s+/);
  const attempts = process.env.HATCHET_REAL_ENGINE === '1' && !known.includes(id) ? 2 : 1;
  for (let attempt = 1; attempt <= attempts; attempt++) {
    try {
      await bounded(fn(), ms, `check ${id}`);
      break;
    } catch (e) {
      if (attempt < attempts) {
        process.stdout.write(`FLAKY ${id} ${title}: first attempt: ${describe(e)}\n`);
        continue;
      }
      failures.push(id);
      process.stdout.write(`FAIL ${id} ${title}: ${describe(e)}\n`);
      return false;
    }
  }
  process.stdout.write(`PASS ${id} ${title} (${((Date.now() - t0) / 1000).toFixed(1)}s)\n`);
  return true;
}

/** SIGTERM a child we started (by pid), SIGKILL that pid after `graceMs`, then forget it. */
export async function stopChild(child, name, graceMs) {
  if (!child) return;
  const exited = () => child.exitCode !== null || child.signalCode !== null;
  if (!exited()) {
    try {
      process.kill(child.pid, 'SIGTERM');
    } catch {}
    const deadline = Date.now() + graceMs;
    while (!exited() && Date.now() < deadline) await sleep(100);
    if (!exited()) {
      log(`${name} ignored SIGTERM for ${graceMs / 1000}s, killing it`);
      try {
        process.kill(child.pid, 'SIGKILL');
      } catch {}
      const d2 = Date.now() + 5000;
      while (!exited() && Date.now() < d2) await sleep(100);
    }
  }
  forgetPid(child.pid);
}

export function tail(path, n = 3000) {
  try {
    const s = readFileSync(path, 'utf8');
    return s.slice(-n);
  } catch {
    return '';
  }
}
