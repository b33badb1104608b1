// Shared by the end-to-end tests: the pinned OpenAI SDK, the binaries under test, and real
// pdsim/pdrouter processes on 127.0.0.1 that never outlive the test process.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, openSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer } from 'node:net';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
if (!existsSync(join(here, 'node_modules', 'openai'))) {
  throw new Error(
    'tests/e2e/node_modules/openai is missing: run scripts/test (or `cd tests/e2e && ' +
      'npm ci --no-audit --no-fund`) to install the pinned OpenAI SDK');
}
export const { default: OpenAI, APIError } = await import('openai');

export const MODEL = 'pdsim-e2e-model';
const buildDir = process.env.PDR_BUILD_DIR;
export const PDROUTER = process.env.PDROUTER ?? (buildDir && join(buildDir, 'router', 'pdrouter'));
export const PDSIM = process.env.PDSIM ?? (buildDir && join(buildDir, 'sim', 'pdsim'));

const dir = mkdtempSync(join(tmpdir(), 'pdr-e2e-'));
const procs = [];
// Never leave servers behind, whatever ends this process.
process.on('exit', () => {
  for (const p of procs) if (!p.exited) p.child.kill('SIGKILL');
});

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Starts `exe args --port-file F` with output to a log file; resolves to the bound port.
export async function startServer(name, exe, args) {
  assert.ok(exe && existsSync(exe), `${name}: executable not found (${exe}); set PDR_BUILD_DIR`);
  const portFile = join(dir, `${name}.port`);
  const logFile = join(dir, `${name}.log`);
  const fd = openSync(logFile, 'a');
  const child = spawn(exe, [...args, '--port-file', portFile], { stdio: ['ignore', fd, fd] });
  const entry = { name, child, logFile, exited: false };
  child.on('exit', () => { entry.exited = true; });
  procs.push(entry);
  const deadline = Date.now() + 10000;
  while (Date.now() < deadline) {
    if (existsSync(portFile)) {
      const port = Number.parseInt(readFileSync(portFile, 'utf8'), 10);
      if (port > 0) return port;
    }
    if (entry.exited) break;
    await sleep(20);
  }
  throw new Error(`${name} did not write its port file:\n${readFileSync(logFile, 'utf8')}`);
}

// SIGTERM to every server (SIGKILL after 3 s), their logs printed when the test failed (or
// PDR_E2E_SHOW_LOGS is set), the temp folder removed. For `after()`.
export async function stopServers() {
  for (const p of procs.reverse()) {
    if (!p.exited) p.child.kill('SIGTERM');
  }
  const deadline = Date.now() + 3000;
  while (procs.some((p) => !p.exited) && Date.now() < deadline) await sleep(20);
  for (const p of procs) if (!p.exited) p.child.kill('SIGKILL');
  if (process.exitCode || process.env.PDR_E2E_SHOW_LOGS) {
    for (const p of procs) console.error(`==== ${p.name}\n${readFileSync(p.logFile, 'utf8')}`);
  }
  rmSync(dir, { recursive: true, force: true });
}

// pdsim's debug API: GET `path`, or POST `body` as JSON; asserts 200.
export async function debug(port, path, body) {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, body === undefined ? {} : {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  assert.equal(res.status, 200, `${path} on :${port}`);
  return res.json();
}

// A loopback port that is free now, for a process that must be told its port before it starts.
// Chosen outside the kernel's ephemeral range (as net/common/loopback_port.hpp does): a port from
// that range can be taken by any outgoing connection on the host before the process binds it.
function ephemeralRange() {
  try {
    const [lo, hi] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8')
      .trim().split(/\s+/).map(Number);
    if (lo > 0 && hi >= lo) return [lo, hi];
  } catch { /* not Linux: the default below */ }
  return [32768, 60999];
}

function canListen(port) {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

export async function freePort() {
  const [lo, hi] = ephemeralRange();
  let [from, to] = [10000, lo - 1];
  if (65535 - hi > to - from) [from, to] = [hi + 1, 65535];
  if (to - from < 100) [from, to] = [1024, 65535];
  for (let i = 0; i < 500; i++) {
    const port = from + Math.floor(Math.random() * (to - from + 1));
    if (await canListen(port)) return port;
  }
  throw new Error('freePort: no free loopback port outside the ephemeral range');
}
