//! `weir_core::h1::chunked::ChunkedDecoder` (issue 14, C-PATH-12): never panics; the data and
//! the end of the body do not depend on how the input is cut; what it consumed is a prefix of
//! the input; re-encoding the data and decoding it again gives the same data.

use weir_core::h1::chunked::{ChunkError, ChunkedDecoder};

fn decode(pieces: &[&[u8]]) -> (Result<bool, ChunkError>, Vec<u8>, usize) {
    let mut d = ChunkedDecoder::new();
    let (mut data, mut used) = (Vec::new(), 0);
    for p in pieces {
        let mut at = 0;
        while at < p.len() && !d.is_done() {
            match d.decode(&p[at..]) {
                Ok(s) => {
                    assert!(s.consumed > 0 && s.consumed <= p.len() - at);
                    data.extend_from_slice(s.data);
                    at += s.consumed;
                }
                Err(e) => return (Err(e), data, used + at),
            }
        }
        used += at;
    }
    (Ok(d.is_done()), data, used)
}

pub fn run(data: &[u8]) {
    let Some((&c, stream)) = data.split_first() else {
        return;
    };
    let cut = usize::from(c) % (stream.len() + 1);
    let whole = decode(&[stream]);
    let split = decode(&[&stream[..cut], &stream[cut..]]);
    assert_eq!(whole.0, split.0);
    if whole.0.is_ok() {
        assert_eq!((&whole.1, whole.2), (&split.1, split.2));
    }
    if let (Ok(true), body, _) = &whole {
        let mut again = Vec::new();
        for c in body.chunks(7) {
            again.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            again.extend_from_slice(c);
            again.extend_from_slice(b"\r\n");
        }
        again.extend_from_slice(b"0\r\n\r\n");
        let back = decode(&[&again]);
        assert_eq!((back.0, &back.1, back.2), (Ok(true), body, again.len()));
    }
}
