// The management API's documents (docs/management.md, openapi.json). The demo's WebAssembly
// world answers with the very same shapes: they come from weir-core's `mgmt` module in both.

export interface BackendStatus {
  id: string;
  url: string;
  pool: string;
  protocol: "http1" | "h2c" | "h2" | string;
  healthy: boolean;
  enabled: boolean;
  draining: boolean;
  available: boolean;
  circuit_state: "closed" | "open" | "half_open" | string;
  ejected: boolean;
  inflight: number;
  requests: number;
  passive_failures: number;
  slow_start_percent: number;
  /** The adaptive concurrency limit now (C-LOAD-4); null while adaptive concurrency is off. */
  concurrency_limit: number | null;
}

/** A pool fed by DNS (C-DISC-1): the name resolved and its last resolution. */
export interface DnsPoolStatus {
  name: string;
  port: number;
  interval: string;
  last_resolution_unix_ms: number | null;
  last_result: string | null;
}

export interface PoolStatus {
  name: string;
  strategy: string;
  backends: string[];
  dns?: DnsPoolStatus;
}

export interface Status {
  instance_id: string;
  ready: boolean;
  runtime_mutations_enabled: boolean;
  client_ip: string;
  strategy: string;
  pools: PoolStatus[];
  backends: BackendStatus[];
  bucket: {
    capacity: number;
    tokens: number;
    refill_per_second: number;
    storage: string;
    degraded: boolean;
  };
  rate_limit: Record<string, unknown> & { capacity: number; refill_per_second: number; failure_mode: string; enabled: boolean; dry_run: boolean };
  health_check: Record<string, unknown>;
  retry: Record<string, unknown> & {
    max_attempts: number;
    per_try_timeout: string;
    budget: { capacity: number; tokens: number; refill_per_second: number };
  };
  protection: {
    overload: {
      in_flight: number;
      queued: number;
      max_concurrent_requests: number;
      max_queue: number;
      queue_timeout: string;
    };
    routes: unknown[];
    backend_max_concurrent_requests: number;
  };
}

/** One attempt of a request (the demo knows each; live knows the count and the last backend). */
export interface Attempt {
  backend: string;
  outcome: string;
}

/** One request sent by the traffic generator, as the request log shows it. */
export interface RequestResult {
  at: number;
  status: number;
  backend: string | null;
  attempts: number | null;
  attempt_list: Attempt[] | null;
  request_id: string | null;
  duration_ms: number;
  error?: string;
}

export interface MutationResult {
  ok: boolean;
  status: number;
  body: unknown;
}

/** Knobs of one virtual backend (demo only). */
export interface Knobs {
  latency_ms: number;
  mode: "up" | "slow" | "503" | "reset" | "down";
}

/** Where the panels get their data: the management API (live) or the WebAssembly world (demo). */
export interface Source {
  readonly mode: "live" | "demo";
  status(): Promise<Status>;
  request(): Promise<RequestResult>;
  mutate(method: "POST" | "PATCH", path: string, body: unknown): Promise<MutationResult>;
  /** Demo only: the virtual backends' knobs. */
  knobs?: {
    get(id: string): Knobs;
    set(id: string, k: Knobs): void;
  };
  /** Demo only: completed requests the world ran on its own (steady traffic). */
  drainLog?(): RequestResult[];
  /** Demo only: steady traffic runs inside the world. */
  setSteady?(rps: number): void;
}
