use super::*;

fn row(proxy: &str, workers: u32, conns: u32, round: u32, rps: f64, p99: f64) -> Row {
    Row {
        proxy: proxy.to_owned(),
        workers,
        connections: conns,
        round,
        sample: Sample {
            requests_per_second: rps,
            p50_us: p99 / 4.0,
            p99_us: p99,
            requests: (rps * 5.0) as u64,
            socket_errors: 0,
            non_2xx: 0,
        },
        cpu_us_per_request: Some(1_000_000.0 / rps),
    }
}

#[test]
fn median_of_odd_even_and_empty() {
    assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    assert_eq!(median(&[]), None);
    assert_eq!(median(&[f64::NAN, 1.0]), Some(1.0));
}

#[test]
fn tsv_round_trips() {
    let mut r = row("weir", 2, 256, 3, 12345.5, 900.0);
    r.cpu_us_per_request = Some(81.25);
    let text = format!("{TSV_HEADER}\n# comment\n{}\n", r.to_tsv());
    assert_eq!(parse_rows(&text).unwrap(), vec![r]);
}

#[test]
fn ten_field_lines_have_no_cpu() {
    let mut r = row("nginx", 1, 50, 1, 100.0, 10.0);
    r.cpu_us_per_request = None;
    let tsv = r.to_tsv();
    assert!(tsv.ends_with("\t-"));
    let ten = tsv.trim_end_matches("\t-");
    assert_eq!(parse_rows(ten).unwrap(), vec![r.clone()]);
    assert_eq!(parse_rows(&tsv).unwrap(), vec![r]);
}

#[test]
fn weir_smol_is_listed_after_weir_and_before_the_baselines() {
    let mut names = vec!["haproxy", "other", "nginx", "weir-smol", "weir"];
    names.sort_by_key(|n| proxy_order(n));
    assert_eq!(names, ["weir", "weir-smol", "nginx", "haproxy", "other"]);
}

#[test]
fn malformed_line_names_its_number() {
    let text = format!("{TSV_HEADER}\nweir\t1\t50\n");
    assert_eq!(parse_rows(&text).unwrap_err().line, 2);
}

#[test]
fn ratios_pair_rounds_and_cancel_drift() {
    // The machine slows down 2x between round 1 and 2; weir is always 1.2x nginx within a
    // round, so the paired ratio is exactly 1.2 although the medians drift.
    let rows = vec![
        row("nginx", 1, 50, 1, 100.0, 1000.0),
        row("weir", 1, 50, 1, 120.0, 800.0),
        row("haproxy", 1, 50, 1, 120.0, 800.0),
        row("nginx", 1, 50, 2, 50.0, 2000.0),
        row("weir", 1, 50, 2, 60.0, 1600.0),
        row("haproxy", 1, 50, 2, 60.0, 1600.0),
        row("nginx", 1, 50, 3, 80.0, 1000.0),
        row("weir", 1, 50, 3, 96.0, 800.0),
        row("haproxy", 1, 50, 3, 96.0, 800.0),
    ];
    let cells = summarize(&rows);
    assert_eq!(cells.len(), 1);
    let c = &cells[0];
    let names: Vec<&str> = c.proxies.iter().map(|p| p.proxy.as_str()).collect();
    assert_eq!(names, ["weir", "nginx", "haproxy"]);
    assert_eq!(c.proxies[0].rps, 96.0);
    assert_eq!(c.proxies[0].rps_range, (60.0, 120.0));
    let nginx = &c.ratios[0];
    assert_eq!(nginx.baseline, "nginx");
    assert!((nginx.rps - 1.2).abs() < 1e-9);
    assert!((nginx.p99 - 0.8).abs() < 1e-9);
    // The helper spends 1 s of CPU per second of load: CPU per request is 1/rps.
    assert!((nginx.cpu.unwrap() - 1.0 / 1.2).abs() < 1e-9);
    assert_eq!(nginx.pairs, 3);
    let haproxy = &c.ratios[1];
    assert!((haproxy.rps - 1.0).abs() < 1e-9);
    // 50 connections: req/s 1.2 >= 1.10 and 1.0 >= 1.0, p99 0.8 <= 1.0, CPU/req 0.83 <= 1.0 are
    // met; CPU/req against HAProxy (1.0 > 0.8) is missed.
    let g = goals(c);
    let got: Vec<(&str, bool)> = g.iter().map(|(w, ok)| (w.as_str(), *ok)).collect();
    assert_eq!(
        got,
        [
            ("req/s weir/nginx = 1.20 (goal >= 1.10)", true),
            ("p99 weir/nginx = 0.80 (goal <= 1.00)", true),
            ("CPU/req weir/nginx = 0.83 (goal <= 1.00)", true),
            ("req/s weir/haproxy = 1.00 (goal >= 1.00)", true),
            ("CPU/req weir/haproxy = 1.00 (goal <= 0.80)", false),
        ]
    );
}

#[test]
fn goals_at_256_ask_level_req_s_and_p99_and_can_miss() {
    let rows = vec![
        row("nginx", 2, 256, 1, 100.0, 1000.0),
        row("weir", 2, 256, 1, 105.0, 1100.0),
    ];
    let cells = summarize(&rows);
    let g = goals(&cells[0]);
    assert_eq!(g.len(), 3, "{g:?}");
    assert!(
        g[0].1,
        "1.05 >= 1.0: at 256 connections weir needs to match nginx, not beat it"
    );
    assert!(!g[1].1, "p99 1.1 > 1.0");
    assert!(g[2].1, "CPU/req 0.95 <= 1.0");
    let text = render(&cells);
    assert!(text.contains("2 workers, 256 connections"));
    assert!(text.contains("[missed]"));
}

#[test]
fn cells_are_sorted_and_unpaired_rounds_skipped() {
    let rows = vec![
        row("weir", 2, 50, 1, 10.0, 1.0),
        row("weir", 1, 256, 1, 10.0, 1.0),
        row("nginx", 1, 256, 2, 10.0, 1.0),
    ];
    let cells = summarize(&rows);
    assert_eq!(
        cells
            .iter()
            .map(|c| (c.workers, c.connections))
            .collect::<Vec<_>>(),
        [(1, 256), (2, 50)]
    );
    assert!(cells[0].ratios.is_empty(), "round 1 vs round 2 do not pair");
}
