// Every documented endpoint called on a running weir, each answer checked against the OpenAPI
// document (proxy/src/openapi.json): the status is one it lists, the body matches its schema.
import { readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { check } from "./util.mjs";

const doc = JSON.parse(readFileSync(join(dirname(fileURLToPath(import.meta.url)), "../../proxy/src/openapi.json"), "utf8"));
const { MGMT, TOKEN } = process.env;

function resolve(s) {
  return s.$ref ? resolve(s.$ref.split("/").slice(1).reduce((o, k) => o[k], doc)) : s;
}

/** The errors of `v` against the schema subset the document uses ([] when it matches). */
export function validate(v, schema, at = "$") {
  const s = resolve(schema);
  if (s.oneOf) {
    const ok = s.oneOf.filter((alt) => validate(v, alt, at).length === 0).length;
    return ok === 1 ? [] : [`${at}: matches ${ok} of oneOf`];
  }
  const types = s.type === undefined ? null : [].concat(s.type);
  const kind = v === null ? "null" : Array.isArray(v) ? "array" : Number.isInteger(v) ? "integer" : typeof v;
  if (types && !types.includes(kind) && !(kind === "integer" && types.includes("number"))) return [`${at}: ${kind}, expected ${types}`];
  const errs = [];
  if (s.enum && !s.enum.includes(v)) errs.push(`${at}: ${JSON.stringify(v)} not in ${s.enum}`);
  if (typeof v === "number" && s.minimum !== undefined && v < s.minimum) errs.push(`${at}: below ${s.minimum}`);
  if (typeof v === "number" && s.maximum !== undefined && v > s.maximum) errs.push(`${at}: above ${s.maximum}`);
  if (kind === "array" && s.items) v.forEach((x, i) => errs.push(...validate(x, s.items, `${at}[${i}]`)));
  if (kind === "object") {
    for (const r of s.required ?? []) if (!(r in v)) errs.push(`${at}.${r}: missing`);
    for (const [k, x] of Object.entries(v)) {
      if (s.properties?.[k]) errs.push(...validate(x, s.properties[k], `${at}.${k}`));
      else if (s.additionalProperties === false) errs.push(`${at}.${k}: not documented`);
      else if (typeof s.additionalProperties === "object") errs.push(...validate(x, s.additionalProperties, `${at}.${k}`));
    }
  }
  return errs;
}

async function call(method, path, body, template = path) {
  const headers = { authorization: `Bearer ${TOKEN}` };
  if (body !== undefined) Object.assign(headers, { "content-type": "application/json", "x-balancer-csrf": "1" });
  const r = await fetch(`${MGMT}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const op = doc.paths[template][method.toLowerCase()];
  const documented = op.responses[String(r.status)];
  check(documented, `${method} ${path}: ${r.status} is a documented status`);
  const type = r.headers.get("content-type") ?? "";
  const [media, spec] = Object.entries(documented.content ?? {})[0] ?? [];
  if (media) check(type.startsWith(media), `${method} ${path}: content type ${type} is ${media}`);
  if (media === "application/json") {
    const errs = validate(await r.json(), spec.schema);
    check(errs.length === 0, `${method} ${path}: the body matches the schema ${errs.join("; ")}`);
  }
  return r.status;
}

const status = await (await fetch(`${MGMT}/api/dashboard/status`, { headers: { authorization: `Bearer ${TOKEN}` } })).json();
const id = status.backends[0].id;
await call("GET", "/healthz");
await call("GET", "/readyz");
await call("GET", "/metrics");
await call("GET", "/api/openapi.json");
await call("GET", "/api/dashboard/status");
await call("GET", "/api/dashboard/request");
await call("POST", "/api/dashboard/backends", { count: status.backends.length });
await call("POST", "/api/dashboard/backends", { count: 0 });
await call("POST", `/api/dashboard/backends/${id}`, { enabled: true }, "/api/dashboard/backends/{id}");
await call("POST", "/api/dashboard/backends/nope", { enabled: true }, "/api/dashboard/backends/{id}");
await call("POST", `/api/dashboard/backends/${id}/drain`, {}, "/api/dashboard/backends/{id}/drain");
await call("POST", `/api/dashboard/backends/${id}`, { enabled: true }, "/api/dashboard/backends/{id}");
await call("POST", "/api/dashboard/limit", { capacity: 1 });
await call("PATCH", "/api/dashboard/config", { retry: { max_attempts: 3 } });
await call("PATCH", "/api/dashboard/config", { retry: { max_attempts: -1 } });
const unauth = await fetch(`${MGMT}/api/dashboard/status`);
check(unauth.status === 401, "without the token: 401 (C-MGMT-1)");
console.log("openapi: every documented endpoint answers as documented");
