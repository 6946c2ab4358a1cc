use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;

use super::migrate_only_requested;

/// C-RATE-7: only 1/true migrate; unset, empty, 0 and false run; a typo or a value
/// that is not UTF-8 is an error, never read as "unset" (which would start serving).
#[test]
fn c_rate_7_migrate_only_values() {
    let ask = |v: &str| migrate_only_requested(Some(OsStr::new(v)));
    assert_eq!(migrate_only_requested(None).ok(), Some(false));
    for v in ["", "0", "false", " false "] {
        assert_eq!(ask(v).ok(), Some(false), "{v:?}");
    }
    for v in ["1", "true", "true\n"] {
        assert_eq!(ask(v).ok(), Some(true), "{v:?}");
    }
    let typo = ask("ture").unwrap_err().to_string();
    assert!(typo.contains("\"ture\""), "{typo}");
    let bytes = migrate_only_requested(Some(OsStr::from_bytes(b"tr\xffue")))
        .unwrap_err()
        .to_string();
    assert!(bytes.contains("not UTF-8"), "{bytes}");
}
