use super::*;

#[test]
fn reads_vm_rss() {
    let status = "Name:\tnginx\nVmPeak:\t  100 kB\nVmRSS:\t    5120 kB\nRssAnon:\t 1 kB\n";
    assert_eq!(vm_rss_bytes(status), Some(5120 * 1024));
    assert_eq!(
        vm_rss_bytes("Name:\tx\n"),
        None,
        "kernel threads have no VmRSS"
    );
    assert_eq!(vm_rss_bytes("VmRSS:\t12 MB\n"), None);
}

#[test]
fn reads_ppid_past_odd_names() {
    assert_eq!(stat_ppid("123 (nginx) S 1 123 123 0"), Some(1));
    assert_eq!(stat_ppid("77 (a) b (c)) R 42 77 0"), Some(42));
    assert_eq!(stat_ppid("garbage"), None);
}

#[test]
fn reads_cpu_ticks() {
    let stat = "4242 (weir worker) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 37 0 0 20 0 3 0";
    assert_eq!(stat_cpu_ticks(stat), Some(287));
    assert_eq!(stat_cpu_ticks("1 (x) S 0"), None);
}

#[test]
fn own_cpu_time_is_read() {
    let spin = std::time::Instant::now();
    let mut x = 0u64;
    while spin.elapsed() < std::time::Duration::from_millis(30) {
        x = x.wrapping_add(1);
    }
    assert!(x > 0);
    assert!(tree_cpu_ticks(std::process::id()) >= 1);
}

#[test]
fn walks_the_tree() {
    let pairs = [(10, 1), (11, 10), (12, 10), (13, 11), (20, 1), (21, 20)];
    assert_eq!(
        descendants(&pairs, 10).into_iter().collect::<Vec<_>>(),
        [10, 11, 12, 13]
    );
    assert_eq!(
        descendants(&pairs, 99).into_iter().collect::<Vec<_>>(),
        [99]
    );
}

#[test]
fn own_process_has_rss() {
    let (rss, pids) = tree_rss_bytes(std::process::id());
    assert!(rss > 0);
    assert!(pids.contains(&std::process::id()));
}
