use super::*;

const SAMPLE: &str = "Running 5s test @ http://127.0.0.1:8080/
  2 threads and 50 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
Latency   635.91us    0.89ms  12.92ms   93.69%
Req/Sec    56.20k     8.07k   62.00k    86.54%
  Latency Distribution
 50%  250.00us
 75%  491.00us
 90%  700.00us
 99%    5.00ms
  1119823 requests in 10.00s, 140.98MB read
  Socket errors: connect 0, read 3, write 1, timeout 2
  Non-2xx or 3xx responses: 12
Requests/sec: 111982.30
Transfer/sec:     14.09MB
";

#[test]
fn parses_a_full_latency_run() {
    let s = parse(SAMPLE).unwrap();
    assert_eq!(s.requests_per_second, 111_982.30);
    assert_eq!(s.p50_us, 250.0);
    assert_eq!(s.p99_us, 5_000.0);
    assert_eq!(s.requests, 1_119_823);
    assert_eq!(s.socket_errors, 6);
    assert_eq!(s.non_2xx, 12);
}

#[test]
fn clean_run_has_no_errors() {
    let text = SAMPLE
        .lines()
        .filter(|l| !l.contains("Socket errors") && !l.contains("Non-2xx"))
        .collect::<Vec<_>>()
        .join("\n");
    let s = parse(&text).unwrap();
    assert_eq!((s.socket_errors, s.non_2xx), (0, 0));
}

#[test]
fn without_latency_flag_is_an_error() {
    let text = SAMPLE
        .lines()
        .filter(|l| {
            !l.trim_start().starts_with(|c: char| c.is_ascii_digit()) || l.contains("requests in")
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(parse(&text), Err(ParseError::Missing("50% latency")));
}

#[test]
fn reads_every_wrk_unit() {
    assert_eq!(duration_us("500.00ns").unwrap(), 0.5);
    assert_eq!(duration_us("12.5us").unwrap(), 12.5);
    assert_eq!(duration_us("1.20ms").unwrap(), 1_200.0);
    assert_eq!(duration_us("2.00s").unwrap(), 2_000_000.0);
    assert_eq!(duration_us("1.50m").unwrap(), 90_000_000.0);
    assert!(duration_us("12").is_err());
    assert!(duration_us("xms").is_err());
    assert!(duration_us("3parsecs").is_err());
}

#[test]
fn failed_wrk_is_an_error() {
    assert!(parse("unable to connect to 127.0.0.1:1 Connection refused\n").is_err());
}
