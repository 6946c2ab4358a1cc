//! C-GRPC-2: the `grpc-timeout` parser and the encoder of the value weir passes on, on
//! arbitrary bytes. The oracle: a value parses exactly when it is 1 to 8 ASCII digits and one
//! of `H M S m u n` (optional whitespace around it), to digits × unit; and for any remaining
//! time, the value sent never exceeds it, is zero only when nothing remains, fits 8 digits and
//! reads back as what it says.

use core::time::Duration;

use weir_core::grpc::timeout::{encode, parse};

pub fn run(data: &[u8]) {
    let value = data.trim_ascii();
    let well_formed = value.len() >= 2
        && value.len() <= 9
        && b"HMSmun".contains(&value[value.len() - 1])
        && value[..value.len() - 1].iter().all(u8::is_ascii_digit);
    let parsed = parse(data);
    assert_eq!(parsed.is_ok(), well_formed, "{data:?}: {parsed:?}");
    if let Ok(d) = parsed {
        let (digits, unit) = value.split_at(value.len() - 1);
        let n: u64 = std::str::from_utf8(digits).unwrap().parse().unwrap();
        let per = match unit[0] {
            b'H' => 3_600_000_000_000u128,
            b'M' => 60_000_000_000,
            b'S' => 1_000_000_000,
            b'm' => 1_000_000,
            b'u' => 1_000,
            _ => 1,
        };
        assert_eq!(d.as_nanos(), u128::from(n) * per, "{data:?}");
    }
    // Any remaining time from the first 12 bytes (seconds and nanoseconds).
    let mut secs = [0u8; 8];
    let mut nanos = [0u8; 4];
    for (i, b) in data.iter().take(12).enumerate() {
        if i < 8 {
            secs[i] = *b;
        } else {
            nanos[i - 8] = *b;
        }
    }
    let remaining = Duration::new(
        u64::from_le_bytes(secs),
        u32::from_le_bytes(nanos) % 1_000_000_000,
    );
    let t = encode(remaining);
    assert!(t.duration() <= remaining, "{t} for {remaining:?}");
    assert_eq!(t.value() == 0, remaining.is_zero(), "{t} for {remaining:?}");
    let bytes = t.to_bytes();
    assert!(bytes.as_bytes().len() <= 9);
    assert_eq!(bytes.as_bytes(), t.to_string().as_bytes());
    assert_eq!(parse(bytes.as_bytes()), Ok(t.duration()));
}
