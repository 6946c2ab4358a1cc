import { fill, h } from "./dom";
import { History, latencyByBackend } from "./history";
import { PALETTE, lineChart } from "./chart";
import { configPanel } from "./config";
import { dnsPoolLines } from "./dns";
import type { Knobs, RequestResult, Source, Status } from "./types";

export const MUTATIONS_OFF =
  "Runtime mutations are disabled on this instance (management.runtime_mutations: false): change the configuration and roll it out declaratively.";

const LOG_SIZE = 200;

/** The console: the same panels over a live or a demo source. */
export class App {
  status: Status | null = null;
  readonly history = new History();
  log: RequestResult[] = [];
  private latency: [number, number, number][] = [];
  private steady: ReturnType<typeof setInterval> | null = null;
  private readonly el: Record<string, HTMLElement> = {};
  private busy = false;

  constructor(readonly source: Source, private readonly root: HTMLElement) {}

  /** Whether controls that change the instance are allowed. */
  get mutable(): boolean {
    return this.status?.runtime_mutations_enabled ?? false;
  }

  mount(): void {
    const section = (id: string, title: string, ...body: Node[]) => {
      const content = h("div", { class: "content", id: `${id}-content` });
      this.el[id] = content;
      return h("section", { class: `panel ${id}`, "aria-labelledby": `${id}-h` }, h("h2", { id: `${id}-h` }, title), ...body, content);
    };
    const message = h("p", { class: "message", id: "message", role: "status", "aria-live": "polite" });
    this.el["message"] = message;
    this.root.replaceChildren(
      section("backends", "Backends", this.countForm()),
      section("gauges", "Limits"),
      section("charts", "Last minutes"),
      section("traffic", "Traffic generator", this.trafficControls(), message),
      section("log", "Request log"),
      configPanel(this),
    );
  }

  say(text: string): void {
    const m = this.el["message"];
    if (m) m.textContent = text;
  }

  async refresh(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    try {
      const st = await this.source.status();
      this.status = st;
      this.history.add(Date.now(), st);
      if (this.source.drainLog) for (const r of this.source.drainLog()) this.record(r);
      this.render();
    } catch (e) {
      const facts = document.getElementById("facts");
      if (facts) facts.textContent = `cannot read the status: ${String(e)}`;
    } finally {
      this.busy = false;
    }
  }

  record(r: RequestResult): void {
    this.log.unshift(r);
    if (this.log.length > LOG_SIZE) this.log.length = LOG_SIZE;
    this.latency.push([r.at, r.duration_ms, r.status]);
    const from = Date.now() - this.history.windowMs;
    while (this.latency.length > 0 && (this.latency[0]?.[0] ?? 0) < from) this.latency.shift();
  }

  async mutate(method: "POST" | "PATCH", path: string, body: unknown, what: string): Promise<boolean> {
    if (!this.mutable) {
      this.say(MUTATIONS_OFF);
      return false;
    }
    const r = await this.source.mutate(method, path, body);
    const detail = typeof r.body === "object" && r.body !== null ? JSON.stringify(r.body) : String(r.body);
    this.say(r.ok ? `${what}: done (${r.status})` : `${what}: refused, HTTP ${r.status} ${detail}`);
    await this.refresh();
    return r.ok;
  }

  private render(): void {
    const st = this.status;
    if (!st) return;
    const facts = document.getElementById("facts");
    if (facts) {
      fill(
        facts,
        h("span", {}, "instance ", h("strong", { id: "instance-id" }, st.instance_id)),
        h("span", {}, st.ready ? "ready" : "not ready"),
        h("span", {}, `strategy ${st.strategy}`),
        h("span", {}, `client ${st.client_ip}`),
        // C-DISC-1: pools fed by DNS, with their last resolution.
        ...dnsPoolLines(st.pools).map((l) => h("span", { "data-dns-pool": l.pool, class: l.ok ? "" : "warn" }, `DNS ${l.text}`)),
      );
    }
    const banner = document.getElementById("banner");
    if (banner) fill(banner, st.runtime_mutations_enabled ? null : h("p", { class: "readonly", id: "readonly-reason" }, MUTATIONS_OFF));
    this.renderBackends(st);
    this.renderGauges(st);
    this.renderCharts(st);
    this.renderLog();
    // C-MGMT-3: with runtime mutations off every control that would change the instance is
    // disabled and points at the reason; nothing is sent (`mutate` refuses too).
    if (!st.runtime_mutations_enabled) {
      for (const el of this.root.querySelectorAll<HTMLButtonElement | HTMLInputElement | HTMLSelectElement>("[data-mutation]")) {
        el.disabled = true;
        el.setAttribute("aria-describedby", "readonly-reason");
      }
    } else {
      for (const el of this.root.querySelectorAll<HTMLButtonElement | HTMLInputElement | HTMLSelectElement>("#count, #count-apply, #patch-form [data-mutation]")) {
        el.disabled = false;
        el.removeAttribute("aria-describedby");
      }
    }
  }

  private countForm(): HTMLElement {
    const select = h("select", { id: "count", "data-mutation": true, "aria-label": "Enabled backends (the first n of the default pool)" });
    const form = h(
      "form",
      {
        class: "inline",
        onsubmit: (e: Event) => {
          e.preventDefault();
          void this.mutate("POST", "/api/dashboard/backends", { count: Number(select.value) }, `enable the first ${select.value}`);
        },
      },
      h("label", { for: "count" }, "Backends enabled "),
      select,
      h("button", { type: "submit", id: "count-apply", "data-mutation": true }, "Apply"),
    );
    this.el["count"] = select;
    return form;
  }

  private renderBackends(st: Status): void {
    const select = this.el["count"] as HTMLSelectElement | undefined;
    const defaults = st.pools[0]?.backends.length ?? st.backends.length;
    if (select && select.options.length !== defaults) {
      const enabled = st.backends.filter((b) => b.pool === (st.pools[0]?.name ?? "default") && b.enabled).length;
      fill(select, ...Array.from({ length: defaults }, (_, i) => h("option", { value: i + 1, selected: i + 1 === enabled }, i + 1)));
    }
    const lat = latencyByBackend(this.log.slice(0, 100));
    // The adaptive limit (C-LOAD-4) has a column only while adaptive concurrency is on.
    const adaptive = st.backends.some((b) => b.concurrency_limit !== null && b.concurrency_limit !== undefined);
    const rows = st.backends.map((b, i) => {
      const l = lat.get(b.id);
      const knobs = this.source.knobs?.get(b.id);
      const state = b.draining ? "draining" : b.enabled ? "enabled" : "disabled";
      // Enabling cancels a drain (C-MGMT-4): a draining backend offers "Enable".
      const on = b.enabled && !b.draining;
      return h(
        "tr",
        { "data-backend": b.id },
        h("th", { scope: "row" }, h("span", { class: "swatch", "data-color": i % PALETTE.length }), b.id, h("small", {}, b.url)),
        h(
          "td",
          { class: "actions" },
          h("button", { type: "button", "data-mutation": true, "data-action": on ? "disable" : "enable", disabled: !st.runtime_mutations_enabled, "aria-describedby": st.runtime_mutations_enabled ? undefined : "readonly-reason", onclick: () => void this.mutate("POST", `/api/dashboard/backends/${encodeURIComponent(b.id)}`, { enabled: !on }, `${on ? "disable" : "enable"} ${b.id}`) }, on ? "Disable" : "Enable", h("span", { class: "sr" }, ` ${b.id}`)),
          h("button", { type: "button", "data-mutation": true, "data-action": "drain", disabled: !st.runtime_mutations_enabled || b.draining || !b.enabled, "aria-describedby": st.runtime_mutations_enabled ? undefined : "readonly-reason", onclick: () => void this.mutate("POST", `/api/dashboard/backends/${encodeURIComponent(b.id)}/drain`, {}, `drain ${b.id}`) }, "Drain", h("span", { class: "sr" }, ` ${b.id}`)),
        ),
        knobs ? h("td", { class: "knobs" }, this.knobControls(b.id, knobs)) : null,
        h("td", { "data-protocol": b.protocol }, b.protocol),
        h(
          "td",
          {},
          h("span", { class: `pill ${b.healthy ? "ok" : "bad"}` }, b.healthy ? "healthy" : "unhealthy"),
          // Outlier detection took it out of selection although its probes pass (C-OUT-1).
          b.ejected ? h("span", { class: "pill bad", "data-ejected": "true", title: "ejected by outlier detection" }, "ejected") : null,
        ),
        h("td", {}, h("span", { class: `pill circuit-${b.circuit_state}`, "data-circuit": b.circuit_state }, b.circuit_state.replace("_", "-"))),
        h("td", { "data-state": state }, state),
        h("td", { class: "num" }, b.inflight),
        adaptive ? h("td", { class: "num", "data-concurrency-limit": b.concurrency_limit ?? "" }, b.concurrency_limit ?? "–") : null,
        h("td", { class: "num" }, `${b.slow_start_percent}%`),
        h("td", { class: "num" }, this.history.latest(b.id, "rps").toFixed(1)),
        h("td", { class: "num" }, this.history.latest(b.id, "eps").toFixed(1)),
        h("td", { class: "num" }, l ? `${l.p50.toFixed(0)} / ${l.p99.toFixed(0)}` : "–"),
      );
    });
    const head = ["Backend", "Actions", ...(this.source.knobs ? ["Virtual backend"] : []), "Protocol", "Health", "Circuit", "State", "In flight", ...(adaptive ? ["Concurrency limit"] : []), "Slow start", "req/s", "err/s", "p50 / p99 ms"];
    fill(
      this.el["backends"] as HTMLElement,
      h("div", { class: "scroll" }, h("table", { id: "backends-table" }, h("thead", {}, h("tr", {}, ...head.map((t) => h("th", { scope: "col" }, t)))), h("tbody", {}, ...rows))),
    );
  }

  private knobControls(id: string, k: Knobs): HTMLElement {
    const knobs = this.source.knobs;
    const mode = h(
      "select",
      { "aria-label": `Behaviour of ${id}`, "data-knob": "mode", onchange: (e: Event) => knobs?.set(id, { ...k, mode: (e.target as HTMLSelectElement).value as Knobs["mode"] }) },
      ...(["up", "slow", "503", "reset", "down"] as const).map((m) => h("option", { value: m, selected: m === k.mode }, { up: "up", slow: "slow", "503": "503s", reset: "resets", down: "down" }[m])),
    );
    const latency = h("input", {
      type: "number", min: 1, max: 5000, step: 1, value: k.latency_ms, "aria-label": `Latency of ${id} in ms`, "data-knob": "latency", class: "latency",
      onchange: (e: Event) => knobs?.set(id, { ...k, latency_ms: Math.max(1, Number((e.target as HTMLInputElement).value) || 1) }),
    });
    return h("span", { class: "knob" }, mode, latency, h("span", { "aria-hidden": "true" }, "ms"));
  }

  private renderGauges(st: Status): void {
    const gauge = (id: string, label: string, value: number, max: number, note: string) =>
      h("div", { class: "gauge", id: `gauge-${id}` },
        h("label", { for: `meter-${id}` }, label),
        h("meter", { id: `meter-${id}`, min: 0, max: Math.max(1, max), value, low: max * 0.2, high: max * 0.8, optimum: id === "gate" ? 0 : max }),
        h("span", { class: "gauge-value" }, `${value} / ${max}`), h("small", {}, note));
    const o = st.protection.overload;
    const rl = st.rate_limit;
    // Dry run (C-RATE-8): decisions are made and counted but a request over the limit passes.
    const mode = !rl.enabled ? "off" : rl.dry_run ? "dry run: counted, not enforced" : "enforced";
    fill(
      this.el["gauges"] as HTMLElement,
      h("p", { id: "rate-limit-mode", "data-dry-run": String(Boolean(rl.dry_run)) }, "Rate limiting: ", h("span", { class: `pill ${rl.enabled && !rl.dry_run ? "ok" : "warn"}` }, mode)),
      gauge("bucket", "Rate-limit bucket (your address)", st.bucket.tokens, st.bucket.capacity, `${st.bucket.refill_per_second}/s refill · ${st.bucket.storage}${st.bucket.degraded ? " · degraded" : ""}`),
      gauge("budget", "Retry budget", st.retry.budget.tokens, st.retry.budget.capacity, `${st.retry.budget.refill_per_second}/s refill`),
      gauge("gate", "Overload gate in flight", o.in_flight, o.max_concurrent_requests, `queued ${o.queued} / ${o.max_queue} · wait ≤ ${o.queue_timeout}`),
      h("button", {
        type: "button", id: "bucket-reset", "data-mutation": true, disabled: !st.runtime_mutations_enabled,
        onclick: () => void this.mutate("POST", "/api/dashboard/limit", { capacity: st.bucket.capacity }, "refill my bucket"),
      }, "Refill my bucket"),
    );
  }

  private renderCharts(st: Status): void {
    const now = Date.now();
    // The window grows to the last five minutes: until then the charts span what there is.
    const first = Math.min(this.history.samples[0]?.t ?? now, this.latency[0]?.[0] ?? now);
    const t0 = Math.min(now - 30_000, Math.max(now - this.history.windowMs, first));
    const samples = this.history.samples;
    const rps = st.backends.map((b) => ({ name: b.id, points: samples.filter((x) => b.id in x.rps).map((x) => [x.t, x.rps[b.id] ?? 0] as [number, number]) }));
    const errs = [
      { name: "errors/s", points: samples.map((x) => [x.t, Object.values(x.eps).reduce((a, b) => a + b, 0)] as [number, number]) },
      { name: "open circuits", points: samples.map((x) => [x.t, x.open] as [number, number]) },
    ];
    const lat = [{ name: "latency", points: this.latency.map(([t, d]) => [t, d] as [number, number]) }];
    const legend = (names: string[]) => h("ul", { class: "legend" }, ...names.map((n, i) => h("li", {}, h("span", { class: "swatch", "data-color": i % PALETTE.length }), n)));
    fill(
      this.el["charts"] as HTMLElement,
      h("figure", {}, lineChart(rps, t0, now, "Requests per second per backend", "req/s"), h("figcaption", {}, "Requests per second per backend"), legend(rps.map((r) => r.name))),
      h("figure", {}, lineChart(errs, t0, now, "Passive failures per second and open circuits", "count"), h("figcaption", {}, "Failures/s and open circuits"), legend(errs.map((r) => r.name))),
      h("figure", {}, lineChart(lat, t0, now, "Latency of the generator's requests in ms", "ms"), h("figcaption", {}, "Latency of the generator's requests (ms)")),
    );
  }

  private trafficControls(): HTMLElement {
    const send = async (n: number) => {
      const results = await Promise.all(Array.from({ length: n }, () => this.source.request()));
      for (const r of results) this.record(r);
      const last = results[results.length - 1];
      this.say(n === 1 && last ? `sent one: ${last.status} from ${last.backend ?? "weir"} in ${last.attempts ?? "?"} attempt(s)` : `sent ${n}`);
      await this.refresh();
    };
    const rate = h("select", { id: "steady-rate", "aria-label": "Steady rate (requests per second)" }, ...[1, 5, 20, 50].map((r) => h("option", { value: r, selected: r === 5 }, `${r}/s`)));
    const steady = h("button", { type: "button", id: "steady", "aria-pressed": "false" }, "Start steady");
    steady.addEventListener("click", () => {
      const on = this.steady === null && steady.getAttribute("aria-pressed") !== "true";
      steady.setAttribute("aria-pressed", String(on));
      steady.textContent = on ? "Stop steady" : "Start steady";
      if (this.steady !== null) clearInterval(this.steady);
      this.steady = null;
      if (this.source.setSteady) {
        this.source.setSteady(on ? Number(rate.value) : 0);
      } else if (on) {
        const every = 1000 / Number(rate.value);
        this.steady = setInterval(() => void this.source.request().then((r) => this.record(r)), every);
      }
    });
    return h(
      "div",
      { class: "buttons" },
      h("button", { type: "button", id: "send-one", onclick: () => void send(1) }, "Send one"),
      h("button", { type: "button", id: "burst", onclick: () => void send(20) }, "Burst of 20"),
      rate,
      steady,
    );
  }

  private renderLog(): void {
    const rows = this.log.slice(0, 15).map((r) =>
      h("tr", { "data-status": r.status },
        h("td", {}, new Date(r.at).toLocaleTimeString()),
        h("td", { class: `num ${r.status >= 500 ? "bad" : r.status >= 400 ? "warn" : ""}` }, r.status),
        h("td", {}, r.backend ?? "–"),
        h("td", { class: "num" }, r.attempts ?? "–"),
        h("td", {}, r.attempt_list ? r.attempt_list.map((a) => `${a.backend}: ${a.outcome}`).join(" → ") : r.error ?? ""),
        h("td", { class: "num" }, r.duration_ms.toFixed(1)),
        h("td", { class: "rid" }, r.request_id ?? ""),
      ));
    fill(
      this.el["log"] as HTMLElement,
      h("div", { class: "scroll" }, h("table", { id: "log-table" },
        h("thead", {}, h("tr", {}, ...["Time", "Status", "Backend", "Attempts", "Attempts detail", "ms", "Request id"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, ...rows))),
    );
  }
}
