import type { MutationResult, RequestResult, Source, Status } from "./types";

/**
 * The management API through weir's console server, which adds the bearer token (the browser
 * never has it). Mutations send JSON and the CSRF header (C-MGMT-2).
 */
export class LiveSource implements Source {
  readonly mode = "live" as const;

  constructor(private readonly base = "") {}

  async status(): Promise<Status> {
    const r = await fetch(`${this.base}/api/dashboard/status`, { cache: "no-store" });
    if (!r.ok) throw new Error(`status: HTTP ${r.status} ${await r.text()}`);
    return (await r.json()) as Status;
  }

  async request(): Promise<RequestResult> {
    const at = Date.now();
    const r = await fetch(`${this.base}/api/dashboard/request`, { cache: "no-store" });
    const body = (await r.json()) as Record<string, unknown>;
    if (!r.ok) {
      return {
        at,
        status: r.status,
        backend: null,
        attempts: null,
        attempt_list: null,
        request_id: null,
        duration_ms: Date.now() - at,
        error: String(body["message"] ?? r.statusText),
      };
    }
    return {
      at,
      status: Number(body["status"]),
      backend: (body["backend"] as string | null) ?? null,
      attempts: (body["attempts"] as number | null) ?? null,
      attempt_list: null,
      request_id: (body["request_id"] as string | null) ?? null,
      duration_ms: Number(body["duration_ms"]),
    };
  }

  async mutate(method: "POST" | "PATCH", path: string, body: unknown): Promise<MutationResult> {
    const r = await fetch(`${this.base}${path}`, {
      method,
      headers: { "Content-Type": "application/json", "X-Balancer-CSRF": "1" },
      body: JSON.stringify(body),
    });
    const text = await r.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      /* keep the text */
    }
    return { ok: r.ok, status: r.status, body: parsed };
  }
}
