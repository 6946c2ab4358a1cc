//! Replays every committed fuzz seed (`fuzz/seeds/<target>/*`) through the same target body that
//! cargo-fuzz runs on nightly, so the corpus is checked on stable by every `.ci/run`.
#![cfg(not(loom))]
// The fence of core/clippy.toml is for library code; this test reads its fixtures.
#![allow(clippy::disallowed_methods)]

#[path = "../../fuzz/targets/mod.rs"]
mod targets;

use std::path::Path;

#[test]
fn every_fuzz_seed_replays_without_a_finding() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds");
    let mut replayed = 0;
    for (name, run) in targets::TARGETS {
        let dir = root.join(name);
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut here = 0;
        for entry in entries {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            run(&data);
            here += 1;
        }
        assert!(here > 0, "target {name} has no seeds");
        replayed += here;
    }
    let dirs = std::fs::read_dir(&root).unwrap().count();
    assert_eq!(
        dirs,
        targets::TARGETS.len(),
        "every seed directory belongs to a target"
    );
    assert!(replayed >= targets::TARGETS.len());
}
