use super::*;
use weir_core::config::MapSecrets;

#[test]
fn embedded_config_with_demo_backends_loads() {
    let a: SocketAddr = "127.0.0.1:1234".parse().expect("addr");
    let b: SocketAddr = "127.0.0.1:1235".parse().expect("addr");
    let text = config_text(&[("a", a), ("b", b)]);
    assert!(SHIPPED_CONFIG.contains("\nbackends:"));
    let secrets = MapSecrets::new().with_env("BALANCER_ADMIN_TOKEN", "t");
    let cfg = weir_core::config::load(&text, &secrets).expect("valid");
    assert_eq!(cfg.pools[0].backends.len(), 2);
    assert!(cfg.rate.enabled());
}
