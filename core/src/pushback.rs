//! Backend pushback (C-RETRY-11): a backend that answers `503` with `Retry-After` says how long
//! it wants no traffic, and weir takes it out of selection for that long, capped at
//! `health_check.retry_after_max`. The ejection itself is outlier detection's (reason
//! `retry_after`, within its cap: [`crate::pool::Pool::push_back`]); this module only reads the
//! header.
//!
//! `Retry-After` is delta-seconds or an HTTP-date (RFC 9110 §10.2.3). A date needs the wall
//! clock, which core never reads: the caller passes the current wall-clock time as a duration
//! since the Unix epoch. All three date forms a recipient must accept (RFC 9110 §5.6.7) are
//! read: IMF-fixdate, the obsolete RFC 850 form and asctime. Anything else (a malformed value,
//! a date in the past, `0`) asks for nothing and is ignored, as RFC 9110 lets a recipient do
//! with a value it cannot parse.

use core::time::Duration;

use http::HeaderName;

use crate::headers::HeaderLines;

#[cfg(all(test, not(loom)))]
mod proptests;
#[cfg(all(test, not(loom)))]
mod tests;

/// The status whose `Retry-After` is pushback.
pub const PUSHBACK_STATUS: u16 = 503;

/// How long a response of `status` with `headers` asks its backend to be left alone, read at
/// wall-clock time `wall` (since the Unix epoch): `Some` only for a `503` whose first
/// `Retry-After` parses to a delay above zero. Not capped: the pool applies
/// `retry_after_max`.
#[must_use]
pub fn requested<H: HeaderLines + ?Sized>(
    status: u16,
    headers: &H,
    wall: Duration,
) -> Option<Duration> {
    if status != PUSHBACK_STATUS {
        return None;
    }
    let value = headers.first_line(&HeaderName::from_static("retry-after"))?;
    retry_after(value, wall)
}

/// A `Retry-After` value as a delay from wall-clock time `wall`: delta-seconds, or an
/// HTTP-date minus `wall`. `None` when malformed or when it asks for no delay (zero, or a date
/// not after `wall`).
#[must_use]
pub fn retry_after(value: &[u8], wall: Duration) -> Option<Duration> {
    let value = trim(value);
    let delay = if !value.is_empty() && value.iter().all(u8::is_ascii_digit) {
        Duration::from_secs(digits(value).unwrap_or(u64::MAX))
    } else {
        Duration::from_secs(http_date(value, wall)?).checked_sub(wall)?
    };
    (!delay.is_zero()).then_some(delay)
}

/// An HTTP-date (any of the three forms) as seconds since the Unix epoch. `wall` places an
/// RFC 850 two-digit year (RFC 9110 §5.6.7: a year more than 50 years ahead is the most recent
/// past one with those digits).
#[must_use]
pub fn http_date(value: &[u8], wall: Duration) -> Option<u64> {
    let s = core::str::from_utf8(trim(value)).ok()?;
    imf_fixdate(s)
        .or_else(|| rfc850(s, wall))
        .or_else(|| asctime(s))
}

/// `Sun, 06 Nov 1994 08:49:37 GMT`
fn imf_fixdate(s: &str) -> Option<u64> {
    let (day_name, rest) = s.split_once(", ")?;
    short_day(day_name)?;
    let mut parts = rest.split(' ');
    let day = two_digits(parts.next()?)?;
    let month = month(parts.next()?)?;
    let year = four_digits(parts.next()?)?;
    let time = clock(parts.next()?)?;
    (parts.next()? == "GMT" && parts.next().is_none()).then_some(())?;
    unix(year, month, day, time)
}

/// `Sunday, 06-Nov-94 08:49:37 GMT`
fn rfc850(s: &str, wall: Duration) -> Option<u64> {
    let (day_name, rest) = s.split_once(", ")?;
    const LONG: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    LONG.contains(&day_name).then_some(())?;
    let mut parts = rest.split(' ');
    let mut date = parts.next()?.split('-');
    let day = two_digits(date.next()?)?;
    let month = month(date.next()?)?;
    let yy = two_digits(date.next()?)?;
    date.next().is_none().then_some(())?;
    let time = clock(parts.next()?)?;
    (parts.next()? == "GMT" && parts.next().is_none()).then_some(())?;
    let this_year = year_of(wall.as_secs());
    let mut year = this_year - this_year % 100 + u64::from(yy);
    if year > this_year + 50 {
        year -= 100;
    }
    unix(year, month, day, time)
}

/// `Sun Nov  6 08:49:37 1994`
fn asctime(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    // Fixed widths: "Www Mmm dd hh:mm:ss yyyy", the day padded with a space.
    if b.len() != 24 || b[3] != b' ' || b[7] != b' ' || b[10] != b' ' || b[19] != b' ' {
        return None;
    }
    short_day(&s[0..3])?;
    let month = month(&s[4..7])?;
    let day = match (b[8], b[9]) {
        (b' ', d @ b'1'..=b'9') => u32::from(d - b'0'),
        _ => two_digits(&s[8..10])?,
    };
    let time = clock(&s[11..19])?;
    let year = four_digits(&s[20..24])?;
    unix(year, month, day, time)
}

fn short_day(s: &str) -> Option<()> {
    ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
        .contains(&s)
        .then_some(())
}

fn month(s: &str) -> Option<u32> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    MONTHS.iter().position(|m| *m == s).map(|i| i as u32 + 1)
}

/// `hh:mm:ss` as seconds of the day (a leap second, `:60`, is accepted).
fn clock(s: &str) -> Option<u64> {
    let mut parts = s.split(':');
    let h = two_digits(parts.next()?)?;
    let m = two_digits(parts.next()?)?;
    let sec = two_digits(parts.next()?)?;
    (parts.next().is_none() && h < 24 && m < 60 && sec <= 60).then_some(())?;
    Some(u64::from(h * 3600 + m * 60 + sec))
}

fn two_digits(s: &str) -> Option<u32> {
    (s.len() == 2).then_some(())?;
    digits(s.as_bytes()).map(|n| n as u32)
}

fn four_digits(s: &str) -> Option<u64> {
    (s.len() == 4).then_some(())?;
    digits(s.as_bytes())
}

/// ASCII digits as a number; `None` when empty, not all digits, or beyond `u64`.
fn digits(b: &[u8]) -> Option<u64> {
    if b.is_empty() {
        return None;
    }
    b.iter().try_fold(0u64, |n, &c| {
        c.is_ascii_digit().then_some(())?;
        n.checked_mul(10)?.checked_add(u64::from(c - b'0'))
    })
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|c| !matches!(c, b' ' | b'\t'));
    let end = b.iter().rposition(|c| !matches!(c, b' ' | b'\t'));
    match (start, end) {
        (Some(s), Some(e)) => &b[s..=e],
        _ => &[],
    }
}

fn is_leap(year: u64) -> bool {
    year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400))
}

fn days_in_month(year: u64, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to `year-month-day` (proleptic Gregorian), `year` ≥ 1970.
fn days_from_civil(year: u64, month: u32, day: u32) -> u64 {
    // Howard Hinnant's algorithm, with years counted from March so that February ends a year.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let m = u64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + u64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The calendar year of `secs` since the Unix epoch.
fn year_of(secs: u64) -> u64 {
    // The last second of 9999: no four-digit date is later, and the arithmetic stays far from
    // overflow whatever clock the caller has.
    let secs = secs.min(253_402_300_799);
    let mut year = 1970 + secs / 31_556_952; // mean Gregorian year: at most one off
    while year > 1970 && days_from_civil(year, 1, 1) * 86_400 > secs {
        year -= 1;
    }
    while days_from_civil(year + 1, 1, 1) * 86_400 <= secs {
        year += 1;
    }
    year
}

/// Seconds since the Unix epoch; `None` for an impossible date or one before 1970.
fn unix(year: u64, month: u32, day: u32, time: u64) -> Option<u64> {
    (year >= 1970 && day >= 1 && day <= days_in_month(year, month)).then_some(())?;
    Some(days_from_civil(year, month, day) * 86_400 + time)
}

/// `secs` since the Unix epoch as an IMF-fixdate (tests, and the simulator's backends).
#[must_use]
pub fn imf_fixdate_of(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = secs / 86_400;
    let year = year_of(secs);
    let mut month = 1;
    while month < 12 && days_from_civil(year, month + 1, 1) <= days {
        month += 1;
    }
    let day = days - days_from_civil(year, month, 1) + 1;
    let t = secs % 86_400;
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[month as usize - 1],
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}
