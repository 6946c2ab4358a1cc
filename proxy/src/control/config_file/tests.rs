//! `read_bounded` and the deadline wrappers against real files, FIFOs, devices and directories.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::*;

/// A fresh directory under the system's temp dir, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let p = std::env::temp_dir().join(format!(
            "weir-config-file-{name}-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&p).expect("temp dir");
        Dir(p)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn mkfifo(path: &Path) {
    let st = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo");
    assert!(st.success(), "mkfifo {}", path.display());
}

#[test]
fn a_regular_file_and_a_symlink_to_one_are_read() {
    let d = Dir::new("regular");
    let f = d.path("weir.yaml");
    std::fs::write(&f, "server: {}\n").expect("write");
    assert_eq!(read_bounded(&f, 100).as_deref(), Ok("server: {}\n"));
    let link = d.path("link.yaml");
    std::os::unix::fs::symlink(&f, &link).expect("symlink");
    assert_eq!(read_bounded(&link, 100).as_deref(), Ok("server: {}\n"));
}

#[test]
fn a_fifo_is_refused_at_once_without_a_writer() {
    let d = Dir::new("fifo");
    let f = d.path("weir.yaml");
    mkfifo(&f);
    let started = Instant::now();
    let e = read_bounded(&f, 100).expect_err("a FIFO is not read");
    assert!(
        matches!(
            e,
            FileError::NotRegular {
                kind: "a named pipe (FIFO)",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains(&f.display().to_string()), "{e}");
    // Liveness, not speed: without O_NONBLOCK and the type check this never returns.
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn devices_directories_and_symlinks_to_them_are_refused() {
    let d = Dir::new("dev");
    let zero = d.path("zero.yaml");
    std::os::unix::fs::symlink("/dev/zero", &zero).expect("symlink");
    for (path, kind) in [
        (Path::new("/dev/zero"), "a character device"),
        (zero.as_path(), "a character device"),
        (d.0.as_path(), "a directory"),
    ] {
        match read_bounded(path, 1 << 20) {
            Err(FileError::NotRegular { kind: k, .. }) => assert_eq!(k, kind, "{}", path.display()),
            other => panic!("{}: {other:?}", path.display()),
        }
    }
}

#[test]
fn the_limit_is_exact_and_enforced() {
    let d = Dir::new("limit");
    let f = d.path("weir.yaml");
    std::fs::write(&f, "x".repeat(100)).expect("write");
    assert_eq!(read_bounded(&f, 100).map(|s| s.len()), Ok(100));
    assert!(matches!(
        read_bounded(&f, 99),
        Err(FileError::TooLarge { limit: 99, .. })
    ));
}

#[test]
fn missing_and_non_utf8_files_are_named_errors() {
    let d = Dir::new("misc");
    let missing = d.path("nope.yaml");
    let e = read_bounded(&missing, 10).expect_err("missing");
    assert!(matches!(e, FileError::Io { .. }), "{e}");
    assert!(e.to_string().contains("nope.yaml"), "{e}");
    let bin = d.path("bin.yaml");
    std::fs::write(&bin, [0xff, 0xfe, 0x00]).expect("write");
    assert!(matches!(
        read_bounded(&bin, 10),
        Err(FileError::NotUtf8 { .. })
    ));
}

#[test]
fn load_blocking_reports_a_fifo_and_an_invalid_file() {
    let d = Dir::new("load");
    let fifo = d.path("fifo.yaml");
    mkfifo(&fifo);
    match load_blocking(&fifo, READ_TIMEOUT) {
        Err(LoadError::File(FileError::NotRegular { .. })) => {}
        other => panic!("{other:?}"),
    }
    let bad = d.path("bad.yaml");
    std::fs::write(&bad, "server:\n  retry:\n    max_attempts: 9\n").expect("write");
    match load_blocking(&bad, READ_TIMEOUT) {
        Err(LoadError::Invalid(errors)) => assert!(errors.has("server.retry.max_attempts")),
        other => panic!("{other:?}"),
    }
}

/// A reader set of the test's own (the process's `READERS` is shared by parallel tests).
fn readers() -> &'static Readers {
    Box::leak(Box::new(Readers::default()))
}

#[test]
fn a_stuck_read_times_out_and_the_caller_goes_on() {
    let r = readers();
    let (release, hold) = std::sync::mpsc::channel::<()>();
    let started = Instant::now();
    // Stands in for a read on a hung file system: it blocks until released.
    let e = r
        .run_blocking(
            Path::new("/hung/weir.yaml"),
            Duration::from_millis(200),
            move || {
                let _ = hold.recv();
            },
        )
        .expect_err("the deadline passes first");
    assert!(matches!(e, FileError::TimedOut { .. }), "{e}");
    assert!(e.to_string().contains("/hung/weir.yaml"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(r.pending(), 1, "the stuck thread is still counted");
    drop(release);
    let deadline = Instant::now() + Duration::from_secs(5);
    while r.pending() != 0 {
        assert!(Instant::now() < deadline, "the released thread never ended");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(r.run_blocking(Path::new("/x"), READ_TIMEOUT, || 7), Ok(7));
}

#[test]
fn stuck_reads_are_bounded() {
    let r = readers();
    let (release, hold) = std::sync::mpsc::channel::<()>();
    let hold = std::sync::Arc::new(std::sync::Mutex::new(hold));
    for _ in 0..MAX_PENDING_READS {
        let hold = std::sync::Arc::clone(&hold);
        let e = r.run_blocking(Path::new("/hung"), Duration::from_millis(1), move || {
            let _ = hold.lock().map(|h| h.recv());
        });
        assert!(matches!(e, Err(FileError::TimedOut { .. })), "{e:?}");
    }
    let e = r.run_blocking(Path::new("/hung"), READ_TIMEOUT, || ());
    assert!(
        matches!(e, Err(FileError::Busy { pending, .. }) if pending == MAX_PENDING_READS),
        "{e:?}"
    );
    drop(release);
    let deadline = Instant::now() + Duration::from_secs(5);
    while r.pending() != 0 {
        assert!(Instant::now() < deadline, "released threads never ended");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(r.run_blocking(Path::new("/x"), READ_TIMEOUT, || 1), Ok(1));
}
