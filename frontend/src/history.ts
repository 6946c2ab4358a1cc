import type { RequestResult, Status } from "./types";

/** One sample: per-backend rates derived from two successive status documents. */
export interface Sample {
  t: number;
  rps: Record<string, number>;
  eps: Record<string, number>;
  open: number;
  ejections: number;
}

/**
 * A window of samples (the last `windowMs`), built from the counters of successive status
 * documents: `requests` and `passive_failures` are monotonic per backend, so a rate is the
 * difference over the time between the two documents. A backend that is new, or whose counter
 * went down (its state was replaced by a reload), gets no rate for that sample.
 */
export class History {
  samples: Sample[] = [];
  private prev: { t: number; s: Status } | null = null;

  constructor(readonly windowMs = 5 * 60_000) {}

  add(t: number, s: Status): Sample | null {
    const prev = this.prev;
    this.prev = { t, s };
    if (!prev || t <= prev.t) return null;
    const dt = (t - prev.t) / 1000;
    const before = new Map(prev.s.backends.map((b) => [b.id, b]));
    const sample: Sample = { t, rps: {}, eps: {}, open: 0, ejections: 0 };
    for (const b of s.backends) {
      if (b.circuit_state === "open") sample.open += 1;
      const p = before.get(b.id);
      if (!p) continue;
      if (b.circuit_state === "open" && p.circuit_state !== "open") sample.ejections += 1;
      if (b.requests >= p.requests) sample.rps[b.id] = (b.requests - p.requests) / dt;
      if (b.passive_failures >= p.passive_failures)
        sample.eps[b.id] = (b.passive_failures - p.passive_failures) / dt;
    }
    this.samples.push(sample);
    const from = t - this.windowMs;
    while (this.samples.length > 0 && (this.samples[0]?.t ?? 0) < from) this.samples.shift();
    return sample;
  }

  /** The latest rate of `id` (0 without one). */
  latest(id: string, what: "rps" | "eps"): number {
    const last = this.samples[this.samples.length - 1];
    return last?.[what][id] ?? 0;
  }
}

/** The `q`-quantile (0..1) of `values` by nearest rank; `null` for none. */
export function quantile(values: number[], q: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.max(1, Math.ceil(q * sorted.length));
  return sorted[rank - 1] ?? null;
}

/** p50 and p99 of the recent requests each backend answered (the last one of each request). */
export function latencyByBackend(log: RequestResult[]): Map<string, { p50: number; p99: number }> {
  const per = new Map<string, number[]>();
  for (const r of log) {
    if (!r.backend) continue;
    const list = per.get(r.backend) ?? [];
    list.push(r.duration_ms);
    per.set(r.backend, list);
  }
  const out = new Map<string, { p50: number; p99: number }>();
  for (const [id, list] of per) {
    out.set(id, { p50: quantile(list, 0.5) ?? 0, p99: quantile(list, 0.99) ?? 0 });
  }
  return out;
}

/** The changed fields of a PATCH form: only what the operator changed is sent (null-free). */
export function patchFrom(
  fields: { section: "rate_limit" | "health_check" | "retry"; name: string; value: string; initial: string; kind: "int" | "float" | "text" }[],
): { patch: Record<string, Record<string, unknown>>; errors: string[] } {
  const patch: Record<string, Record<string, unknown>> = {};
  const errors: string[] = [];
  for (const f of fields) {
    const v = f.value.trim();
    if (v === f.initial.trim() || v === "") continue;
    let value: unknown = v;
    if (f.kind === "int") {
      if (!/^\d+$/.test(v)) {
        errors.push(`${f.section}.${f.name}: a whole number`);
        continue;
      }
      value = Number(v);
    } else if (f.kind === "float") {
      const n = Number(v);
      if (!Number.isFinite(n)) {
        errors.push(`${f.section}.${f.name}: a number`);
        continue;
      }
      value = n;
    }
    (patch[f.section] ??= {})[f.name] = value;
  }
  return { patch, errors };
}
