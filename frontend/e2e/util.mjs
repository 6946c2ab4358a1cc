// Helpers of the end-to-end run: real processes, real sockets on 127.0.0.1, real chromium.
import { spawn } from "node:child_process";
import { createServer } from "node:http";
import { mkdtempSync, readFileSync, existsSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, extname, resolve } from "node:path";

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function tmp(prefix) {
  return mkdtempSync(join(tmpdir(), prefix));
}

/** A real HTTP backend on 127.0.0.1: counts the requests it serves (health probes apart) and
 * answers them with `b.status` (200 until a test sets another). */
export function backend(id) {
  const b = { id, served: 0, port: 0, server: null, status: 200 };
  b.server = createServer((req, res) => {
    if (req.url === "/health") {
      res.end("ok");
      return;
    }
    b.served += 1;
    res.statusCode = b.status;
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify({ backend: id, n: b.served }));
  });
  return new Promise((ok) => b.server.listen(0, "127.0.0.1", () => { b.port = b.server.address().port; ok(b); }));
}

/** A static file server for the demo's built files (what a project page would serve). */
export function staticServer(root, base = "/") {
  const types = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".wasm": "application/wasm", ".json": "application/json", ".svg": "image/svg+xml" };
  const server = createServer((req, res) => {
    let path = decodeURIComponent(new URL(req.url, "http://x").pathname);
    if (!path.startsWith(base)) { res.statusCode = 404; res.end(); return; }
    path = path.slice(base.length) || "index.html";
    const file = resolve(root, path);
    if (!file.startsWith(resolve(root)) || !existsSync(file) || statSync(file).isDirectory()) { res.statusCode = 404; res.end(); return; }
    res.setHeader("content-type", types[extname(file)] ?? "application/octet-stream");
    res.end(readFileSync(file));
  });
  return new Promise((ok) => server.listen(0, "127.0.0.1", () => ok({ server, url: `http://127.0.0.1:${server.address().port}${base}` })));
}

/** Start a process; resolves once `ready(line)` matched a line of its stdout. */
export function start(cmd, args, env, ready) {
  const child = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stderr.on("data", (d) => { out += d; });
  if (!ready) return Promise.resolve({ child, match: null, output: () => out });
  return new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`${cmd} ${args.join(" ")}: not ready in 20 s\n${out}`)), 20000);
    child.stdout.on("data", (d) => {
      out += d;
      for (const line of String(d).split("\n")) {
        const m = ready(line);
        if (m) { clearTimeout(timer); ok({ child, match: m, output: () => out }); }
      }
    });
    child.on("exit", (code) => { clearTimeout(timer); fail(new Error(`${cmd} exited ${code}\n${out}`)); });
  });
}

/** Poll `f` until it returns a truthy value (bounded: a failure says what was waited for). */
export async function until(what, f, ms = 15000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for: ${what}`);
    await sleep(100);
  }
}

export function check(cond, message) {
  if (!cond) throw new Error(`check failed: ${message}`);
  console.log(`  ok  ${message}`);
}
