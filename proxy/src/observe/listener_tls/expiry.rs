//! A certificate's `notAfter` (RFC 5280 §4.1.2.5), for the expiry metric: a few lines of DER
//! walking over `Certificate → TBSCertificate → Validity`, because neither rustls nor
//! rustls-webpki exposes it. Anything unexpected answers `None` (the metric is then left out);
//! the handshake never depends on it.

use rustls::pki_types::CertificateDer;

/// One DER element: its tag, its contents, and what follows it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;
/// `[0] EXPLICIT Version`.
const VERSION: u8 = 0xa0;

/// The leaf's `notAfter` in seconds since the Unix epoch.
#[must_use]
pub fn not_after(cert: &CertificateDer<'_>) -> Option<i64> {
    let (tag, certificate, _) = element(cert.as_ref())?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, mut tbs, _) = element(certificate)?;
    if tag != SEQUENCE {
        return None;
    }
    if tbs.first() == Some(&VERSION) {
        tbs = element(tbs)?.2;
    }
    let (_serial, _, rest) = element(tbs)?;
    let (_signature, _, rest) = element(rest)?;
    let (_issuer, _, rest) = element(rest)?;
    let (tag, validity, _) = element(rest)?;
    if tag != SEQUENCE {
        return None;
    }
    let (_, _not_before, rest) = element(validity)?;
    let (tag, time, _) = element(rest)?;
    parse_time(tag, time)
}

/// `YYMMDDHHMMSSZ` (UTCTime, years 1950..=2049) or `YYYYMMDDHHMMSSZ` (GeneralizedTime).
fn parse_time(tag: u8, text: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(text).ok()?;
    let digits = text.strip_suffix('Z')?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (year, rest) = match (tag, digits.len()) {
        (UTC_TIME, 12) => {
            let yy: i64 = digits[..2].parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &digits[2..])
        }
        (GENERALIZED_TIME, 14) => (digits[..4].parse().ok()?, &digits[4..]),
        _ => return None,
    };
    let field = |i: usize| rest[i..i + 2].parse::<i64>().ok();
    let (month, day) = (field(0)?, field(2)?);
    let (hour, minute, second) = (field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some(days * 86_400 + hour * 3600 + minute * 60 + second.min(60))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests;
