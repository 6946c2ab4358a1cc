//! docs/contract.md is the one place that defines the behaviour ids (`C-AREA-N`). This test
//! keeps it that way:
//!
//! - every id the repository cites (in code, scripts, CI, docs, config, deploy, load and frontend
//!   sources; as `C-AREA-N`, a range `C-AREA-N..M`, a list `C-AREA-N/M` or `C-AREA-N, -M`, or a
//!   test name `c_area_n_...` in Rust) has its line in the index;
//! - the index defines each id once, and every line links a section of docs/: the file exists and
//!   the anchor is one of its headings, as GitHub spells heading anchors;
//! - every other relative link of docs/ and the READMEs resolves the same way, so a renamed
//!   heading cannot leave a link behind.
//!
//! A failure names the id and the file:line that cites it, or the index line at fault.
#![cfg(not(loom))]
// The fence of core/clippy.toml is for library code; this test reads the repository's files.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// An id: its area (`PATH`, `RATE`, ...) and its number.
type Id = (String, u32);

/// Directory names never walked, wherever they are: build output, dependencies, VCS data.
const SKIP_NAMES: &[&str] = &["target", "node_modules", ".git"];

/// Paths (from the repository root) never walked: generated, downloaded or secret files.
const SKIP_PATHS: &[&str] = &[
    "fuzz/corpus",
    "fuzz/artifacts",
    "frontend/dist",
    "frontend/dist-demo",
    "frontend/src/wasm",
    "frontend/e2e/out",
    "frontend/.schemathesis",
    "deploy/compose/secrets",
];

/// Files that are data, not prose or code (lock files list hashes, not ids).
const SKIP_FILES: &[&str] = &["Cargo.lock", "package-lock.json"];

/// Larger files are not sources (nothing in the repository comes close).
const MAX_FILE_BYTES: u64 = 8 << 20;

const INDEX: &str = "docs/contract.md";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("core/ has a parent")
        .to_path_buf()
}

fn show((area, n): &Id) -> String {
    format!("C-{area}-{n}")
}

#[test]
fn every_cited_contract_id_is_defined_in_the_index() {
    let root = repo();
    let index = read(&root.join(INDEX)).expect("docs/contract.md is readable UTF-8");
    let (defined, mut problems) = parse_index(&index);
    assert!(
        defined.len() >= 80,
        "{INDEX} defines only {} ids: is its format `- C-AREA-N text [page](page.md#anchor)`?",
        defined.len()
    );
    let areas: BTreeSet<String> = defined.keys().map(|(area, _)| area.clone()).collect();

    let mut files = Vec::new();
    walk(&root, &root, &mut files);
    assert!(
        files.iter().any(|f| f.ends_with("core/src/lib.rs")),
        "the walk found the sources"
    );
    for path in &files {
        let Some(text) = read(path) else { continue };
        let rel = path
            .strip_prefix(&root)
            .unwrap_or(path)
            .display()
            .to_string();
        let rust = rel.ends_with(".rs");
        for (i, line) in text.lines().enumerate() {
            let mut cited = cited_ids(line);
            if rust {
                cited.extend(test_name_ids(line, &areas));
            }
            for id in cited {
                if !defined.contains_key(&id) {
                    problems.push(format!(
                        "{} is cited at {rel}:{} but {INDEX} does not define it",
                        show(&id),
                        i + 1
                    ));
                }
            }
        }
    }
    problems.dedup();
    assert!(
        problems.is_empty(),
        "{} problem(s) with the contract index:\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

/// The index's ids with their line numbers, and what is wrong with its lines: an id defined twice,
/// a line without a link, a link to a missing file or heading.
fn parse_index(index: &str) -> (BTreeMap<Id, usize>, Vec<String>) {
    let docs = repo().join("docs");
    let mut defined = BTreeMap::new();
    let mut problems = Vec::new();
    let mut anchors = Anchors::default();
    for (i, line) in index.lines().enumerate() {
        let at = format!("{INDEX}:{}", i + 1);
        let Some(rest) = line.strip_prefix("- C-") else {
            continue;
        };
        let Some((id, _)) = id_at(rest) else {
            problems.push(format!(
                "{at}: an index line must start with one id `- C-AREA-N `"
            ));
            continue;
        };
        if let Some(first) = defined.insert(id.clone(), i + 1) {
            problems.push(format!(
                "{at}: {} is defined twice (first at line {first})",
                show(&id)
            ));
        }
        let links = links(line);
        if links.is_empty() {
            problems.push(format!("{at}: {} links no section of docs/", show(&id)));
        }
        for target in links {
            if !target.contains('#') {
                problems.push(format!(
                    "{at}: link `{target}` names no section (`file.md#anchor`)"
                ));
            } else if let Some(wrong) = anchors.check(&docs, &docs.join(INDEX), target) {
                problems.push(format!("{at}: link `{target}`: {wrong}"));
            }
        }
    }
    (defined, problems)
}

/// The heading anchors of the markdown files links point into, read once each.
#[derive(Default)]
struct Anchors(BTreeMap<PathBuf, Option<BTreeSet<String>>>);

impl Anchors {
    /// What is wrong with a relative link `target` in the file `from` (in directory `dir`): a
    /// missing file, or an anchor that is none of the target file's headings. Web links pass.
    fn check(&mut self, dir: &Path, from: &Path, target: &str) -> Option<String> {
        if target.contains("://") || target.starts_with("mailto:") {
            return None;
        }
        let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
        let path = if file.is_empty() {
            from.to_path_buf()
        } else {
            dir.join(file)
        };
        let shown = path
            .strip_prefix(repo())
            .unwrap_or(&path)
            .display()
            .to_string();
        if !path.exists() {
            return Some(format!("{shown} does not exist"));
        }
        if anchor.is_empty() || !file_name(&path).ends_with(".md") {
            return None;
        }
        let known = self
            .0
            .entry(path.clone())
            .or_insert_with(|| read(&path).map(|text| heading_anchors(&text)));
        match known {
            Some(set) if set.contains(anchor) => None,
            _ => Some(format!("{shown} has no heading with anchor `{anchor}`")),
        }
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Beyond the index: every relative link of docs/ and of the READMEs reaches an existing file
/// and, into markdown, an existing heading (headings renamed without their links fail here).
#[test]
fn every_link_between_docs_resolves() {
    let root = repo();
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| file_name(p).ends_with(".md"))
        .collect();
    for readme in [
        "README.md",
        "deploy/README.md",
        "load/README.md",
        "frontend/README.md",
    ] {
        pages.push(root.join(readme));
    }
    pages.sort();
    let mut anchors = Anchors::default();
    let mut problems = Vec::new();
    for page in &pages {
        let text = read(page).unwrap_or_else(|| panic!("{} is readable UTF-8", page.display()));
        let dir = page.parent().expect("a page has a directory");
        let rel = page
            .strip_prefix(&root)
            .unwrap_or(page)
            .display()
            .to_string();
        let mut fenced = false;
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
            }
            if fenced {
                continue;
            }
            for target in links(line) {
                if let Some(wrong) = anchors.check(dir, page, target) {
                    problems.push(format!("{rel}:{}: link `{target}`: {wrong}", i + 1));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} broken link(s):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

/// The link targets of a markdown line (`[text](target)`).
fn links(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let Some(end) = rest.find(')') else { break };
        out.push(&rest[..end]);
        rest = &rest[end..];
    }
    out
}

/// The anchors GitHub gives a markdown file's headings (ATX headings outside code fences):
/// lower case, letters, digits, `-` and `_` kept, spaces made `-`, everything else dropped,
/// a repeated anchor suffixed `-1`, `-2`, ...
fn heading_anchors(text: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut fence: Option<(char, usize)> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(c) = trimmed.chars().next().filter(|c| *c == '`' || *c == '~') {
            let run = trimmed.chars().take_while(|x| *x == c).count();
            if run >= 3 {
                match fence {
                    None => fence = Some((c, run)),
                    Some((open, len))
                        if open == c && run >= len && trimmed[run..].trim().is_empty() =>
                    {
                        fence = None
                    }
                    Some(_) => {}
                }
                continue;
            }
        }
        if fence.is_some() || line.len() - trimmed.len() > 3 {
            continue;
        }
        let level = trimmed.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&level) || !trimmed[level..].starts_with(' ') {
            continue;
        }
        let title = trimmed[level..].trim().trim_end_matches('#').trim_end();
        let base = slug(&without_link_targets(title));
        let count = seen.entry(base.clone()).or_insert(0);
        let mut anchor = base.clone();
        while anchors.contains(&anchor) {
            *count += 1;
            anchor = format!("{base}-{count}");
        }
        anchors.insert(anchor);
    }
    anchors
}

/// A heading's text as rendered: `[text](target)` shows only `text`.
fn without_link_targets(title: &str) -> String {
    let mut out = String::new();
    let mut rest = title;
    while let Some(at) = rest.find("](") {
        out.push_str(&rest[..at]);
        match rest[at..].find(')') {
            Some(end) => rest = &rest[at + end + 1..],
            None => rest = "",
        }
    }
    out.push_str(rest);
    out
}

fn slug(title: &str) -> String {
    title
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// An id at the start of `s` (after its `C-`): the id and the bytes it took.
fn id_at(s: &str) -> Option<(Id, usize)> {
    let area_len = s.bytes().take_while(u8::is_ascii_uppercase).count();
    if area_len == 0 || s.as_bytes().get(area_len) != Some(&b'-') {
        return None;
    }
    let (n, digits) = number_at(&s[area_len + 1..])?;
    Some(((s[..area_len].to_string(), n), area_len + 1 + digits))
}

fn number_at(s: &str) -> Option<(u32, usize)> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let n = s[..digits].parse().ok()?;
    Some((n, digits))
}

/// Every id a line cites in the `C-AREA-N` form, ranges and lists expanded.
fn cited_ids(line: &str) -> Vec<Id> {
    let mut out = Vec::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while let Some(at) = line[i..].find("C-") {
        let start = i + at;
        i = start + 2;
        if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            continue;
        }
        let Some(((area, n), used)) = id_at(&line[i..]) else {
            continue;
        };
        i += used;
        out.push((area.clone(), n));
        let mut last = n;
        loop {
            let rest = &line[i..];
            // `..M` or ` .. C-AREA-M`: a range.
            let dots = rest.trim_start();
            if let Some(after) = dots.strip_prefix("..") {
                let after = after.trim_start();
                let skip = after.strip_prefix(&format!("C-{area}-")).unwrap_or(after);
                if let Some((m, digits)) = number_at(skip) {
                    out.extend((last + 1..=m).map(|k| (area.clone(), k)));
                    last = m;
                    i = line.len() - skip.len() + digits;
                    continue;
                }
            }
            // `/M` or `, -M`: one more id of the same area.
            let more = rest.strip_prefix('/').or_else(|| rest.strip_prefix(", -"));
            if let Some((m, digits)) = more.and_then(number_at) {
                out.push((area.clone(), m));
                last = m;
                i = line.len() - more.map_or(0, str::len) + digits;
                continue;
            }
            break;
        }
    }
    out
}

/// Ids named by Rust test names and identifiers, `c_area_n_...`, for the index's areas.
fn test_name_ids(line: &str, areas: &BTreeSet<String>) -> Vec<Id> {
    let mut out = Vec::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while let Some(at) = line[i..].find("c_") {
        let start = i + at;
        i = start + 2;
        if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            continue;
        }
        let rest = &line[i..];
        let area_len = rest.bytes().take_while(u8::is_ascii_lowercase).count();
        let area = rest[..area_len].to_ascii_uppercase();
        if area_len == 0 || !areas.contains(&area) || !rest[area_len..].starts_with('_') {
            continue;
        }
        let Some((n, digits)) = number_at(&rest[area_len + 1..]) else {
            continue;
        };
        let after = rest.as_bytes().get(area_len + 1 + digits);
        if after.is_none_or(|b| !b.is_ascii_alphanumeric()) {
            out.push((area, n));
        }
    }
    out
}

/// Every file under `dir`, in a stable order, without the skipped directories.
fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry"))
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .to_string_lossy()
            .replace('\\', "/");
        let kind = entry.file_type().expect("a file type");
        if kind.is_dir() {
            if !SKIP_NAMES.contains(&name.as_str()) && !SKIP_PATHS.contains(&rel.as_str()) {
                walk(root, &path, out);
            }
        } else if kind.is_file() && !SKIP_FILES.contains(&name.as_str()) {
            out.push(path);
        }
    }
}

/// A file's text, or `None` for a file that is not UTF-8 (images, binaries) or too large.
fn read(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.len() > MAX_FILE_BYTES {
        return None;
    }
    String::from_utf8(std::fs::read(path).ok()?).ok()
}

#[test]
fn citations_expand_ranges_and_lists() {
    let ids = |line| {
        cited_ids(line)
            .iter()
            .map(show)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        ids("(C-RATE-3, -5..7)"),
        "C-RATE-3 C-RATE-5 C-RATE-6 C-RATE-7"
    );
    assert_eq!(
        ids("C-FWD-1/3 and C-MGMT-1/C-CONF-3"),
        "C-FWD-1 C-FWD-3 C-MGMT-1 C-CONF-3"
    );
    assert_eq!(
        ids("## The retry decision (C-RETRY-1 .. C-RETRY-3)"),
        "C-RETRY-1 C-RETRY-2 C-RETRY-3"
    );
    assert_eq!(
        ids("C-PATH-7..10, C-POOL-4."),
        "C-PATH-7 C-PATH-8 C-PATH-9 C-PATH-10 C-POOL-4"
    );
    assert_eq!(ids("`C-AREA-N`, C-PATH-*, ABC-PATH-1, x_C-PATH-2"), "");
    let areas = BTreeSet::from(["PATH".to_string(), "POOL".to_string()]);
    let named = test_name_ids(
        "fn c_path_12_h2_rapid_reset() { c_pool_4(); abc_path_3; c_misc_9 }",
        &areas,
    );
    assert_eq!(
        named.iter().map(show).collect::<Vec<_>>(),
        ["C-PATH-12", "C-POOL-4"]
    );
}

#[test]
fn heading_anchors_follow_github() {
    let text = "# Reload (C-CONF-4..8)\n\n```sh\n# not a heading\n```\n\
                ## `POST /api/dashboard/backends/{id}/drain`\n### Tests\n### Tests\n\
                ## Policies (`balancing.policy`, C-POOL-4)\n#### 1 worker, 50 connections\n\
                ## See [Methods](#methods) – here\n";
    let anchors = heading_anchors(text);
    let want = [
        "reload-c-conf-48",
        "post-apidashboardbackendsiddrain",
        "tests",
        "tests-1",
        "policies-balancingpolicy-c-pool-4",
        "1-worker-50-connections",
        "see-methods--here",
    ];
    assert_eq!(anchors, want.iter().map(|s| s.to_string()).collect());
}
