//! C-TLS-1, C-TLS-2: loading pairs and choosing among them.

use super::*;

fn write(dir: &Path, name: &str, sans: &[&str]) -> CertPair {
    let c = rcgen::generate_simple_self_signed(
        sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>(),
    )
    .expect("rcgen");
    let cert_file = dir.join(format!("{name}.crt"));
    let key_file = dir.join(format!("{name}.key"));
    std::fs::write(&cert_file, c.cert.pem()).unwrap();
    std::fs::write(&key_file, c.signing_key.serialize_pem()).unwrap();
    CertPair {
        cert_file: cert_file.display().to_string(),
        key_file: key_file.display().to_string(),
    }
}

fn provider() -> CryptoProvider {
    rustls::crypto::ring::default_provider()
}

#[test]
fn c_tls_1_sni_exact_then_wildcard_then_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let pairs = [
        write(dir.path(), "default", &["default.test"]),
        write(dir.path(), "wild", &["*.example.test"]),
        write(dir.path(), "exact", &["api.example.test", "Other.Test"]),
    ];
    let loaded: Vec<Loaded> = pairs
        .iter()
        .map(|p| load(p, &provider()).unwrap())
        .collect();
    assert_eq!(loaded[2].names, ["api.example.test", "other.test"]);
    let set = CertSet { pairs: loaded };
    let which = |sni: Option<&str>| {
        let k = set.pick(sni).expect("a certificate");
        set.pairs
            .iter()
            .position(|p| Arc::ptr_eq(&p.key, k))
            .unwrap()
    };
    assert_eq!(which(Some("api.example.test")), 2, "exact beats wildcard");
    assert_eq!(
        which(Some("API.example.test.")),
        2,
        "case and a trailing dot"
    );
    assert_eq!(which(Some("www.example.test")), 1, "wildcard");
    assert_eq!(
        which(Some("a.b.example.test")),
        0,
        "a wildcard covers one label"
    );
    assert_eq!(which(Some("example.test")), 0);
    assert_eq!(which(Some("other.test")), 2);
    assert_eq!(which(None), 0, "no SNI: the default");
    assert!(CertSet { pairs: Vec::new() }.pick(None).is_none());
}

#[test]
fn c_tls_1_a_mismatched_or_broken_pair_is_refused_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a", &["a.test"]);
    let b = write(dir.path(), "b", &["b.test"]);
    let crossed = CertPair {
        cert_file: a.cert_file.clone(),
        key_file: b.key_file.clone(),
    };
    let e = load(&crossed, &provider()).unwrap_err();
    assert_eq!(e.reason(), "mismatch", "{e}");
    assert!(e.to_string().contains("is not the private key"), "{e}");
    let missing = CertPair {
        cert_file: dir.path().join("nope.crt").display().to_string(),
        key_file: a.key_file.clone(),
    };
    let unreadable = load(&missing, &provider()).unwrap_err();
    assert_eq!(unreadable.reason(), "unreadable");
    // The system's error is the cause, not part of the message (printed once in a chain).
    let cause = std::error::Error::source(&unreadable)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .map(std::io::Error::kind);
    assert_eq!(cause, Some(std::io::ErrorKind::NotFound), "{unreadable}");
    assert!(unreadable.to_string().ends_with("nope.crt"), "{unreadable}");
    std::fs::write(&b.cert_file, "not pem").unwrap();
    assert_eq!(
        load(&b, &provider()).unwrap_err().reason(),
        "bad_certificate"
    );
    let key_as_cert = CertPair {
        cert_file: a.cert_file.clone(),
        key_file: a.cert_file.clone(),
    };
    assert_eq!(
        load(&key_as_cert, &provider()).unwrap_err().reason(),
        "bad_key"
    );
}

#[test]
fn c_tls_2_expiry_is_read_from_the_leaf() {
    let dir = tempfile::tempdir().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["e.test".to_owned()]).unwrap();
    params.not_after = rcgen::date_time_ymd(2031, 5, 17);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let pair = CertPair {
        cert_file: dir.path().join("e.crt").display().to_string(),
        key_file: dir.path().join("e.key").display().to_string(),
    };
    std::fs::write(&pair.cert_file, cert.pem()).unwrap();
    std::fs::write(&pair.key_file, key.serialize_pem()).unwrap();
    let loaded = load(&pair, &provider()).unwrap();
    // 2031-05-17T00:00:00Z
    assert_eq!(loaded.not_after, Some(1_936_742_400));
}
