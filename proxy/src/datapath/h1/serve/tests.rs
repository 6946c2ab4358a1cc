//! The sizes that decide what a parked connection's task holds (docs/benchmarks.md
//! "What an idle connection holds"): printed for the accounting, never asserted.

use super::*;

/// The size of what `f` returns (an async fn's future), without calling it.
fn returned<A, B, C, D, R>(_: fn(A, B, C, D) -> R) -> usize {
    std::mem::size_of::<R>()
}

#[test]
fn print_connection_state_sizes() {
    eprintln!("h1::conn::serve future: {} B", returned(serve));
    eprintln!("wait_parked future: {} B", returned(wait_parked));
    let (_tx, mut rx) = watch::channel(false);
    eprintln!(
        "watch::Receiver::changed future: {} B",
        std::mem::size_of_val(&rx.changed())
    );
    eprintln!(
        "DownstreamConn: {} B",
        std::mem::size_of::<DownstreamConn>()
    );
    eprintln!("Timers: {} B", std::mem::size_of::<Timers>());
    eprintln!("Buf: {} B", std::mem::size_of::<Buf>());
    eprintln!("DownstreamCtx: {} B", std::mem::size_of::<DownstreamCtx>());
    eprintln!(
        "watch::Receiver: {} B",
        std::mem::size_of::<watch::Receiver<bool>>()
    );
}

/// What parking relies on: a connection's read buffer, released with nothing waiting, goes
/// back to the worker's stash (and the next connection to read takes it from there).
#[test]
fn a_released_read_buffer_goes_back_to_the_stash() {
    let mut buf = Buf::from_slice(b"GET / HTTP/1.1\r\n\r\n");
    let before = super::super::io::stash_len();
    buf.release();
    assert_eq!(super::super::io::stash_len(), before, "bytes waiting: kept");
    buf.consume(buf.len());
    buf.release();
    assert_eq!(
        super::super::io::stash_len(),
        before + 1,
        "empty: given back"
    );
    let again = Buf::from_slice(b"x");
    assert_eq!(
        super::super::io::stash_len(),
        before,
        "taken again from the stash"
    );
    drop(again);
}

/// `empty_line` answers what `memmem::find` does, for every string of up to 8 bytes over
/// CR, LF and one other byte.
#[test]
fn empty_line_is_memmem_find() {
    let alphabet = [b'\r', b'\n', b'a'];
    for len in 0..=8u32 {
        for mut n in 0..3usize.pow(len) {
            let mut s = Vec::new();
            for _ in 0..len {
                s.push(alphabet[n % 3]);
                n /= 3;
            }
            assert_eq!(
                super::empty_line(&s),
                memchr::memmem::find(&s, b"\r\n\r\n"),
                "{s:?}"
            );
        }
    }
}
