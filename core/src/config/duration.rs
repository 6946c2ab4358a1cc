//! Durations as the configuration writes them: Go's `time.ParseDuration` format (the reference
//! balancer's), read by [`parse_duration`] and written back exactly by [`format_duration`] (the
//! status document and the console send a value back in a `PATCH` unchanged).

use core::time::Duration;

/// Parse a duration the way Go's `time.ParseDuration` does (the reference balancer's format):
/// one or more `<number><unit>` parts, the number possibly with a fraction, units `ns`, `us`
/// (`µs`), `ms`, `s`, `m`, `h`; `0` alone is zero. No sign: negative durations are rejected.
/// Examples: `50ms`, `5s`, `1m30s`, `1.5h`, `0s`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "invalid duration {text:?}: write a number and a unit (ns, us, ms, s, m, h), \
             for example 50ms, 5s or 1m30s"
        )
    };
    if text.starts_with('-') {
        return Err(format!("invalid duration {text:?}: must not be negative"));
    }
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err(bad());
    }
    let mut rest = text;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let int_part = &rest[..int_len];
        rest = &rest[int_len..];
        let mut frac_part = "";
        if let Some(after_dot) = rest.strip_prefix('.') {
            let frac_len = after_dot
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(after_dot.len());
            frac_part = &after_dot[..frac_len];
            rest = &after_dot[frac_len..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(bad());
        }
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit: u128 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        let too_long = || format!("invalid duration {text:?}: too long");
        // At most 20 integer digits fit in u128 with room for the unit multiplication below.
        if int_part.len() > 20 {
            return Err(too_long());
        }
        let whole: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| bad())?
        };
        // Fraction: keep 18 digits (attosecond-scale precision is far below a nanosecond).
        let frac_digits = &frac_part[..frac_part.len().min(18)];
        let frac: u128 = if frac_digits.is_empty() {
            0
        } else {
            frac_digits.parse().map_err(|_| bad())?
        };
        let scale = 10u128.pow(frac_digits.len() as u32);
        let part = whole
            .checked_mul(unit)
            .and_then(|w| w.checked_add(frac * unit / scale))
            .ok_or_else(too_long)?;
        total = total.checked_add(part).ok_or_else(too_long)?;
        if total > u128::from(u64::MAX) {
            return Err(too_long());
        }
    }
    // total <= u64::MAX, checked in the loop.
    Ok(Duration::from_nanos(total as u64))
}

/// A duration as the configuration writes it and [`parse_duration`]
/// reads it back exactly: `0s`, `750ns`, `20us`, `250ms`, `1.5ms`, `5s`, `1m30s`, `2h0m0.25s`.
#[must_use]
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}us", decimal(nanos, 1_000));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", decimal(nanos, 1_000_000));
    }
    let secs = nanos / 1_000_000_000;
    let frac = nanos % 1_000_000_000;
    let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
    let seconds = decimal(s * 1_000_000_000 + frac, 1_000_000_000);
    match (h, m) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

/// `value / unit` as a decimal without trailing zeros (`1500 / 1000` → `1.5`).
fn decimal(value: u128, unit: u128) -> String {
    let whole = value / unit;
    let rest = value % unit;
    if rest == 0 {
        return whole.to_string();
    }
    let width = unit.to_string().len() - 1;
    let frac = format!("{rest:0width$}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}
