// The load profiles of `weir-load run` for users who run k6 (issue 17; load/README.md). The same
// profiles, knobs and hypotheses, as k6 thresholds: k6 exits non-zero when one fails.
//
//   k6 run -e TARGET_URL=http://127.0.0.1:8080/ -e PROFILE=smoke load/k6.js
//   k6 run -e PROFILE=throughput -e MIN_RPS=500 -e EXPECTED_BACKENDS=backend-1,backend-2 load/k6.js
//
// PROFILE: smoke, throughput (alias load), soak, spike, rate-limit, overload, recovery.
// Knobs: DURATION (seconds, main phase), CONNECTIONS (virtual users), RATE (requests per second:
// an arrival rate instead of closed-loop users), MIN_RPS (throughput, default 100),
// EXPECTED_BACKENDS (comma-separated: each must answer a success, no other may; a backend names
// itself by BACKEND_HEADER, default X-Backend, or a `Hostname: NAME` body line as
// traefik/whoami writes it). Checked without k6 by load/k6-check (CI).

import http from "k6/http";
import { Counter, Rate } from "k6/metrics";

const env = typeof __ENV === "undefined" ? {} : __ENV;
const TARGET_URL = env.TARGET_URL || "http://127.0.0.1:8080/";
const PROFILE = (env.PROFILE || "smoke") === "load" ? "throughput" : env.PROFILE || "smoke";
const MIN_RPS = Number(env.MIN_RPS || 100);
const BACKEND_HEADER = env.BACKEND_HEADER || "X-Backend";
const EXPECTED = (env.EXPECTED_BACKENDS || "")
  .split(",")
  .map((s) => s.trim())
  .filter((s) => s.length > 0);

// Main-phase length (seconds) and connections of each profile, as in weir-load (profile.rs).
const DEFAULTS = {
  smoke: [10, 4],
  throughput: [30, 64],
  soak: [1800, 32],
  spike: [10, 256],
  "rate-limit": [10, 4],
  overload: [10, 256],
  recovery: [10, 8],
};
if (!(PROFILE in DEFAULTS)) {
  throw new Error(`unknown PROFILE ${PROFILE}: one of ${Object.keys(DEFAULTS).join(", ")}, load`);
}
const SECS = Number(env.DURATION || DEFAULTS[PROFILE][0]);
const VUS = Number(env.CONNECTIONS || DEFAULTS[PROFILE][1]);
const RATE = env.RATE ? Number(env.RATE) : 0;

const ok200 = new Rate("status_200");
const got429 = new Counter("status_429");
const got503 = new Counter("status_503");
const other = new Counter("status_other");
const transition = new Counter("rate_limit_transition");
const stranger = new Counter("backend_unexpected");
const metricName = (b) => `backend_${b.replace(/[^A-Za-z0-9_]/g, "_")}`;
const perBackend = {};
for (const b of EXPECTED) {
  perBackend[b] = new Counter(metricName(b));
}

const s = (n) => `${Math.max(1, Math.round(n))}s`;

// A phase: closed-loop users, or an arrival rate when RATE is set (paced phases only).
function phase(name, vus, secs, start, paced) {
  const base = { exec: "hit", startTime: s(start), tags: { phase: name } };
  if (paced && RATE > 0) {
    return Object.assign(base, {
      executor: "constant-arrival-rate",
      rate: RATE,
      timeUnit: "1s",
      duration: s(secs),
      preAllocatedVUs: vus,
      maxVUs: vus * 4,
    });
  }
  return Object.assign(base, { executor: "constant-vus", vus: Math.max(1, vus), duration: s(secs) });
}

function scenarios() {
  const quiet = Math.max(1, Math.floor(VUS / 32));
  switch (PROFILE) {
    case "spike":
      return {
        before: phase("before", quiet, SECS / 4, 0, true),
        spike: phase("spike", VUS, SECS / 2, SECS / 4, false),
        after: phase("after", quiet, SECS / 4, (3 * SECS) / 4, true),
      };
    case "recovery":
      return {
        overload: phase("overload", VUS * 32, SECS / 2, 0, false),
        recovered: phase("recovered", VUS, SECS, SECS / 2, true),
      };
    default:
      return { [PROFILE]: phase(PROFILE, VUS, SECS, 0, true) };
  }
}

// The hypothesis of each profile (load/README.md), judged over the judged phases.
function thresholds() {
  const judged = PROFILE === "recovery" ? "status_200{phase:recovered}" : "status_200";
  const t = {};
  switch (PROFILE) {
    case "smoke":
    case "soak":
    case "recovery":
      t[judged] = ["rate>0.99"];
      break;
    case "throughput":
      t.status_200 = ["rate>0.99"];
      t.http_reqs = [`rate>=${MIN_RPS}`];
      break;
    case "rate-limit":
      t.status_200 = ["rate>0"];
      t.status_429 = ["count>0"];
      t.rate_limit_transition = ["count>0"];
      t.status_503 = ["count==0"];
      t.status_other = ["count==0"];
      break;
    case "overload":
    case "spike":
      t.status_200 = ["rate>0"];
      t.status_503 = ["count>0"];
      t.status_other = ["count==0"];
      break;
  }
  if (EXPECTED.length > 0) {
    for (const b of EXPECTED) {
      t[metricName(b)] = ["count>0"];
    }
    t.backend_unexpected = ["count==0"];
  }
  return t;
}

export const options = {
  scenarios: scenarios(),
  thresholds: thresholds(),
  // Statuses are judged by the thresholds above, not by k6's own failure notion.
  noConnectionReuse: false,
  summaryTrendStats: ["min", "med", "p(90)", "p(99)", "max"],
};

// The statuses each profile manages (anything else counts in status_other).
const MANAGED = { "rate-limit": [429], overload: [503], spike: [503] };

// Per virtual user: a 2xx seen, so that a later 429 is the switch to limiting.
let seenOk = false;

export function backendOf(res) {
  const h = res.headers[BACKEND_HEADER] || res.headers[BACKEND_HEADER.toLowerCase()];
  if (h) {
    return h;
  }
  const m = /Hostname: ([\w.-]+)/.exec(typeof res.body === "string" ? res.body : "");
  return m ? m[1] : "(unnamed)";
}

export function hit() {
  const res = http.get(TARGET_URL, { responseCallback: http.expectedStatuses({ min: 200, max: 599 }) });
  const st = res.status;
  ok200.add(st === 200);
  if (st === 429) {
    got429.add(1);
    if (seenOk) {
      transition.add(1);
    }
  } else if (st === 503) {
    got503.add(1);
  }
  if (st !== 200 && !(MANAGED[PROFILE] || []).includes(st)) {
    other.add(1);
  }
  if (st >= 200 && st < 300) {
    seenOk = true;
    if (EXPECTED.length > 0) {
      const b = backendOf(res);
      if (b in perBackend) {
        perBackend[b].add(1);
      } else {
        stranger.add(1);
      }
    }
  }
}

export default hit;
