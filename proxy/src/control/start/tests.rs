use std::error::Error as _;

use weir_core::config::MapSecrets;

use super::*;
use crate::base::error_chain::chain;
use crate::observe::listener_tls::ListenerTlsError;

fn io(kind: std::io::ErrorKind) -> std::io::Error {
    std::io::Error::from(kind)
}

/// Each variant that wraps an error gives it back as `source()`, and its own message does not
/// repeat it (the chain prints every level once).
#[test]
fn every_wrapping_variant_keeps_its_cause() {
    let cases: Vec<(StartError, &str)> = vec![
        (
            StartError::Runtime(weir_core::runtime::BuildError::NoPools),
            "the configuration has no pool",
        ),
        (
            StartError::Unsupported(Unsupported::Postgres { runtime: "smol" }),
            "postgres is not supported on the smol runtime",
        ),
        (
            StartError::RateStore(weir_storage::StoreError::Config("bad url".to_owned())),
            "store settings: bad url",
        ),
        (
            StartError::Tls(rustls::Error::General("no roots".to_owned())),
            "no roots",
        ),
        (
            StartError::ListenerTls(ListenerTlsError::ClientCaEmpty {
                file: "ca.pem".to_owned(),
            }),
            "ca.pem: no PEM certificate in it",
        ),
        (
            StartError::Bind {
                addr: "127.0.0.1:1".to_owned(),
                error: io(std::io::ErrorKind::AddrInUse),
            },
            "address in use",
        ),
        (
            StartError::Worker(io(std::io::ErrorKind::OutOfMemory)),
            "out of memory",
        ),
    ];
    for (e, cause) in cases {
        let source = e.source().map(ToString::to_string);
        assert!(
            source.as_deref().is_some_and(|s| s.contains(cause)),
            "{e:?}: source {source:?}"
        );
        assert!(!e.to_string().contains(cause), "{e} repeats its cause");
        let line = chain(&e).to_string();
        assert_eq!(line.matches(cause).count(), 1, "{line}");
        assert!(line.starts_with(&e.to_string()), "{line}");
    }
    for e in [
        StartError::Health,
        StartError::ListenerTlsPanicked,
        StartError::InsecureManagement("0.0.0.0:9090".parse().expect("addr")),
    ] {
        assert!(e.source().is_none(), "{e:?}");
    }
}

/// A listener certificate that does not exist: start's error names the step, the setting, the
/// file and the system's error, in that order, each once; the `io::Error` itself is reachable.
#[test]
fn a_missing_listener_certificate_is_chained_down_to_the_os_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let crt = dir.path().join("nope.crt");
    let key = dir.path().join("nope.key");
    let yaml = format!(
        "server:\n  tls:\n    certificates:\n      - cert_file: {}\n        key_file: {}\n\
         backends:\n  - id: a\n    url: http://127.0.0.1:9\n",
        crt.display(),
        key.display()
    );
    let cfg = weir_core::config::load(&yaml, &MapSecrets::new()).expect("valid");
    let e = StartError::ListenerTls(
        listener_tls::Front::build(&cfg.server).expect_err("no certificate file"),
    );
    let line = chain(&e).to_string();
    let want = format!(
        "cannot set up TLS on the public listener: server.tls.certificates[0]: cannot read {}: ",
        crt.display()
    );
    assert!(line.starts_with(&want), "{line}");
    assert!(line.ends_with("(os error 2)"), "{line}");
    let mut level: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    let mut os = None;
    while let Some(l) = level {
        os = os.or(l.downcast_ref::<std::io::Error>().map(std::io::Error::kind));
        level = l.source();
    }
    assert_eq!(os, Some(std::io::ErrorKind::NotFound), "{line}");
}

/// `check_runtime_support` names the runtime, and under `start` the same error is the cause of
/// "cannot build the rate-limit store".
#[test]
fn an_unsupported_store_reads_as_a_rate_store_failure() {
    let e = StartError::Unsupported(Unsupported::Postgres { runtime: "smol" });
    let line = chain(&e).to_string();
    assert!(
        line.starts_with(
            "cannot build the rate-limit store: rate_limit.storage: postgres is not supported on \
             the smol runtime"
        ),
        "{line}"
    );
}
