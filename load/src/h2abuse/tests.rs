use super::*;

#[test]
fn error_codes_are_named() {
    assert_eq!(error_name(0xb), "ENHANCE_YOUR_CALM");
    assert_eq!(error_name(1), "PROTOCOL_ERROR");
    assert_eq!(error_name(0), "NO_ERROR");
    assert_eq!(error_name(0x42), "0x42", "unknown codes stay numeric");
}

#[test]
fn endings_read_from_what_was_seen() {
    let mut seen = Seen::default();
    assert_eq!(ending(&seen), "open");
    seen.closed = true;
    assert_eq!(ending(&seen), "closed, no GOAWAY");
    seen.goaway = Some(0xb);
    assert_eq!(ending(&seen), "GOAWAY(ENHANCE_YOUR_CALM)");
}

#[test]
fn merge_keeps_the_first_goaway_and_sums_frames() {
    let mut total = Seen::default();
    let mut a = Seen::default();
    a.frames[4] = 3;
    a.bytes = 27;
    a.goaway = Some(1);
    let mut b = Seen::default();
    b.frames[4] = 2;
    b.goaway = Some(0xb);
    b.closed = true;
    merge(&mut total, &a);
    merge(&mut total, &b);
    assert_eq!(total.frames[4], 5);
    assert_eq!(total.bytes, 27);
    assert_eq!(total.goaway, Some(1));
    assert!(total.closed);
}

#[test]
fn result_line_has_every_field_in_order() {
    let r = Report {
        cpu_ms: 120,
        rss_before_kib: 2048,
        rss_peak_kib: 4096,
        ending: "GOAWAY(ENHANCE_YOUR_CALM)".into(),
        others_ok: 9,
        others_sent: 10,
        detail: "x".into(),
    };
    assert_eq!(
        r.line(Case::RapidReset, "nginx"),
        "RESULT\trapid-reset\tnginx\t120\t2048\t4096\tGOAWAY(ENHANCE_YOUR_CALM)\t9/10\tx"
    );
}

#[test]
fn a_missing_process_is_an_error() {
    // Above any pid_max (at most 2^22), so never a process.
    let err = Meter::start(u32::MAX).err().map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some("no such process (or no RSS): 4294967295")
    );
}

/// Against a listener that closes every connection once it has read its first bytes: the case
/// ends "closed", the
/// well-behaved client is never served, and the figures are read from this test's own process.
#[tokio::test]
async fn a_closing_server_is_reported_as_closed() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = tokio::io::AsyncReadExt::read(&mut s, &mut buf).await;
            });
        }
    });
    let r = run(Case::RapidReset, addr, std::process::id(), "/big")
        .await
        .unwrap();
    assert_eq!(r.ending, "closed, no GOAWAY");
    assert_eq!(r.others_ok, 0);
    assert!(r.others_sent >= 1);
    assert!(r.rss_peak_kib >= r.rss_before_kib);
}
