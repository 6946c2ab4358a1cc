//! Reading a proxy's memory from `/proc`: `VmRSS` of a process and of its descendants.
//!
//! nginx runs a master and N workers, HAProxy and weir one process; summing over the process
//! tree measures them alike. Only the difference between two readings is used (RSS with N idle
//! connections minus RSS idle), so pages shared between an nginx master and its workers, counted
//! once per process, cancel out. Kernel socket buffers are not in RSS; neither are they in
//! anyone's RSS, so the comparison stays fair.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;

/// The `VmRSS` field of a `/proc/PID/status` text, in bytes.
pub fn vm_rss_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut parts = line["VmRSS:".len()..].split_whitespace();
    let value: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") => Some(value * 1024),
        _ => None,
    }
}

/// The parent pid from a `/proc/PID/stat` text (the field after the parenthesised name, which
/// may itself hold spaces and parentheses).
pub fn stat_ppid(stat: &str) -> Option<u32> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    let _state = fields.next()?;
    fields.next()?.parse().ok()
}

/// `utime + stime` (clock ticks) from a `/proc/PID/stat` text (fields 14 and 15).
pub fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    // After the name: state(3) ppid(4) ... utime(14) stime(15); index 0 here is field 3.
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second of `/proc` times. Linux fixes USER_HZ at 100 on every architecture
/// this runs on (`getconf CLK_TCK`).
pub const CLOCK_TICKS_PER_SECOND: u64 = 100;

/// CPU time (user + system, clock ticks) of `root` and its live descendants.
pub fn tree_cpu_ticks(root: u32) -> u64 {
    descendants(&process_table(), root)
        .into_iter()
        .filter_map(|pid| {
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .as_deref()
                .and_then(stat_cpu_ticks)
        })
        .sum()
}

/// `root` and every descendant of it, given (pid, ppid) pairs.
pub fn descendants(pairs: &[(u32, u32)], root: u32) -> BTreeSet<u32> {
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for &(pid, ppid) in pairs {
        children.entry(ppid).or_default().push(pid);
    }
    let mut out = BTreeSet::new();
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        if out.insert(pid)
            && let Some(kids) = children.get(&pid)
        {
            stack.extend(kids);
        }
    }
    out
}

/// Every live (pid, ppid) pair on this machine.
pub fn process_table() -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let Ok(dir) = fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(ppid) = fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .as_deref()
            .and_then(stat_ppid)
        {
            out.push((pid, ppid));
        }
    }
    out
}

/// `VmRSS` (bytes) of one live process.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .as_deref()
        .and_then(vm_rss_bytes)
}

/// Summed `VmRSS` (bytes) of `root` and its descendants, with the pids counted.
pub fn tree_rss_bytes(root: u32) -> (u64, Vec<u32>) {
    let pids = descendants(&process_table(), root);
    let mut total = 0;
    let mut counted = Vec::new();
    for pid in pids {
        if let Some(rss) = rss_bytes(pid) {
            total += rss;
            counted.push(pid);
        }
    }
    (total, counted)
}

#[cfg(test)]
mod tests;
