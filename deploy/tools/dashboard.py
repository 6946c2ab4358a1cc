"""Generates observability/grafana-weir.json, weir's Grafana dashboard (committed; deploy/check
runs `dashboard.py --check` so the JSON and this file cannot drift). Every query names only
metrics weir exports: adapter-tokio/tests/deploy_metrics.rs checks them against a running weir.

  dashboard.py --check | --write
"""
import json
import pathlib
import sys

TARGET = pathlib.Path(__file__).resolve().parent.parent / "observability" / "grafana-weir.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'job=~"$job", instance=~"$instance"'
RI = "$__rate_interval"


def panel(pid, title, kind, targets, x, y, w=12, h=8, unit=None, desc="", extra=None):
    p = {
        "id": pid,
        "type": kind,
        "title": title,
        "description": desc,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "targets": [
            {"refId": chr(65 + i), "datasource": DS, "expr": e, "legendFormat": leg}
            for i, (e, leg) in enumerate(targets)
        ],
        "fieldConfig": {"defaults": {"unit": unit or "short"}, "overrides": []},
        "options": {},
    }
    if extra:
        p.update(extra)
    return p


def row(pid, title, y):
    return {"id": pid, "type": "row", "title": title, "collapsed": False,
            "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}, "panels": []}


def panels():
    q = []
    q.append(row(1, "Traffic", 0))
    q.append(panel(2, "Requests per second by backend", "timeseries", [
        (f'sum by (backend) (rate(load_balancer_upstream_attempts_total{{{SEL}}}[{RI}]))', "{{backend}}"),
    ], 0, 1, unit="reqps", desc="Upstream attempts per backend (retries count once each)."))
    q.append(panel(3, "Public responses by status", "timeseries", [
        (f'sum by (code) (rate(load_balancer_http_requests_total{{{SEL}, listener="public"}}[{RI}]))', "{{code}}"),
    ], 12, 1, unit="reqps"))
    q.append(panel(4, "Errors by backend and outcome", "timeseries", [
        (f'sum by (backend, outcome) (rate(load_balancer_upstream_attempts_total{{{SEL}, outcome!="success", outcome!="cancelled"}}[{RI}]))',
         "{{backend}} {{outcome}}"),
    ], 0, 9, unit="reqps", desc="failure_status, connect_error, transport_error, timeout."))
    q.append(panel(5, "5xx ratio (public)", "stat", [
        (f'sum(rate(load_balancer_http_requests_total{{{SEL}, listener="public", code=~"5.."}}[{RI}])) / '
         f'sum(rate(load_balancer_http_requests_total{{{SEL}, listener="public"}}[{RI}]))', "5xx"),
    ], 12, 9, unit="percentunit"))
    q.append(row(6, "Latency", 17))
    q.append(panel(7, "Response time percentiles (public)", "timeseries", [
        (f'histogram_quantile({p}, sum by (le) (rate(load_balancer_http_request_duration_seconds_bucket{{{SEL}, listener="public"}}[{RI}])))', f"p{int(p * 100)}")
        for p in (0.5, 0.9, 0.99)
    ], 0, 18, unit="s"))
    q.append(panel(8, "p99 upstream time by backend", "timeseries", [
        (f'histogram_quantile(0.99, sum by (backend, le) (rate(load_balancer_upstream_duration_seconds_bucket{{{SEL}}}[{RI}])))', "{{backend}}"),
    ], 12, 18, unit="s"))
    q.append(row(9, "Backends and circuits", 26))
    q.append(panel(10, "Backend available (healthy, circuit closed, enabled)", "state-timeline", [
        (f'max by (backend) (load_balancer_backend_available{{{SEL}}})', "{{backend}}"),
    ], 0, 27, desc="0: unhealthy, circuit open, disabled or draining; 1: takes requests."))
    q.append(panel(11, "Panic selections (every circuit open)", "timeseries", [
        (f'sum by (backend) (rate(load_balancer_panic_selections_total{{{SEL}}}[{RI}]))', "{{backend}}"),
    ], 12, 27, unit="reqps"))
    q.append(panel(12, "Health checks by result", "timeseries", [
        (f'sum by (backend, result) (rate(load_balancer_health_checks_total{{{SEL}}}[{RI}]))', "{{backend}} {{result}}"),
    ], 0, 35, unit="ops"))
    q.append(panel(13, "In-flight requests by backend", "timeseries", [
        (f'sum by (backend) (load_balancer_backend_inflight_requests{{{SEL}}})', "{{backend}}"),
    ], 12, 35))
    q.append(row(14, "Protection", 43))
    q.append(panel(15, "Retry budget tokens", "timeseries", [
        (f'min by (instance) (load_balancer_retry_budget_tokens{{{SEL}}})', "{{instance}}"),
    ], 0, 44, desc="Tokens left in the process-wide retry budget (C-RETRY-7)."))
    q.append(panel(16, "Global gate: in flight and queued", "timeseries", [
        (f'sum(load_balancer_inflight_requests{{{SEL}}})', "in flight"),
        (f'sum(load_balancer_queued_requests{{{SEL}}})', "queued"),
    ], 12, 44))
    q.append(panel(17, "Protection events by reason", "timeseries", [
        (f'sum by (reason) (rate(load_balancer_protection_events_total{{{SEL}}}[{RI}]))', "{{reason}}"),
    ], 0, 52, unit="ops", desc="overload, bulkhead_full, backend_saturated, retry_budget_exhausted, rate_limited."))
    q.append(panel(18, "Rate-limit decisions", "timeseries", [
        (f'sum(rate(load_balancer_http_requests_total{{{SEL}, listener="public", code!="429"}}[{RI}]))', "allowed"),
        (f'sum(rate(load_balancer_protection_events_total{{{SEL}, reason="rate_limited"}}[{RI}]))', "limited (429)"),
    ], 12, 52, unit="reqps"))
    q.append(row(19, "Rate-limit store and configuration", 60))
    q.append(panel(20, "Rate-limit store healthy", "stat", [
        (f'min by (storage) (load_balancer_rate_limit_storage_healthy{{{SEL}}})', "{{storage}}"),
    ], 0, 61, w=6))
    q.append(panel(21, "Rate limiting degraded", "stat", [
        (f'max(load_balancer_rate_limit_degraded{{{SEL}}})', "degraded"),
    ], 6, 61, w=6))
    q.append(panel(22, "Local buckets and evictions", "timeseries", [
        (f'sum(load_balancer_rate_limit_local_buckets{{{SEL}}})', "buckets"),
        (f'sum(rate(load_balancer_rate_limit_local_evictions_total{{{SEL}}}[{RI}]))', "evictions/s"),
    ], 12, 61))
    q.append(panel(23, "Configuration changes", "timeseries", [
        (f'sum by (source, result) (increase(load_balancer_config_reloads_total{{{SEL}}}[1h]))', "{{source}} {{result}}"),
    ], 0, 69, w=24))
    return q


def dashboard():
    def var(name, query):
        return {"name": name, "type": "query", "datasource": DS, "query": query,
                "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*",
                "current": {"text": "All", "value": "$__all"}}
    return {
        "uid": "weir-overview",
        "title": "weir",
        "tags": ["weir", "load-balancer"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": False,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus",
             "current": {"text": "Prometheus", "value": "prometheus"}},
            var("job", "label_values(load_balancer_http_requests_total, job)"),
            var("instance", 'label_values(load_balancer_http_requests_total{job=~"$job"}, instance)'),
        ]},
        "annotations": {"list": []},
        "panels": panels(),
    }


def main():
    text = json.dumps(dashboard(), indent=2) + "\n"
    if sys.argv[1:] == ["--write"]:
        TARGET.write_text(text)
        return 0
    if sys.argv[1:] != ["--check"]:
        print("usage: dashboard.py --check | --write", file=sys.stderr)
        return 2
    if TARGET.read_text() != text:
        print(f"{TARGET} differs from {__file__}: run dashboard.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
