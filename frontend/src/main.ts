import "./style.css";
import { App } from "./app";
import { LiveSource } from "./live";
import type { Source } from "./types";

async function start(): Promise<void> {
  const root = document.getElementById("app");
  if (!root) return;
  let source: Source;
  let period = 1000;
  if (import.meta.env.MODE === "demo") {
    const { DemoSource } = await import("./demo");
    source = await DemoSource.create();
    period = 250;
  } else {
    source = new LiveSource();
  }
  const mode = document.getElementById("mode");
  if (mode) mode.textContent = source.mode === "demo" ? "demo · the real weir-core in WebAssembly" : "live";
  document.body.dataset["mode"] = source.mode;
  const app = new App(source, root);
  app.mount();
  await app.refresh();
  setInterval(() => void app.refresh(), period);
}

void start();
