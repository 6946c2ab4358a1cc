//! `weir_core::h1::chunked::ChunkedDecoder` (C-PATH-12): never panics; the data and
//! the end of the body do not depend on how the input is cut; what it consumed is a prefix of
//! the input; re-encoding the data and decoding it again gives the same data. Re-framing
//! (`rechunk`): the same output however the input is cut (a partial trailer line kept for the
//! next read, as a read buffer does); a body it completes, `decode` completes too with the same
//! data and length; its output is canonical (re-framing it again gives it back) and decodes to
//! the same data.

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

/// `rechunk` over `pieces`, keeping what a call leaves unused in front of the next piece.
fn rechunk(pieces: &[&[u8]]) -> Result<(Vec<u8>, bool, usize), ChunkError> {
    let mut d = ChunkedDecoder::new();
    let (mut out, mut kept, mut used) = (Vec::new(), Vec::new(), 0);
    for p in pieces {
        kept.extend_from_slice(p);
        let r = d.rechunk(&kept, &mut out)?;
        assert!(r.consumed <= kept.len());
        used += r.consumed;
        kept.drain(..r.consumed);
        if r.done {
            return Ok((out, true, used));
        }
    }
    Ok((out, false, used))
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
    let re_whole = rechunk(&[stream]);
    let re_split = rechunk(&[&stream[..cut], &stream[cut..]]);
    match (&re_whole, &re_split) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(a, b),
        // A cut can only move where an error is found, not whether there is one, once the
        // whole input was seen; an incomplete body is not an error.
        (a, b) => panic!("whole {a:?}, split {b:?}"),
    }
    if let Ok((out, true, used)) = &re_whole {
        let (ok, body, len) = &whole;
        assert_eq!((ok, len), (&Ok(true), used), "decode agrees on the end");
        assert_eq!(
            rechunk(&[out]).as_ref(),
            Ok(&(out.clone(), true, out.len()))
        );
        let back = decode(&[out]);
        assert_eq!((back.0, &back.1, back.2), (Ok(true), body, out.len()));
    }
}
