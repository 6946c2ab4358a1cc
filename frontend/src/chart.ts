import { s } from "./dom";

export interface Series {
  name: string;
  points: [number, number][];
}

export const PALETTE = ["#0b62a4", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0e7490", "#a16207", "#be185d"];

/** A line chart over [t0, t1] as inline SVG (no library, no inline style: CSP-clean). */
export function lineChart(series: Series[], t0: number, t1: number, label: string, unit: string): SVGElement {
  const W = 600;
  const H = 160;
  const pad = 28;
  let max = 0;
  for (const se of series) for (const [, v] of se.points) max = Math.max(max, v);
  max = max <= 0 ? 1 : niceCeil(max);
  const x = (t: number) => pad + ((t - t0) / Math.max(1, t1 - t0)) * (W - pad - 6);
  const y = (v: number) => H - 18 - (v / max) * (H - 30);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label, class: "chart" });
  svg.append(s("title", {}, label));
  for (const frac of [0, 0.5, 1]) {
    const yy = y(max * frac);
    svg.append(s("line", { x1: pad, x2: W - 6, y1: yy, y2: yy, class: "grid" }));
    svg.append(s("text", { x: 2, y: yy + 4, class: "axis" }, fmt(max * frac)));
  }
  svg.append(s("text", { x: W - 6, y: H - 4, class: "axis", "text-anchor": "end" }, "now"));
  svg.append(s("text", { x: pad, y: H - 4, class: "axis" }, `${span(t1 - t0)} · ${unit}`));
  series.forEach((se, i) => {
    if (se.points.length === 0) return;
    const d = se.points.map(([t, v], j) => `${j === 0 ? "M" : "L"}${x(t).toFixed(1)},${y(v).toFixed(1)}`).join("");
    svg.append(s("path", { d, class: "line", stroke: PALETTE[i % PALETTE.length] ?? "#000" }));
  });
  return svg;
}

function niceCeil(v: number): number {
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function fmt(v: number): string {
  return v >= 10 ? String(Math.round(v)) : v.toFixed(1);
}

function span(ms: number): string {
  return ms >= 90_000 ? `last ${Math.round(ms / 60_000)} min` : `last ${Math.round(ms / 1000)} s`;
}
