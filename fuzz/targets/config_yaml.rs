//! C-CONF-1: strict configuration parsing on arbitrary text never panics, and an accepted
//! configuration is stable: loading it twice gives configurations with no difference.

use weir_core::config::{self, MapSecrets};

pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let secrets = MapSecrets::new().with_env("BALANCER_ADMIN_TOKEN", "fuzz-token");
    match config::load(&text, &secrets) {
        Ok(first) => {
            let second = config::load(&text, &secrets).expect("a valid config stays valid");
            assert!(
                config::diff(&first, &second).is_empty(),
                "loading is deterministic"
            );
        }
        Err(errors) => {
            assert!(
                !errors.errors().is_empty(),
                "a rejected config names at least one error"
            );
            let shown = errors.to_string();
            assert!(
                !shown.contains("fuzz-token"),
                "a secret leaked into an error (C-CONF-3)"
            );
        }
    }
}
