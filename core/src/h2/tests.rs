use http::{HeaderMap, HeaderValue};

use proptest::prelude::*;

use super::hpack::{CODES_OF_LEN, HpackError, SYMBOLS, Table, huffman_decode};
use super::*;

fn hosts(values: &[&'static str]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for v in values {
        h.append(http::header::HOST, HeaderValue::from_static(v));
    }
    h
}

fn agrees(authority: &str, https: bool, host: &[&'static str]) -> bool {
    host_agrees(
        &hosts(host),
        Authority {
            https,
            value: authority,
        },
    )
}

/// RFC 9113 §8.3.1 (C-PATH-12 refined): `host` must name `:authority`'s entity; equal after
/// case folding and default ports.
#[test]
fn host_and_authority_agree_after_scheme_based_normalisation() {
    assert!(agrees("example.com", false, &[]), "no host field");
    assert!(agrees("example.com", false, &["example.com"]));
    assert!(agrees("Example.COM", false, &["example.com"]), "case");
    assert!(
        agrees("example.com", false, &["example.com:80"]),
        "http default"
    );
    assert!(
        agrees("example.com:443", true, &["EXAMPLE.com"]),
        "https default"
    );
    assert!(
        agrees("example.com:", false, &["example.com"]),
        "empty port"
    );
    assert!(agrees("[::1]:8080", false, &["[::1]:8080"]));
    assert!(agrees("a:8080", false, &["a:8080", "A:8080"]), "two equal");

    assert!(!agrees("example.com", false, &["evil.example"]));
    assert!(!agrees("example.com", false, &["example.com:8080"]), "port");
    assert!(
        !agrees("example.com", true, &["example.com:80"]),
        "80 is not https's"
    );
    assert!(!agrees("a", false, &["a", "b"]), "one of two differs");
    assert!(!agrees("a", false, &["user@a"]), "userinfo");
    assert!(!agrees("a", false, &["a:99999"]), "port range");
    assert!(!agrees("a", false, &[""]), "empty host");
    assert!(!agrees("[::1]", false, &["[::2]"]));
}

/// RFC 7541 Appendix C.4: requests with Huffman-coded strings, one table across the three.
#[test]
fn hpack_rfc7541_c4_requests_with_huffman() {
    let mut t = Table::new(4096);
    let c41 = hex("828684418cf1e3c2e5f23a6ba0ab90f4ff");
    let c42 = hex("828684be5886a8eb10649cbf");
    let c43 = hex("828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf");
    assert_eq!(t.block(&c41), Ok(true));
    assert_eq!(t.block(&c42), Ok(true));
    assert_eq!(t.block(&c43), Ok(true));
    // Index 62 is now `custom-key: custom-value` (not pseudo), 63 `cache-control`, 64
    // `:authority` (pseudo), each by name.
    assert_eq!(t.block(&[0x80 | 62]), Ok(false));
    assert_eq!(t.block(&[0x80 | 63]), Ok(false));
    assert_eq!(t.block(&[0x80 | 64]), Ok(true));
    assert_eq!(t.block(&[0x80 | 65]), Err(HpackError::Index));
}

/// RFC 7541 Appendix C.6: responses with Huffman coding and a 256-byte table (evictions).
#[test]
fn hpack_rfc7541_c6_evictions_with_a_small_table() {
    let mut t = Table::new(256);
    let c61 = hex(
        "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad171863\
         c78f0b97c8e9ae82ae43d3",
    );
    let c62 = hex("4883640effc1c0bf");
    let c63 = hex(
        "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7b3\
         35dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007",
    );
    assert_eq!(t.block(&c61), Ok(true));
    assert_eq!(t.block(&c62), Ok(true));
    assert_eq!(t.block(&c63), Ok(true));
    // After C.6.3 the table holds set-cookie, content-encoding, date (RFC 7541): three entries.
    assert_eq!(t.block(&[0x80 | 64]), Ok(false));
    assert_eq!(t.block(&[0x80 | 65]), Err(HpackError::Index));
}

#[test]
fn hpack_pseudo_names_by_literal_and_refusals() {
    let mut t = Table::new(4096);
    // Literal without indexing, new name ":path" (raw), value "/".
    let mut b = vec![0x00, 5];
    b.extend_from_slice(b":path");
    b.extend_from_slice(&[1, b'/']);
    assert_eq!(t.block(&b), Ok(true));
    // The same name Huffman-coded (":path" = 0xb9 0x58 0xd3 0x3f per RFC 7541 Appendix B).
    let mut b = vec![0x10, 0x80 | 4, 0xb9, 0x58, 0xd3, 0x3f, 1, b'/'];
    assert_eq!(t.block(&b), Ok(true));
    // Literal with indexing of a pseudo name, then a reference to it by name index.
    b[0] = 0x40;
    assert_eq!(t.block(&b), Ok(true));
    assert_eq!(t.block(&[0x40 | 62, 1, b'x']), Ok(true));
    assert_eq!(
        t.block(&[0x0f, 0x2f, 1, b'x']),
        Ok(true),
        "name index 62 as 4-bit prefix"
    );
    // Regular names.
    assert_eq!(t.block(&[0x40, 1, b'a', 1, b'b']), Ok(false));
    assert_eq!(t.block(&[0x80 | 15]), Ok(false), "static accept-charset");
    assert_eq!(t.block(&[0x80 | 14]), Ok(true), "static :status 500");
    // Errors.
    assert_eq!(t.block(&[0x80]), Err(HpackError::Index));
    assert_eq!(t.block(&[0x00, 5, b':']), Err(HpackError::Truncated));
    assert_eq!(
        t.block(&[0x3f, 0xe2, 0x1f]),
        Err(HpackError::SizeUpdate),
        "over 4096"
    );
    assert_eq!(
        t.block(&[0x82, 0x20]),
        Err(HpackError::SizeUpdate),
        "after a field"
    );
    assert_eq!(
        t.block(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
        Err(HpackError::Integer)
    );
    // A size update to 0 empties the table.
    let mut t = Table::new(4096);
    assert_eq!(t.block(&[0x40, 1, b'a', 1, b'b']), Ok(false));
    assert_eq!(t.block(&[0x20, 0x80 | 62]), Err(HpackError::Index));
}

#[test]
fn huffman_decoding_follows_rfc7541() {
    // "www.example.com", "no-cache", "custom-key" (RFC 7541 C.4).
    assert_eq!(
        huffman_decode(&hex("f1e3c2e5f23a6ba0ab90f4ff")),
        Ok((15, Some(b'w')))
    );
    assert_eq!(huffman_decode(&hex("a8eb10649cbf")), Ok((8, Some(b'n'))));
    assert_eq!(
        huffman_decode(&hex("25a849e95ba97d7f")),
        Ok((10, Some(b'c')))
    );
    assert_eq!(huffman_decode(&[]), Ok((0, None)));
    // Padding of 8 ones, or padding that is not ones, or EOS itself.
    assert_eq!(huffman_decode(&[0xff]), Err(HpackError::Huffman));
    assert_eq!(
        huffman_decode(&[0x00]),
        Err(HpackError::Huffman),
        "'0' + 0 padding"
    );
    assert_eq!(
        huffman_decode(&[0xff, 0xff, 0xff, 0xfc]),
        Err(HpackError::Huffman),
        "EOS"
    );
}

fn hex(s: &str) -> Vec<u8> {
    let s: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    s.chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap_or("00"), 16).unwrap_or(0))
        .collect()
}

// ---- the inbound guard ----

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap_or(0);
    let mut f = len.to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// `POST /` with `:authority a`, static references and literals only.
fn request_block() -> Vec<u8> {
    vec![0x83, 0x86, 0x84, 0x01, 1, b'a']
}

/// A trailer block: `x-sum: 1`, then `:path: /evil` when `pseudo`.
fn trailer_block(pseudo: bool) -> Vec<u8> {
    let mut b = vec![0x00, 5];
    b.extend_from_slice(b"x-sum");
    b.extend_from_slice(&[1, b'1']);
    if pseudo {
        b.splice(0..0, [0x04, 5, b'/', b'e', b'v', b'i', b'l']);
    }
    b
}

/// Feed `bytes` in pieces of `step`, the way an adapter does; what h2 would read.
fn run(guard: &mut Inbound, bytes: &[u8], step: usize) -> Vec<u8> {
    let mut pending = Vec::new();
    let mut out = Vec::new();
    for piece in bytes.chunks(step.max(1)) {
        pending.extend_from_slice(piece);
        let n = guard.scan(&mut pending);
        out.extend(pending.drain(..n));
    }
    out.extend(pending);
    out
}

fn connection(trailers: &[u8], trailer_flags: u8) -> Vec<u8> {
    let mut c = PREFACE.to_vec();
    c.extend(frame(4, 0, 0, &[]));
    c.extend(frame(1, 0x4, 1, &request_block()));
    c.extend(frame(0, 0, 1, b"hello"));
    c.extend(frame(1, trailer_flags, 1, trailers));
    c.extend(frame(1, 0x5, 3, &request_block()));
    c
}

/// Where the trailer HEADERS frame's flags are in [`connection`].
fn trailer_flags_at() -> usize {
    PREFACE.len() + 9 + (9 + request_block().len()) + (9 + 5) + 4
}

/// RFC 9113 §8.1 (C-PATH-12 refined): a trailer block with a pseudo-header field loses its
/// END_STREAM (h2 then resets the stream); a clean one and everything else pass unchanged, in
/// any split of the reads.
#[test]
fn inbound_marks_pseudo_in_trailers_only() {
    for step in [1, 3, 9, 17, 64, 10_000] {
        let clean = connection(&trailer_block(false), 0x5);
        let mut g = Inbound::new(1 << 20);
        assert_eq!(run(&mut g, &clean, step), clean, "step {step}");
        assert_eq!(g.refused(), 0);

        let bad = connection(&trailer_block(true), 0x5);
        let mut g = Inbound::new(1 << 20);
        let seen = run(&mut g, &bad, step);
        assert_eq!(g.refused(), 1, "step {step}");
        let at = trailer_flags_at();
        assert_eq!(seen[at], 0x4, "END_STREAM cleared, step {step}");
        let mut expected = bad.clone();
        expected[at] = 0x4;
        assert_eq!(seen, expected, "nothing else changed, step {step}");
    }
}

/// A trailer block split over CONTINUATION frames is held until its end, then decided.
#[test]
fn inbound_holds_a_trailer_block_until_end_headers() {
    let block = trailer_block(true);
    let (head, tail) = block.split_at(3);
    let mut c = PREFACE.to_vec();
    c.extend(frame(1, 0x4, 1, &request_block()));
    let held_from = c.len();
    c.extend(frame(1, 0x1, 1, head));
    c.extend(frame(9, 0x4, 1, tail));
    let mut g = Inbound::new(1 << 20);
    let mut pending = c[..held_from + 9 + head.len()].to_vec();
    assert_eq!(
        g.scan(&mut pending),
        held_from,
        "held at the trailer HEADERS"
    );
    pending.drain(..held_from);
    pending.extend_from_slice(&c[held_from + 9 + head.len()..]);
    assert_eq!(
        g.scan(&mut pending),
        pending.len(),
        "released at END_HEADERS"
    );
    assert_eq!(pending[4], 0x0, "END_STREAM cleared on the HEADERS frame");
    assert_eq!(g.refused(), 1);
}

/// The pseudo name may come from the dynamic table, entered by an earlier request.
#[test]
fn inbound_follows_the_dynamic_table() {
    // Request 1 enters `:path: /x` (literal with incremental indexing, name index 4).
    let req = [0x83, 0x86, 0x44, 2, b'/', b'x', 0x01, 1, b'a'];
    let mut c = PREFACE.to_vec();
    c.extend(frame(1, 0x5, 1, &req));
    // Request 3's trailers refer to entry 62 by index.
    c.extend(frame(1, 0x4, 3, &request_block()));
    c.extend(frame(1, 0x5, 3, &[0x80 | 62]));
    let mut g = Inbound::new(1 << 20);
    let seen = run(&mut g, &c, 7);
    assert_eq!(g.refused(), 1);
    assert_eq!(seen[c.len() - 1 - 9 + 4], 0x4);
}

/// Fail closed: after a block over the bound, trailers cannot be checked and are malformed;
/// a held block may not grow without bound either.
#[test]
fn inbound_fails_closed_beyond_its_bound() {
    let mut big = request_block();
    big.extend_from_slice(&[0x00, 1, b'x', 100]);
    big.extend_from_slice(&[b'v'; 100]);
    let mut c = PREFACE.to_vec();
    c.extend(frame(1, 0x4, 1, &big));
    c.extend(frame(1, 0x5, 1, &trailer_block(false)));
    let mut g = Inbound::new(64);
    let seen = run(&mut g, &c, 1000);
    assert_eq!(g.refused(), 1);
    assert_eq!(seen.len(), c.len());

    let mut c = PREFACE.to_vec();
    c.extend(frame(1, 0x4, 1, &request_block()));
    c.extend(frame(1, 0x1, 1, &[]));
    for _ in 0..20 {
        c.extend(frame(9, 0, 1, &[]));
    }
    let mut g = Inbound::new(64);
    let seen = run(&mut g, &c, 1000);
    assert_eq!(g.refused(), 1, "decided once held past the bound");
    assert_eq!(seen.len(), c.len(), "and released");
}

/// Padded and prioritised HEADERS frames are read like h2 reads them.
#[test]
fn inbound_reads_padding_and_priority() {
    let mut payload = vec![3]; // pad length
    payload.extend_from_slice(&[0, 0, 0, 0, 16]); // priority
    payload.extend(trailer_block(true));
    payload.extend_from_slice(&[0, 0, 0]);
    let mut c = PREFACE.to_vec();
    c.extend(frame(1, 0x4, 1, &request_block()));
    c.extend(frame(1, 0x1 | 0x4 | 0x8 | 0x20, 1, &payload));
    let mut g = Inbound::new(1 << 20);
    let seen = run(&mut g, &c, 5);
    assert_eq!(g.refused(), 1);
    assert_eq!(seen[c.len() - payload.len() - 9 + 4], 0x4 | 0x8 | 0x20);
}

/// The decoder as it first was, one bit at a time through the canonical code: the reference
/// the table-driven [`huffman_decode`] must agree with on every input.
fn huffman_decode_bitwise(bytes: &[u8]) -> Result<(usize, Option<u8>), HpackError> {
    let mut count = 0usize;
    let mut first_symbol = None;
    let (mut code, mut len, mut start, mut index) = (0u32, 0usize, 0u32, 0usize);
    for &byte in bytes {
        for bit in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> bit) & 1);
            len += 1;
            let n = u32::from(CODES_OF_LEN[len]);
            if let Some(offset) = code.checked_sub(start).filter(|&o| o < n) {
                let symbol = SYMBOLS[index + offset as usize];
                let Ok(octet) = u8::try_from(symbol) else {
                    return Err(HpackError::Huffman);
                };
                first_symbol.get_or_insert(octet);
                count += 1;
                (code, len, start, index) = (0, 0, 0, 0);
            } else {
                index += n as usize;
                start = (start + n) << 1;
                if len == 30 {
                    return Err(HpackError::Huffman);
                }
            }
        }
    }
    if len >= 8 || code != (1u32 << len) - 1 {
        return Err(HpackError::Huffman);
    }
    Ok((count, first_symbol))
}

/// Each symbol's code and length (256 is EOS), from the canonical table.
fn huffman_codes() -> Vec<(u32, usize)> {
    let mut codes = vec![(0, 0); 257];
    let (mut code, mut i) = (0u32, 0usize);
    for (len, &n) in CODES_OF_LEN.iter().enumerate() {
        for _ in 0..n {
            codes[usize::from(SYMBOLS[i])] = (code, len);
            code += 1;
            i += 1;
        }
        code <<= 1;
    }
    codes
}

/// The bits of `symbols` (EOS where a symbol is 256), then `extra` bits of `extra_bits`, then
/// `fill` up to a whole octet: valid strings (no extra, ones as fill) and every way of
/// breaking one (EOS inside, padding of zeros, padding of 8 ones or more).
fn huffman_encode(symbols: &[u16], extra: usize, extra_bits: u64, fill: bool) -> Vec<u8> {
    let codes = huffman_codes();
    let mut bits = Vec::new();
    for &s in symbols {
        let (code, len) = codes[usize::from(s)];
        bits.extend((0..len).rev().map(|b| (code >> b) & 1 == 1));
    }
    bits.extend((0..extra).rev().map(|b| (extra_bits >> b) & 1 == 1));
    while bits.len() % 8 != 0 {
        bits.push(fill);
    }
    bits.chunks(8)
        .map(|o| o.iter().fold(0u8, |a, &b| (a << 1) | u8::from(b)))
        .collect()
}

#[test]
fn huffman_table_covers_the_code() {
    // Every octet's code decodes to it, alone and after each other octet's.
    for a in 0..=255u16 {
        let one = huffman_encode(&[a], 0, 0, true);
        assert_eq!(huffman_decode(&one), Ok((1, Some(a as u8))));
        for b in 0..=255u16 {
            let two = huffman_encode(&[a, b], 0, 0, true);
            assert_eq!(huffman_decode(&two), Ok((2, Some(a as u8))));
        }
    }
    assert_eq!(
        huffman_decode(&huffman_encode(&[b'a'.into(), 256], 0, 0, true)),
        Err(HpackError::Huffman)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn huffman_table_decoder_equals_bitwise(bytes in proptest::collection::vec(any::<u8>(), 0..48)) {
        prop_assert_eq!(huffman_decode(&bytes), huffman_decode_bitwise(&bytes));
    }

    #[test]
    fn huffman_table_decoder_equals_bitwise_on_encodings(
        symbols in proptest::collection::vec(
            prop_oneof![20 => 0u16..256, 1 => Just(256u16)], 0..24),
        extra in prop_oneof![4 => Just(0usize), 1 => 0usize..40],
        extra_bits in prop_oneof![any::<u64>(), Just(u64::MAX)],
        fill in prop_oneof![4 => Just(true), 1 => Just(false)],
    ) {
        let bytes = huffman_encode(&symbols, extra, extra_bits, fill);
        let expected = huffman_decode_bitwise(&bytes);
        prop_assert_eq!(huffman_decode(&bytes), expected);
        if extra == 0 && fill && !symbols.contains(&256) {
            prop_assert_eq!(expected, Ok((symbols.len(), symbols.first().map(|&s| s as u8))));
        }
    }
}
