//! `grpc-timeout`: the client's deadline for its call (C-GRPC-2), read and written.
//!
//! The gRPC wire format (grpc/doc/PROTOCOL-HTTP2.md, "Timeout") is 1 to 8 ASCII digits and one
//! unit: `H` hours, `M` minutes, `S` seconds, `m` milliseconds, `u` microseconds, `n`
//! nanoseconds. Anything else is malformed. What to do with a malformed value is a choice:
//! Envoy ignores it (the call runs without a deadline); grpc-go's server refuses the call with
//! `INTERNAL` ("malformed grpc-timeout"). weir refuses it too, with `INTERNAL` (C-GRPC-3's
//! answer to a malformed request), before any backend is asked: a client that sent a deadline
//! expects it to hold, and a proxy that silently drops it would let the call run for as long
//! as the backend likes, while the backend itself (grpc-go, gRPC C++) would refuse the header
//! had it reached it.
//!
//! Passed on, the deadline is what remains of it ([`encode`]): never more than remains (the
//! value is rounded down, in the finest unit in which it fits 8 digits), and never zero while
//! any time remains (nanoseconds are the finest unit, and a remainder below 0.1 s is written
//! in them exactly).

use core::fmt;
use core::time::Duration;

/// The header's name.
pub const NAME: &str = "grpc-timeout";

/// The most digits a value may have.
const MAX_DIGITS: usize = 8;
/// The largest number 8 digits hold.
const MAX_VALUE: u64 = 99_999_999;

/// A malformed `grpc-timeout` value (the call is answered `INTERNAL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeoutError {
    /// No digit before the unit, or more than 8.
    Digits,
    /// A byte that is not a digit before the unit.
    NotADigit,
    /// The last byte is not one of `H M S m u n` (or the value is empty).
    Unit,
}

impl fmt::Display for TimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeoutError::Digits => "grpc-timeout needs 1 to 8 digits",
            TimeoutError::NotADigit => "grpc-timeout has a byte that is not a digit",
            TimeoutError::Unit => "grpc-timeout has no unit (H, M, S, m, u or n)",
        })
    }
}

/// The length of one unit.
fn unit(byte: u8) -> Option<Duration> {
    Some(match byte {
        b'H' => Duration::from_secs(3600),
        b'M' => Duration::from_secs(60),
        b'S' => Duration::from_secs(1),
        b'm' => Duration::from_millis(1),
        b'u' => Duration::from_micros(1),
        b'n' => Duration::from_nanos(1),
        _ => return None,
    })
}

/// Parse a `grpc-timeout` value. Optional whitespace around it (which HTTP allows around any
/// field value) is ignored; nothing else is.
///
/// # Errors
///
/// [`TimeoutError`] when the value is not 1 to 8 ASCII digits followed by one unit.
pub fn parse(value: &[u8]) -> Result<Duration, TimeoutError> {
    let value = value.trim_ascii();
    let Some((&last, digits)) = value.split_last() else {
        return Err(TimeoutError::Unit);
    };
    let per = unit(last).ok_or(TimeoutError::Unit)?;
    if digits.is_empty() || digits.len() > MAX_DIGITS {
        return Err(TimeoutError::Digits);
    }
    let mut n: u32 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return Err(TimeoutError::NotADigit);
        }
        // At most 8 digits: fits a u32 (99_999_999 < 2^32).
        n = n * 10 + u32::from(d - b'0');
    }
    // At most 99_999_999 hours (about 11,400 years): within Duration's range.
    Ok(per * n)
}

/// A `grpc-timeout` value to send: what remains of a deadline, as the wire format spells it.
/// Written by `Display` (at most 9 bytes), without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Timeout {
    value: u32,
    unit: u8,
}

impl Timeout {
    /// The number before the unit.
    #[must_use]
    pub const fn value(self) -> u32 {
        self.value
    }

    /// The unit byte (`H M S m u n`).
    #[must_use]
    pub const fn unit(self) -> u8 {
        self.unit
    }

    /// The value as header bytes (at most 9: 8 digits and the unit), without allocating.
    #[must_use]
    pub fn to_bytes(self) -> TimeoutBytes {
        let mut buf = [0u8; 9];
        let mut digits = [0u8; 8];
        let (mut n, mut len) = (self.value, 0);
        loop {
            // `value` has at most 8 digits (`encode`), so `len` stays below 8.
            digits[len] = b'0' + (n % 10) as u8;
            len += 1;
            n /= 10;
            if n == 0 || len == digits.len() {
                break;
            }
        }
        for (i, d) in digits[..len].iter().rev().enumerate() {
            buf[i] = *d;
        }
        buf[len] = self.unit;
        TimeoutBytes { buf, len: len + 1 }
    }

    /// The duration it stands for.
    #[must_use]
    pub fn duration(self) -> Duration {
        // `unit` is always one of the six (the only constructor is `encode`).
        unit(self.unit).unwrap_or(Duration::ZERO) * self.value
    }
}

impl fmt::Display for Timeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.value, char::from(self.unit))
    }
}

/// A [`Timeout`] as header bytes ([`Timeout::to_bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeoutBytes {
    buf: [u8; 9],
    len: usize,
}

impl TimeoutBytes {
    /// The bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// The value to send for `remaining`: in the finest unit whose count fits 8 digits, rounded
/// down, so never a longer deadline than remains. A remainder below 0.1 s is exact (in
/// nanoseconds), so the value is zero only when nothing remains. Beyond 99,999,999 hours the
/// largest value is sent.
#[must_use]
pub fn encode(remaining: Duration) -> Timeout {
    let nanos = remaining.as_nanos();
    for (unit, per) in [
        (b'n', 1u128),
        (b'u', 1_000),
        (b'm', 1_000_000),
        (b'S', 1_000_000_000),
        (b'M', 60_000_000_000),
        (b'H', 3_600_000_000_000),
    ] {
        let count = nanos / per;
        if count <= u128::from(MAX_VALUE) {
            // Within 8 digits, so within u32.
            let value = u32::try_from(count).unwrap_or(u32::MAX);
            return Timeout { value, unit };
        }
    }
    Timeout {
        value: MAX_VALUE as u32,
        unit: b'H',
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
