import { describe, expect, it } from "vitest";
import { dnsPoolLines } from "./dns";
import type { PoolStatus } from "./types";

describe("dnsPoolLines", () => {
  it("describes DNS pools only, with their last resolution (C-DISC-1)", () => {
    const pools: PoolStatus[] = [
      { name: "default", strategy: "round_robin", backends: ["a"] },
      {
        name: "api",
        strategy: "round_robin",
        backends: ["api/10.0.0.1:8080", "api/10.0.0.2:8080"],
        dns: { name: "api.internal", port: 8080, interval: "5s", last_resolution_unix_ms: 10_000, last_result: "servfail" },
      },
      { name: "new", strategy: "round_robin", backends: [], dns: { name: "new.internal", port: 80, interval: "5s", last_resolution_unix_ms: null, last_result: null } },
    ];
    const lines = dnsPoolLines(pools, 13_000);
    expect(lines.map((l) => l.pool)).toEqual(["api", "new"]);
    expect(lines[0]?.text).toBe("api: api.internal:8080 every 5s, 2 addresses, last resolution servfail, 3 s ago (last good set kept)");
    expect(lines[0]?.ok).toBe(false);
    expect(lines[1]?.text).toBe("new: new.internal:80 every 5s, 0 addresses, last resolution not resolved yet");
  });
});
