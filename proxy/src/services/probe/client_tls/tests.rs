use super::*;

#[test]
fn c_health_1_production_config_has_roots_and_tls12_plus() {
    let roots = native_roots();
    assert!(!roots.is_empty(), "native or webpki roots");
    let config = native_client_config().unwrap();
    assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    // ring is the provider: its suites include TLS 1.2 ones (tls12 is enabled) and 1.3 ones.
    let suites = &config.crypto_provider().cipher_suites;
    assert!(
        suites
            .iter()
            .any(|s| s.version() == &rustls::version::TLS12)
    );
    assert!(
        suites
            .iter()
            .any(|s| s.version() == &rustls::version::TLS13)
    );
}
