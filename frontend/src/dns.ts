import type { PoolStatus } from "./types";

/** One line per pool fed by DNS (C-DISC-1): its name, what it resolves, how many addresses it
 *  holds and its last resolution (a failure keeps the last good set, so it says so). */
export function dnsPoolLines(pools: PoolStatus[], now: number = Date.now()): { pool: string; text: string; ok: boolean }[] {
  return pools.flatMap((p) => {
    const d = p.dns;
    if (!d) return [];
    const result = d.last_result ?? "not resolved yet";
    const ok = d.last_result === "ok";
    const when = d.last_resolution_unix_ms === null ? "" : `, ${Math.max(0, Math.round((now - d.last_resolution_unix_ms) / 1000))} s ago`;
    const kept = ok || d.last_result === null ? "" : " (last good set kept)";
    return [{ pool: p.name, ok, text: `${p.name}: ${d.name}:${d.port} every ${d.interval}, ${p.backends.length} addresses, last resolution ${result}${when}${kept}` }];
  });
}
