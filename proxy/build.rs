//! Embeds the console's built bundle (`frontend/dist`, made by `npm run build`) into the binary.
//! Without a built bundle (a fresh clone, no npm) the list is empty and the console
//! serves a page saying how to build it: `cargo build` never needs npm.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let dist = manifest.join("../frontend/dist");
    println!("cargo::rerun-if-env-changed=WEIR_CONSOLE_DIST");
    let dist = std::env::var_os("WEIR_CONSOLE_DIST").map_or(dist, PathBuf::from);
    // Watch the bundle when it exists; otherwise its parent, so that a first build is seen.
    if dist.is_dir() {
        println!("cargo::rerun-if-changed={}", dist.display());
    } else if let Some(parent) = dist.parent().filter(|p| p.is_dir()) {
        println!("cargo::rerun-if-changed={}", parent.display());
    }
    let mut files = Vec::new();
    if dist.join("index.html").is_file() {
        collect(&dist, &dist, &mut files);
    }
    files.sort();
    let mut out = String::from("/// The console bundle: (path under /, bytes).\n");
    out.push_str("pub static ASSETS: &[(&str, &[u8])] = &[\n");
    for (rel, abs) in &files {
        let _ = writeln!(out, "    ({rel:?}, include_bytes!({abs:?})),");
    }
    out.push_str("];\n");
    let dest = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    std::fs::write(dest.join("console_assets.rs"), out).expect("write console_assets.rs");
}

fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        // Symbolic links are not followed (a link loop would never end, and a link out of the
        // bundle would embed whatever it points at): only real files and directories count.
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() {
            collect(root, &path, files);
        } else if !kind.is_file() {
            println!(
                "cargo::warning=frontend/dist: {} is not a regular file (a symbolic link?): not embedded",
                path.display()
            );
        } else if let Ok(rel) = path.strip_prefix(root) {
            let rel = format!("/{}", rel.to_string_lossy().replace('\\', "/"));
            files.push((rel, path.to_string_lossy().into_owned()));
        }
    }
}
