//! deploy/: the Grafana dashboard and the alert rules query only what weir exports.
//! A running `weir` is scraped (`/metrics`, strict OpenMetrics parser), and every metric each
//! query of deploy/observability/grafana-weir.json and weir.rules.yml selects must be a series
//! weir exposes, with every label it matches or groups by, and every value it matches with `=`
//! (C-OBS-1). The rules may also name the few metrics that come from elsewhere (`up`,
//! kube-state-metrics), listed in [`EXTERNAL`]; the dashboard may not.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;
use weir_conformance::backend::Backend;
use weir_conformance::client::{Req, send};
use weir_conformance::config::{ADMIN_TOKEN, Config};
use weir_conformance::harness::{Binary, Proxy};

#[path = "support/prom.rs"]
mod prom;
#[path = "support/promql.rs"]
mod promql;

/// Metrics the alert rules read that Prometheus or kube-state-metrics export, not weir.
const EXTERNAL: &[&str] = &[
    "up",
    "kube_deployment_spec_replicas",
    "kube_deployment_status_replicas_available",
];

/// Labels Prometheus adds at scrape time (and `le`, on every histogram bucket).
const TARGET_LABELS: &[&str] = &["job", "instance", "namespace", "le"];

fn deploy(path: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every `expr` in a Grafana dashboard (panels, nested rows, targets).
fn dashboard_exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr", Value::String(s)) => out.push(s.clone()),
                    _ => dashboard_exprs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| dashboard_exprs(v, out)),
        _ => {}
    }
}

/// Series names of the exposition, each with its labels and their values.
type Exported = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

async fn exported() -> Exported {
    let b = Backend::start("b-1").await;
    let bin = Binary::new(env!("CARGO_BIN_EXE_weir"));
    let p = Proxy::start(&bin, &Config::new(&[&b]).management()).await;
    let m = p.management.expect("management listener");
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let r = send(m, &Req::get("/metrics").header("authorization", &auth)).await;
    assert_eq!(r.status, 200, "{}", r.summary());
    let expo = prom::parse(&r.text()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()));
    let mut out = Exported::new();
    for series in expo.samples.keys() {
        let labels = out.entry(series.name.clone()).or_default();
        for (k, v) in &series.labels {
            labels.entry(k.clone()).or_default().insert(v.clone());
        }
    }
    assert!(out.len() > 10, "too few series: {:?}", out.keys());
    out
}

/// The problems of one query against what weir exports (empty: fine).
fn check(expr: &str, exported: &Exported, external: &[&str]) -> Vec<String> {
    let refs = match promql::refs(expr) {
        Ok(r) => r,
        Err(e) => return vec![format!("cannot read {expr:?}: {e}")],
    };
    let mut problems = Vec::new();
    if refs.selectors.is_empty() {
        problems.push(format!("{expr:?} selects no metric"));
    }
    let mut labels_here = BTreeSet::new();
    for sel in &refs.selectors {
        if external.contains(&sel.metric.as_str()) {
            continue;
        }
        let Some(labels) = exported.get(&sel.metric) else {
            problems.push(format!("{}: weir exports no such series", sel.metric));
            continue;
        };
        labels_here.extend(labels.keys().cloned());
        for (label, op, value) in &sel.matchers {
            if TARGET_LABELS.contains(&label.as_str()) {
                continue;
            }
            match labels.get(label) {
                None => problems.push(format!("{}: no label {label}", sel.metric)),
                Some(values) if op == "=" && !values.contains(value) => problems.push(format!(
                    "{}: label {label} never has the value {value:?} (has {values:?})",
                    sel.metric
                )),
                Some(_) => {}
            }
        }
    }
    let only_external = refs
        .selectors
        .iter()
        .all(|s| external.contains(&s.metric.as_str()));
    for g in &refs.grouping {
        if !only_external && !TARGET_LABELS.contains(&g.as_str()) && !labels_here.contains(g) {
            problems.push(format!("groups by {g}, which no selected series has"));
        }
    }
    problems
}

/// The dashboard's and the rules' queries name only series, labels and values weir exports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_and_alert_rules_query_only_exported_metrics() {
    let exported = exported().await;
    let dashboard: Value =
        serde_json::from_str(&deploy("observability/grafana-weir.json")).expect("dashboard JSON");
    let mut dash = Vec::new();
    dashboard_exprs(&dashboard, &mut dash);
    assert!(dash.len() >= 20, "the dashboard has {} queries", dash.len());
    let rules = promql::rule_exprs(&deploy("observability/weir.rules.yml"));
    assert!(rules.len() >= 9, "the rules file has {} rules", rules.len());
    let mut problems = Vec::new();
    for e in &dash {
        problems.extend(
            check(e, &exported, &[])
                .into_iter()
                .map(|p| format!("dashboard: {p}")),
        );
    }
    for e in &rules {
        problems.extend(
            check(e, &exported, EXTERNAL)
                .into_iter()
                .map(|p| format!("rules: {p}")),
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The check itself catches what it is for: a misspelt metric, an unknown label, a label
/// value weir never sets, a grouping label no series has, and an external metric in the
/// dashboard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_rejects_what_weir_does_not_export() {
    let exported = exported().await;
    let bad = [
        "rate(load_balancer_http_request_total[5m])",
        r#"sum(rate(load_balancer_http_requests_total{status="200"}[5m]))"#,
        r#"sum(rate(load_balancer_protection_events_total{reason="ratelimited"}[5m]))"#,
        "sum by (pool) (rate(load_balancer_upstream_attempts_total[5m]))",
        "up == 0",
    ];
    for e in bad {
        assert!(!check(e, &exported, &[]).is_empty(), "accepted {e}");
    }
    let good = r#"histogram_quantile(0.99, sum by (backend, le) (rate(load_balancer_upstream_duration_seconds_bucket{job=~"$job", backend!="x"}[$__rate_interval])))"#;
    assert_eq!(check(good, &exported, &[]), Vec::<String>::new());
}

#[test]
fn promql_refs_reads_selectors_and_grouping() {
    let r = promql::refs(
        r#"sum by (job, code) (rate(a_total{listener="public", code=~"5.."}[5m])) / on(job) b > 0.5 and c"#,
    )
    .expect("parse");
    let names: Vec<&str> = r.selectors.iter().map(|s| s.metric.as_str()).collect();
    assert_eq!(names, ["a_total", "b", "c"]);
    assert_eq!(
        r.selectors[0].matchers,
        [
            ("listener".into(), "=".into(), "public".into()),
            ("code".into(), "=~".into(), "5..".into())
        ]
    );
    assert_eq!(r.grouping, ["job", "code", "job"]);
    let exprs = promql::rule_exprs(
        "- alert: A\n  expr: up == 0\n- alert: B\n  expr: |\n    sum(x)\n    > 1\n  for: 1m\n",
    );
    assert_eq!(exprs, ["up == 0", "sum(x)\n> 1\n"]);
}
