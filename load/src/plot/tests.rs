use super::*;
use crate::summary::parse_rows;

const ROWS: &str = "proxy\tworkers\tconnections\tround\treq_per_s\tp50_us\tp99_us\trequests\tsocket_errors\tnon_2xx\tcpu_us_per_req
weir\t1\t50\t1\t1000\t100\t900\t5000\t0\t0
weir\t1\t50\t2\t3000\t300\t1100\t5000\t0\t0
nginx\t1\t50\t1\t2000\t200\t800\t5000\t0\t0
";

#[test]
fn cells_hold_medians_in_first_seen_order() {
    let rows = parse_rows(ROWS).unwrap();
    let cells = cells(&rows);
    let bars = &cells[&(1, 50)];
    assert_eq!(bars[0], ("weir".to_owned(), 2000.0, 200.0, 1000.0));
    assert_eq!(bars[1].0, "nginx");
}

fn sample(t: f64, rss: u64) -> Sample {
    Sample {
        t,
        phase: "soak".into(),
        connections: 4,
        rps: 1000.0,
        p50_us: 100,
        p99_us: 900,
        ok: 10,
        not_ok: 0,
        rss_kib: Some(rss),
        fds: Some(20),
    }
}

#[test]
fn plots_are_svg_documents_with_their_panels() {
    let dir = std::env::temp_dir().join(format!("weir-load-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let soak_svg = dir.join("soak.svg");
    soak(
        &[sample(5.0, 10_240), sample(10.0, 11_264)],
        "soak test",
        &soak_svg,
    )
    .unwrap();
    let text = std::fs::read_to_string(&soak_svg).unwrap();
    assert!(text.starts_with("<svg"));
    for panel in [
        "RSS (MiB)",
        "open file descriptors",
        "requests per second",
        "p99 latency (ms)",
    ] {
        assert!(text.contains(panel), "{panel}");
    }
    let bench_svg = dir.join("bench.svg");
    bench(&parse_rows(ROWS).unwrap(), "side by side", &bench_svg).unwrap();
    let text = std::fs::read_to_string(&bench_svg).unwrap();
    assert!(text.contains("nginx") && text.contains("whisker"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn axis_labels_have_no_needless_decimals() {
    assert_eq!(tick(12.0), "12");
    assert_eq!(tick(0.0), "0");
    assert_eq!(tick(1.5), "1.5");
    assert_eq!(tick(0.25), "0.25");
    assert_eq!(tick(-0.0001), "0");
    assert_eq!(minutes(44.2), "44 min");
    assert_eq!(minutes(2.26), "2.3 min");
}

#[test]
fn the_soak_title_says_the_wall_time_the_axis_spans() {
    let dir = std::env::temp_dir().join(format!("weir-load-title-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("soak.svg");
    // Asked for 30 minutes; the samples span 44 (a loaded machine stretched the windows).
    soak(
        &[sample(60.0, 10_240), sample(2640.0, 10_240)],
        "weir soak: 1800s",
        &svg,
    )
    .unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains("weir soak: 1800s (44 min of wall time)"),
        "{text:.400}"
    );
    assert!(
        !text.contains(">20.0<"),
        "an integer axis printed with a decimal"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
