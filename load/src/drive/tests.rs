use super::*;

const REPORT: &str = r#"Running 1s test @ http://127.0.0.1:7401/
WEIR_LOAD_JSON {"duration_us":2000000,"requests":10,"bytes":1000,"errors":{"connect":1,"read":0,"write":0,"status":3,"timeout":2},"statuses":{"200":7,"429":3},"backends":{"b1":4,"b2":3},"transition":true,"latency_us":[[100,5],[200,4],[9000,1]]}
"#;

#[test]
fn reads_the_script_report() {
    let w = parse(REPORT).unwrap().unwrap();
    assert_eq!(w.requests, 10);
    assert_eq!(w.statuses["429"], 3);
    assert_eq!(w.backends["b1"], 4);
    assert!(w.transition);
    assert_eq!(w.errors.transport(), 3);
    assert_eq!(w.latency_us, vec![(100, 5), (200, 4), (9000, 1)]);
}

#[test]
fn wrk_output_without_the_report_is_none() {
    assert!(
        parse("unable to connect to 127.0.0.1:1\n")
            .unwrap()
            .is_none()
    );
}

#[test]
fn windows_merge_into_exact_percentiles() {
    let w = parse(REPORT).unwrap().unwrap();
    let t = Tally::of(&[w.clone(), w]);
    assert_eq!(t.requests, 20);
    assert_eq!(t.status(200), 14);
    assert_eq!(t.status(503), 0);
    assert_eq!(t.attempts(), 20 + 6);
    assert_eq!(t.seconds, 4.0);
    assert_eq!(t.rate(), 5.0);
    // 20 samples: 10 at 100us, 8 at 200us, 2 at 9000us.
    assert_eq!(t.percentile(50.0), 100);
    assert_eq!(t.percentile(51.0), 200);
    assert_eq!(t.percentile(90.0), 200);
    assert_eq!(t.percentile(99.0), 9000);
    assert_eq!(t.max_us(), 9000);
}

#[test]
fn an_empty_tally_has_zero_percentiles() {
    let t = Tally::default();
    assert_eq!((t.percentile(99.0), t.max_us(), t.rate()), (0, 0, 0.0));
}
