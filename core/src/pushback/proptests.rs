//! The `Retry-After` reader under any input: it never panics, reads back every date it writes
//! in each of the three forms, and reads delta-seconds exactly.

use core::time::Duration;

use proptest::prelude::*;

use super::*;

/// Up to the year 9999.
const LAST: u64 = 253_402_300_799;

fn asctime_of(secs: u64) -> String {
    // "Sun, 06 Nov 1994 08:49:37 GMT" → "Sun Nov  6 08:49:37 1994"
    let imf = imf_fixdate_of(secs);
    let p: Vec<&str> = imf.split(' ').collect();
    let day: u32 = p[1].parse().unwrap();
    format!("{} {} {day:>2} {} {}", &p[0][..3], p[2], p[4], p[3])
}

proptest! {
    #[test]
    fn c_retry_11_never_panics(value in proptest::collection::vec(any::<u8>(), 0..40),
                               wall in any::<u64>(), nanos in 0u32..1_000_000_000) {
        let _ = retry_after(&value, Duration::new(wall, nanos));
    }

    #[test]
    fn c_retry_11_printable_garbage_never_panics(value in "[ -~]{0,40}", wall in 0..LAST) {
        let _ = retry_after(value.as_bytes(), Duration::from_secs(wall));
    }

    #[test]
    fn c_retry_11_delta_seconds_read_exactly(n in 1u64..u64::MAX, wall in any::<u64>()) {
        let v = n.to_string();
        prop_assert_eq!(retry_after(v.as_bytes(), Duration::from_secs(wall)), Some(Duration::from_secs(n)));
    }

    #[test]
    fn c_retry_11_dates_read_back_in_every_form(at in 0..LAST, ahead in 1u64..100_000) {
        let imf = imf_fixdate_of(at);
        prop_assert_eq!(http_date(imf.as_bytes(), Duration::ZERO), Some(at), "{}", imf);
        let asc = asctime_of(at);
        prop_assert_eq!(http_date(asc.as_bytes(), Duration::ZERO), Some(at), "{}", asc);
        // A date `ahead` seconds after the wall clock asks for exactly that.
        let wall = Duration::from_secs(at.saturating_sub(ahead));
        if at >= ahead {
            prop_assert_eq!(retry_after(imf.as_bytes(), wall), Some(Duration::from_secs(ahead)));
        }
    }

    #[test]
    fn c_retry_11_rfc850_reads_back_within_fifty_years(at in 0..LAST - 100 * 31_622_400, back in 0u64..49) {
        let imf = imf_fixdate_of(at);
        let p: Vec<&str> = imf.split(' ').collect();
        let long = match &p[0][..3] {
            "Mon" => "Monday", "Tue" => "Tuesday", "Wed" => "Wednesday", "Thu" => "Thursday",
            "Fri" => "Friday", "Sat" => "Saturday", _ => "Sunday",
        };
        let v = format!("{long}, {}-{}-{} {} GMT", p[1], p[2], &p[3][2..], p[4]);
        // A wall clock up to 49 years later still reads the year back.
        let wall = Duration::from_secs(at + back * 31_536_000);
        prop_assert_eq!(http_date(v.as_bytes(), wall), Some(at), "{}", v);
    }
}
