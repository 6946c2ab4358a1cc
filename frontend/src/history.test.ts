import { describe, expect, it } from "vitest";
import { History, latencyByBackend, patchFrom, quantile } from "./history";
import type { BackendStatus, Status } from "./types";

function backend(id: string, requests: number, failures: number, circuit = "closed"): BackendStatus {
  return { id, url: "", pool: "default", protocol: "http1", healthy: true, enabled: true, draining: false, available: true, circuit_state: circuit, ejected: false, inflight: 0, requests, passive_failures: failures, slow_start_percent: 100, concurrency_limit: null };
}

function status(backends: BackendStatus[]): Status {
  return { backends } as unknown as Status;
}

describe("History", () => {
  it("derives per-backend rates from counter deltas", () => {
    const h = new History();
    expect(h.add(1000, status([backend("a", 10, 0), backend("b", 0, 0)]))).toBeNull();
    const s = h.add(3000, status([backend("a", 30, 4), backend("b", 5, 0)]));
    expect(s?.rps).toEqual({ a: 10, b: 2.5 });
    expect(s?.eps).toEqual({ a: 2, b: 0 });
    expect(h.latest("a", "rps")).toBe(10);
  });

  it("gives no rate to a new backend or a counter that went down (a reload replaced it)", () => {
    const h = new History();
    h.add(0, status([backend("a", 50, 0)]));
    const s = h.add(1000, status([backend("a", 3, 0), backend("c", 9, 0)]));
    expect(s?.rps).toEqual({});
  });

  it("counts circuits that opened since the previous sample as ejections", () => {
    const h = new History();
    h.add(0, status([backend("a", 0, 0), backend("b", 0, 0, "open")]));
    const s = h.add(1000, status([backend("a", 0, 3, "open"), backend("b", 0, 0, "open")]));
    expect(s?.ejections).toBe(1);
    expect(s?.open).toBe(2);
  });

  it("keeps only the window", () => {
    const h = new History(10_000);
    for (let t = 0; t <= 30_000; t += 1000) h.add(t, status([backend("a", t, 0)]));
    expect(h.samples[0]?.t).toBe(20_000);
  });
});

describe("quantiles and latency", () => {
  it("uses the nearest rank", () => {
    expect(quantile([], 0.5)).toBeNull();
    expect(quantile([5, 1, 3], 0.5)).toBe(3);
    expect(quantile([1, 2, 3, 4, 5, 6, 7, 8, 9, 100], 0.99)).toBe(100);
  });

  it("groups by the backend that answered", () => {
    const log = [10, 20, 30].map((d, i) => ({ at: i, status: 200, backend: "a", attempts: 1, attempt_list: null, request_id: null, duration_ms: d }));
    expect(latencyByBackend(log).get("a")).toEqual({ p50: 20, p99: 30 });
  });
});

describe("patchFrom", () => {
  const f = (section: "rate_limit" | "retry", name: string, value: string, initial: string, kind: "int" | "float" | "text") => ({ section, name, value, initial, kind });

  it("sends only changed fields, typed", () => {
    const { patch, errors } = patchFrom([
      f("rate_limit", "capacity", "50", "100", "int"),
      f("rate_limit", "refill_per_second", "100", "100", "float"),
      f("retry", "per_try_timeout", "750ms", "5s", "text"),
    ]);
    expect(errors).toEqual([]);
    expect(patch).toEqual({ rate_limit: { capacity: 50 }, retry: { per_try_timeout: "750ms" } });
  });

  it("refuses what is not a number before sending", () => {
    const { patch, errors } = patchFrom([f("retry", "max_attempts", "two", "2", "int")]);
    expect(patch).toEqual({});
    expect(errors[0]).toContain("retry.max_attempts");
  });
});
