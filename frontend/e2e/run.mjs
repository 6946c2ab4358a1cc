// End-to-end: the console in a real chromium (playwright-core, Debian's /usr/bin/chromium),
// live against a real weir with real backends, and the demo from its built files (issue 15).
// Usage: node e2e/run.mjs   (WEIR_BIN: the weir binary, default ../target/debug/weir)
import { chromium } from "playwright-core";
import { readFileSync, readdirSync, writeFileSync, mkdirSync, existsSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";
import { backend, check, sleep, start, staticServer, tmp, until } from "./util.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const front = join(here, "..");
const WEIR = process.env.WEIR_BIN ?? join(front, "../target/debug/weir");
const TOKEN = `e2e-token-${Math.random().toString(36).slice(2)}-never-in-the-browser`;
// CI writes them under e2e/out (ignored); `SCREENSHOTS=screenshots` refreshes the committed ones.
const SHOTS = join(front, process.env.SCREENSHOTS ?? "e2e/out");
const axeSource = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
const children = [];

function config(backends, mutations, tune = (t) => t) {
  const shipped = readFileSync(join(front, "../config/weir.yaml"), "utf8");
  let text = shipped.slice(0, shipped.indexOf("\nbackends:") + 1);
  // Outlier detection judges every second and on a few requests, so an ejection shows soon.
  text = text.replace("health_check:\n", "health_check:\n  outlier:\n    interval: 1s\n    failure_percentage_request_volume: 5\n");
  text = text.replace("interval: 5s", "interval: 1s").replace("runtime_mutations: true", `runtime_mutations: ${mutations}`);
  text += "backends:\n" + backends.map((b) => `  - id: ${b.id}\n    url: http://127.0.0.1:${b.port}\n`).join("");
  return tune(text);
}

/** A real weir (`weir run`) over `backends` and its console (`weir console`). */
async function weir(backends, mutations, tune) {
  const dir = tmp("weir-e2e-");
  writeFileSync(join(dir, "weir.yaml"), config(backends, mutations, tune));
  const ready = join(dir, "ready.json");
  const env = { BALANCER_ADMIN_TOKEN: TOKEN, RUST_LOG: "warn" };
  const run = await start(WEIR, ["run", "--config", join(dir, "weir.yaml"), "--public-bind", "127.0.0.1:0", "--management-bind", "127.0.0.1:0", "--ready-file", ready, "--workers", "1"], env, null);
  children.push(run.child);
  await until("the ready file", () => existsSync(ready) && readFileSync(ready, "utf8").includes("pid"), 20000).catch((e) => { throw new Error(`${e.message}\n${run.output()}`); });
  const addrs = JSON.parse(readFileSync(ready, "utf8"));
  const con = await start(WEIR, ["console", "--listen", "127.0.0.1:0", "--management", `http://${addrs.management}`], env, (l) => l.match(/weir console: (http:\/\/\S+)/));
  children.push(con.child);
  const mgmt = async (path) => (await fetch(`http://${addrs.management}${path}`, { headers: { authorization: `Bearer ${TOKEN}` } })).json();
  return { public: `http://${addrs.public}`, console: con.match[1], mgmt };
}

async function browser() {
  return chromium.launchPersistentContext(tmp("weir-chromium-"), {
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
    viewport: { width: 1280, height: 900 },
  });
}

async function axe(page, what) {
  await page.evaluate(axeSource);
  const result = await page.evaluate(() => globalThis.axe.run(document, { resultTypes: ["violations"] }));
  const bad = result.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  for (const v of bad) console.log(`  axe ${v.impact}: ${v.id} ${v.help} (${v.nodes.map((n) => n.target.join(" ")).slice(0, 3).join(", ")})`);
  check(bad.length === 0, `${what}: axe-core finds no serious or critical violation (${result.violations.length} minor)`);
}

async function shots(page, name) {
  mkdirSync(SHOTS, { recursive: true });
  await page.setViewportSize({ width: 1280, height: 900 });
  await sleep(300);
  await page.screenshot({ path: join(SHOTS, `${name}-desktop.png`), fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  await sleep(300);
  await page.screenshot({ path: join(SHOTS, `${name}-phone.png`), fullPage: true });
  await page.setViewportSize({ width: 1280, height: 900 });
}

const row = (page, id) => page.locator(`tr[data-backend="${id}"]`);

async function live(ctx) {
  console.log("live: weir run + weir console, three real backends");
  const bs = [await backend("b1"), await backend("b2"), await backend("b3")];
  const w = await weir(bs, true);
  const served = () => bs.map((b) => b.served);
  const sent = [];
  const page = await ctx.newPage();
  const bodies = [];
  page.on("request", (r) => sent.push(r));
  page.on("response", async (r) => { try { bodies.push(await r.text()); } catch { /* redirects */ } });
  await page.goto(w.console);
  const status = await w.mgmt("/api/dashboard/status");
  await until("every backend healthy", async () => (await w.mgmt("/api/dashboard/status")).backends.every((b) => b.healthy), 20000);
  await page.waitForSelector("#instance-id");
  check((await page.textContent("#instance-id")) === status.instance_id, `the instance id ${status.instance_id} is shown`);
  const mutations = () => sent.filter((r) => r.method() !== "GET");

  // Send one: a real request through weir's data plane.
  const before = served().reduce((a, b) => a + b, 0);
  await page.click("#send-one");
  await page.waitForSelector('#log-table tbody tr[data-status="200"]');
  check(served().reduce((a, b) => a + b, 0) === before + 1, "send one: one backend served one more request");

  // Drain b2: it gets no new request afterwards.
  await row(page, "b2").locator('button[data-action="drain"]').click();
  await until("b2 draining", async () => (await w.mgmt("/api/dashboard/status")).backends.find((b) => b.id === "b2").draining);
  const m = mutations().at(-1);
  check(m.headers()["x-balancer-csrf"] === "1" && m.headers()["content-type"] === "application/json", "the drain was sent with the CSRF header and JSON (C-MGMT-2)");
  check(!("authorization" in m.headers()), "the browser sent no Authorization header");
  const b2 = bs[1].served;
  for (let i = 0; i < 12; i++) await fetch(`${w.public}/x`);
  check(bs[1].served === b2 && bs[0].served + bs[2].served > 0, "drain: b2 received no new request out of 12");

  // Enable b2 again (enabling clears the drain), then disable b1.
  await row(page, "b2").locator('button[data-action="enable"], button[data-action="disable"]').click();
  await until("b2 enabled", async () => { const b = (await w.mgmt("/api/dashboard/status")).backends.find((x) => x.id === "b2"); return b.enabled && !b.draining; });
  check(true, "enable b2: enabled and no longer draining");
  await row(page, "b1").locator('button[data-action="disable"]').click();
  await until("b1 disabled", async () => !(await w.mgmt("/api/dashboard/status")).backends.find((x) => x.id === "b1").enabled);
  const b1 = bs[0].served;
  for (let i = 0; i < 9; i++) await fetch(`${w.public}/x`);
  check(bs[0].served === b1, "disable b1: b1 received none of 9 requests");

  // Count selector: only the first one, then all three.
  await page.selectOption("#count", "1");
  await page.click("#count-apply");
  await until("count 1", async () => (await w.mgmt("/api/dashboard/status")).backends.map((b) => b.enabled).join() === "true,false,false");
  check(true, "count 1: only b1 enabled");
  await page.selectOption("#count", "3");
  await page.click("#count-apply");
  await until("count 3", async () => (await w.mgmt("/api/dashboard/status")).backends.every((b) => b.enabled));
  check(true, "count 3: every backend enabled");

  // Burst and steady traffic.
  const b0 = served().reduce((a, b) => a + b, 0);
  await page.click("#burst");
  await until("20 more requests", () => served().reduce((a, b) => a + b, 0) >= b0 + 20);
  check(true, "burst: the backends served 20 more requests");
  await page.selectOption("#steady-rate", "20");
  await page.click("#steady");
  const s0 = served().reduce((a, b) => a + b, 0);
  await until("steady traffic", () => served().reduce((a, b) => a + b, 0) >= s0 + 10);
  await page.click("#steady");
  await sleep(300);
  const s1 = served().reduce((a, b) => a + b, 0);
  await sleep(800);
  check(served().reduce((a, b) => a + b, 0) === s1, "steady: requests flowed, and stopped when stopped");

  // Refill the bucket (the console's own address).
  await until("bucket used", async () => (await w.mgmt("/api/dashboard/status")).bucket.tokens < 100, 5000).catch(() => null);
  await page.click("#bucket-reset");
  await until("bucket full", async () => { const st = await w.mgmt("/api/dashboard/status"); return st.bucket.tokens === st.bucket.capacity; });
  check(true, "refill my bucket: the bucket is full");

  // The PATCH form: a valid change applies; a bad one is refused by weir and changes nothing.
  await page.fill("#f-retry-max_attempts", "3");
  await page.fill("#f-rate_limit-capacity", "77");
  await page.click("#patch-apply");
  await until("patch applied", async () => { const st = await w.mgmt("/api/dashboard/status"); return st.retry.max_attempts === 3 && st.rate_limit.capacity === 77; });
  check(true, "PATCH: retry.max_attempts 3 and rate_limit.capacity 77 in force");
  await page.click("#patch-reload");
  await page.fill("#f-retry-per_try_timeout", "soon");
  await page.click("#patch-apply");
  await page.waitForFunction(() => document.getElementById("message")?.textContent?.includes("refused, HTTP 400"));
  check((await w.mgmt("/api/dashboard/status")).retry.per_try_timeout !== "soon", "PATCH with a bad duration: 400 shown, nothing changed");
  await page.fill("#f-retry-per_try_timeout", "");
  await page.click("#patch-reload");

  // Every backend speaks HTTP/1.1 here, and the table says so.
  check((await row(page, "b1").locator("[data-protocol]").textContent()) === "http1", "the backends table shows each backend's protocol");
  // Adaptive concurrency is off here: no limit column (C-LOAD-4); rate limiting is enforced, not
  // in dry run, and the limits panel says so (C-RATE-8).
  check((await page.locator("#backends-table [data-concurrency-limit]").count()) === 0, "adaptive concurrency off: no concurrency-limit column");
  check((await page.locator("#rate-limit-mode").getAttribute("data-dry-run")) === "false", "the limits panel shows the rate limit enforced, not in dry run");

  // b3 answers 500 to everything: outlier detection ejects it, and the table shows it (C-OUT-1).
  bs[2].status = 500;
  // Each interval needs 5 attempts on at least two backends to be judged: send in batches.
  await until("b3 ejected", async () => {
    await Promise.all(Array.from({ length: 30 }, () => fetch(`${w.public}/x`)));
    return (await w.mgmt("/api/dashboard/status")).backends.find((b) => b.id === "b3").ejected;
  }, 15000);
  await row(page, "b3").locator("[data-ejected]").waitFor({ timeout: 5000 });
  check((await row(page, "b1").locator("[data-ejected]").count()) === 0, "outlier ejection: b3 (all 500s) is shown ejected, b1 is not");
  bs[2].status = 200;

  // Charts have data; then screenshots and the accessibility check.
  await page.click("#burst");
  await sleep(2500);
  await shots(page, "live");
  await axe(page, "live");

  // The token never reaches the browser.
  const html = await page.content();
  check(!html.includes(TOKEN) && bodies.every((b) => !b.includes(TOKEN)), `the token is in no served page or API answer (${bodies.length} bodies)`);
  await page.close();
}

async function readonly(ctx) {
  console.log("live, runtime_mutations: false");
  const bs = [await backend("r1"), await backend("r2")];
  // This weir runs with adaptive concurrency on and the rate limit in dry run, so the console's
  // other states are seen too (C-LOAD-4, C-RATE-8).
  const w = await weir(bs, false, (t) => t
    .replace("  upstream:\n", "  upstream:\n    adaptive_concurrency:\n      enabled: true\n      min_limit: 5\n      max_limit: 40\n")
    .replace("rate_limit:\n  enabled: true\n", "rate_limit:\n  enabled: true\n  dry_run: true\n"));
  const page = await ctx.newPage();
  const sent = [];
  page.on("request", (r) => sent.push(r));
  await page.goto(w.console);
  await page.waitForSelector("#readonly-reason");
  const controls = await page.$$eval("[data-mutation]", (els) => els.map((e) => ({ id: e.id || e.textContent, disabled: e.disabled, why: e.getAttribute("aria-describedby") })));
  check(controls.length >= 12 && controls.every((c) => c.disabled && c.why === "readonly-reason"), `every one of ${controls.length} mutation controls is disabled with the reason`);
  check((await page.textContent("#readonly-reason")).includes("runtime_mutations: false"), "the reason names runtime_mutations: false (C-MGMT-3)");
  for (const sel of ["#count-apply", "#bucket-reset", "#patch-apply", 'button[data-action="drain"]']) await page.locator(sel).first().click({ force: true, timeout: 2000 }).catch(() => null);
  await sleep(500);
  check(sent.every((r) => r.method() === "GET"), "clicking them sends nothing");
  await page.click("#send-one");
  await page.waitForSelector('#log-table tbody tr[data-status="200"]');
  check(bs[0].served + bs[1].served === 1, "reads and the traffic generator still work");
  const status = await w.mgmt("/api/dashboard/status");
  const limits = [];
  for (const b of status.backends) limits.push([b.concurrency_limit, Number(await row(page, b.id).locator("[data-concurrency-limit]").getAttribute("data-concurrency-limit"))]);
  check(limits.length === 2 && limits.every(([want, shown]) => shown >= 5 && shown <= 40 && shown === want),
    `adaptive concurrency on: each backend's limit is shown, as weir reports it, within [5, 40] (${limits.map(([, s]) => s).join(", ")})`);
  check((await page.locator("#rate-limit-mode").getAttribute("data-dry-run")) === "true" && (await page.textContent("#rate-limit-mode")).toLowerCase().includes("dry run"),
    "the limits panel shows the rate limit in dry run");
  await shots(page, "live-readonly");
  await page.close();
}

async function demo(ctx) {
  console.log("demo: the built files, no server but a static one");
  const { url, server } = await staticServer(join(front, "dist-demo"), "/weir/");
  const page = await ctx.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  const t0 = Date.now();
  await page.goto(url);
  await page.waitForSelector('#backends-table tr[data-backend="backend-1"]');
  const paint = Date.now() - t0;
  const fcp = await page.evaluate(() => performance.getEntriesByName("first-contentful-paint")[0]?.startTime ?? null);
  const table = await page.evaluate(() => performance.now());
  console.log(`  demo first meaningful paint (backends table drawn): ${table.toFixed(0)} ms after navigation start (first contentful paint ${fcp?.toFixed(0)} ms; wall ${paint} ms)`);
  mkdirSync(SHOTS, { recursive: true });
  writeFileSync(join(SHOTS, "paint.txt"), `backends table: ${table.toFixed(0)} ms; first contentful paint: ${fcp?.toFixed(0)} ms\n`);
  await until("backend-1 healthy", async () => (await row(page, "backend-1").textContent()).includes("healthy") && !(await row(page, "backend-1").textContent()).includes("unhealthy"));
  await row(page, "backend-1").locator('select[data-knob="mode"]').selectOption("503");
  await page.selectOption("#steady-rate", "20");
  await page.click("#steady");
  await until("the breaker of backend-1 opens", async () => (await row(page, "backend-1").locator("[data-circuit]").getAttribute("data-circuit")) === "open", 20000);
  check(true, "demo: backend-1 answering 503 has its circuit opened by weir-core");
  await page.waitForSelector("#log-table tbody tr");
  const retried = await page.$$eval("#log-table tbody tr", (rows) => rows.some((r) => r.textContent.includes("backend-1: answered 503")));
  check(retried, "demo: the request log shows an attempt that failed with 503 and moved on");
  await sleep(1500);
  await shots(page, "demo");
  await axe(page, "demo");
  check(errors.length === 0, `demo: no page error (${errors.join("; ")})`);
  await page.close();
  server.close();
  return table;
}

async function main() {
  // The token is in no file of the built bundle.
  for (const f of readdirSync(join(front, "dist"), { recursive: true })) {
    if (f.endsWith(".js") || f.endsWith(".html")) check(!readFileSync(join(front, "dist", f), "utf8").includes("BALANCER_ADMIN_TOKEN"), `dist/${f} names no token variable`);
  }
  const ctx = await browser();
  try {
    await live(ctx);
    await readonly(ctx);
    await demo(ctx);
  } finally {
    await ctx.close();
    for (const c of children) c.kill("SIGTERM");
  }
  console.log("e2e: all checks passed");
  process.exit(0);
}

main().catch((e) => {
  console.error(e);
  for (const c of children) c.kill("SIGKILL");
  process.exit(1);
});
