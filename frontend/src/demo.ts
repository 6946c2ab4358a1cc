import init, { Demo } from "./wasm/weir_wasm.js";
import type { Knobs, MutationResult, RequestResult, Source, Status } from "./types";

interface Finished extends RequestResult {
  id: number;
  steady: boolean;
}

const MODES: Knobs["mode"][] = ["up", "slow", "503", "reset", "down"];

/**
 * The demo: weir-core's machines and the simulator's virtual backends, compiled to WebAssembly
 * (frontend/wasm, crate weir-wasm) and driven by the page's clock. Every decision shown is the
 * real core's; the management calls go through weir-core's `mgmt::handle` with the headers a
 * browser would send to the live console.
 */
export class DemoSource implements Source {
  readonly mode = "demo" as const;
  private readonly pending = new Map<number, (r: RequestResult) => void>();
  private steadyLog: RequestResult[] = [];
  private readonly knobState = new Map<string, Knobs>();
  private readonly t0 = performance.now();

  private constructor(private readonly world: Demo) {
    const tick = () => {
      this.advance();
      requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
    // Background tabs get no animation frames: keep virtual time moving anyway.
    setInterval(() => this.advance(), 200);
  }

  static async create(): Promise<DemoSource> {
    await init();
    const seed = BigInt(Math.floor(Math.random() * 2 ** 32));
    return new DemoSource(new Demo(8, seed));
  }

  private advance(): void {
    this.world.advance(performance.now() - this.t0);
    const done = JSON.parse(this.world.take_log()) as Finished[];
    for (const r of done) {
      r.at = Date.now();
      const resolve = this.pending.get(r.id);
      if (resolve) {
        this.pending.delete(r.id);
        resolve(r);
      } else {
        this.steadyLog.push(r);
      }
    }
  }

  async status(): Promise<Status> {
    this.advance();
    return JSON.parse(this.world.status()) as Status;
  }

  request(): Promise<RequestResult> {
    const id = this.world.request();
    return new Promise((resolve) => this.pending.set(id, resolve));
  }

  async mutate(method: "POST" | "PATCH", path: string, body: unknown): Promise<MutationResult> {
    const out = JSON.parse(this.world.management(method, path, JSON.stringify(body))) as { status: number; body: string };
    let parsed: unknown = out.body;
    try {
      parsed = JSON.parse(out.body);
    } catch {
      /* keep the text */
    }
    return { ok: out.status < 300, status: out.status, body: parsed };
  }

  readonly knobs = {
    get: (id: string): Knobs => this.knobState.get(id) ?? { latency_ms: 20, mode: "up" },
    set: (id: string, k: Knobs): void => {
      const index = Number(id.replace(/^\D+/, "")) - 1;
      this.knobState.set(id, k);
      this.world.set_backend(index, MODES.includes(k.mode) ? k.mode : "up", k.latency_ms);
    },
  };

  drainLog(): RequestResult[] {
    const out = this.steadyLog;
    this.steadyLog = [];
    return out;
  }

  setSteady(rps: number): void {
    this.world.set_steady(rps);
  }
}
