import { fill, h } from "./dom";
import { patchFrom } from "./history";
import type { App } from "./app";

type Kind = "int" | "float" | "text";
const FIELDS: { section: "rate_limit" | "health_check" | "retry"; name: string; kind: Kind; label: string }[] = [
  { section: "rate_limit", name: "capacity", kind: "int", label: "Rate limit capacity" },
  { section: "rate_limit", name: "refill_per_second", kind: "float", label: "Rate limit refill per second" },
  { section: "rate_limit", name: "failure_mode", kind: "text", label: "Rate limit failure mode" },
  { section: "retry", name: "max_attempts", kind: "int", label: "Retry max attempts" },
  { section: "retry", name: "per_try_timeout", kind: "text", label: "Retry per-try timeout" },
  { section: "health_check", name: "interval", kind: "text", label: "Health check interval" },
  { section: "health_check", name: "cooldown", kind: "text", label: "Breaker cooldown" },
  { section: "health_check", name: "slow_start", kind: "text", label: "Slow start" },
];

/** The configuration in force and the runtime PATCH form (C-MGMT-4, C-CONF-8). */
export function configPanel(app: App): HTMLElement {
  const inForce = h("pre", { id: "config-in-force", tabindex: 0, "aria-label": "Configuration in force" });
  const inputs = FIELDS.map((f) => {
    const id = `f-${f.section}-${f.name}`;
    const input = h("input", { id, name: id, type: "text", inputmode: f.kind === "text" ? undefined : "decimal", "data-mutation": true, autocomplete: "off" });
    return { f, input, row: h("div", { class: "field" }, h("label", { for: id }, f.label), input) };
  });
  let initial: Record<string, string> = {};
  const load = () => {
    const st = app.status;
    if (!st) return;
    fill(inForce, JSON.stringify({ rate_limit: st.rate_limit, health_check: st.health_check, retry: st.retry }, null, 2));
    initial = {};
    for (const { f, input } of inputs) {
      const sec = st[f.section] as Record<string, unknown>;
      const v = String(sec[f.name] ?? "");
      initial[input.id] = v;
      input.value = v;
    }
  };
  const form = h(
    "form",
    {
      id: "patch-form",
      onsubmit: (e: Event) => {
        e.preventDefault();
        const { patch, errors } = patchFrom(inputs.map(({ f, input }) => ({ section: f.section, name: f.name, kind: f.kind, value: input.value, initial: initial[input.id] ?? "" })));
        if (errors.length > 0) {
          app.say(`not sent: ${errors.join("; ")}`);
          return;
        }
        if (Object.keys(patch).length === 0) {
          app.say("nothing changed");
          return;
        }
        void app.mutate("PATCH", "/api/dashboard/config", patch, `PATCH ${JSON.stringify(patch)}`).then(load);
      },
    },
    h("div", { class: "fields" }, ...inputs.map((i) => i.row)),
    h("div", { class: "buttons" },
      h("button", { type: "submit", id: "patch-apply", "data-mutation": true }, "Apply changes"),
      h("button", { type: "button", id: "patch-reload", onclick: load }, "Reload values")),
  );
  const details = h("details", {}, h("summary", {}, "Configuration in force (JSON)"), inForce);
  const panel = h("section", { class: "panel config", "aria-labelledby": "config-h" }, h("h2", { id: "config-h" }, "Configuration"), form, details);
  // First fill once a status document is there.
  const wait = setInterval(() => {
    if (app.status) {
      load();
      clearInterval(wait);
    }
  }, 100);
  return panel;
}
