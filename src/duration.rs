//! Durations on the command line: `100ms`, `1s`, `2m`, `1.5s`, `1m30s`.

use std::time::Duration;

/// Units a duration may carry, longest spelling first so `ms` is not read as `m` + `s`.
const UNITS: &[(&str, u128)] = &[
    ("ms", 1_000_000),
    ("us", 1_000),
    ("µs", 1_000),
    ("ns", 1),
    ("h", 3_600_000_000_000),
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
];

/// What to write instead, shown with every rejection.
const EXAMPLES: &str = "write a number and a unit, e.g. 100ms, 1s, 2m, 1.5s or 1m30s";

/// Parses a duration such as `100ms`, `1s`, `2m`, `1h`, `1.5s`, `250us` or `1m30s`.
///
/// Every number needs a unit: a bare `100` could mean milliseconds or seconds, and guessing
/// wrong by a factor of 1000 is worse than asking. The error is one line that says what was
/// wrong and what to write instead (clap prints it and exits 2).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err(format!("empty duration: {EXAMPLES}"));
    }
    let mut rest = s;
    let mut total_ns: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..number_len];
        if number.is_empty() {
            return Err(format!("'{text}' is not a duration: {EXAMPLES}"));
        }
        rest = &rest[number_len..];
        let Some(&(unit, unit_ns)) = UNITS.iter().find(|(u, _)| rest.starts_with(u)) else {
            return Err(if rest.is_empty() {
                format!("'{text}' has no unit: {EXAMPLES}")
            } else {
                format!("'{text}' has an unknown unit: {EXAMPLES}")
            });
        };
        rest = &rest[unit.len()..];
        let ns = scale(number, unit_ns).map_err(|why| why(text))?;
        total_ns = total_ns.checked_add(ns).ok_or_else(|| too_long(text))?;
    }
    let secs = u64::try_from(total_ns / 1_000_000_000).map_err(|_| too_long(text))?;
    Ok(Duration::new(secs, (total_ns % 1_000_000_000) as u32))
}

/// `number` (digits with at most one `.`) times `unit_ns`, in nanoseconds, exactly; on
/// failure, the function that words the error.
fn scale(number: &str, unit_ns: u128) -> Result<u128, fn(&str) -> String> {
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(bad_number);
    }
    // Only digits are left, so a parse failure is an overflow.
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| too_long as fn(&str) -> String)?
    };
    let mut ns = whole
        .checked_mul(unit_ns)
        .ok_or(too_long as fn(&str) -> String)?;
    // Fractions beyond nanoseconds are dropped rather than rounded: 1.0000000001s is 1s.
    let mut place = unit_ns;
    for digit in frac.bytes() {
        place /= 10;
        ns = ns
            .checked_add(u128::from(digit - b'0') * place)
            .ok_or(too_long as fn(&str) -> String)?;
    }
    Ok(ns)
}

fn bad_number(text: &str) -> String {
    format!("'{text}' has a malformed number: {EXAMPLES}")
}

fn too_long(text: &str) -> String {
    format!("'{text}' is too long a duration")
}

/// The longest time limit accepted: a week. A run that long is a mistake, and adding a longer
/// one to the clock could overflow it.
pub const MAX_LIMIT: Duration = Duration::from_secs(7 * 24 * 3600);

/// A time limit (`--timeout`, `--stall-timeout`, `--startup-timeout`, `sample --duration`):
/// a duration above zero and at most [`MAX_LIMIT`]. Zero would end everything at once.
pub fn parse_limit(text: &str) -> Result<Duration, String> {
    let d = parse_signed(text)?;
    if d.is_zero() {
        return Err(format!(
            "'{text}' would end it at once: give a time above zero, e.g. 30s, 10m or 1h"
        ));
    }
    if d > MAX_LIMIT {
        return Err(format!("'{text}' is longer than a week: give at most 168h"));
    }
    Ok(d)
}

/// How often `sample` reads: from 1ms (below that sampling costs more than it tells) to 1h.
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    let d = parse_signed(text)?;
    if d < Duration::from_millis(1) {
        return Err(format!(
            "'{text}' is too short an interval: use 1ms or more"
        ));
    }
    if d > Duration::from_secs(3600) {
        return Err(format!("'{text}' is too long an interval: use 1h or less"));
    }
    Ok(d)
}

/// [`parse_duration`], with a word for a negative value (clap hands `-5s` over as a value).
fn parse_signed(text: &str) -> Result<Duration, String> {
    if text.trim_start().starts_with('-') {
        return Err(format!(
            "'{text}' is negative: durations are positive, e.g. 100ms, 30s or 10m"
        ));
    }
    parse_duration(text)
}

/// Writes a duration the way a person reads it: `850ms`, `12.3s`, `4m05s`, `1h02m`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else if ms < 3_600_000 {
        let s = d.as_secs();
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        let m = d.as_secs() / 60;
        format!("{}h{:02}m", m / 60, m % 60)
    }
}

/// A duration kept as whole milliseconds in JSON (`"timeout_ms": 3600000`), as session
/// folders have always stored them: `#[serde(with = "crate::duration::millis")]`.
pub(crate) mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_forms() {
        let cases: &[(&str, Duration)] = &[
            ("100ms", Duration::from_millis(100)),
            ("1ms", Duration::from_millis(1)),
            ("1s", Duration::from_secs(1)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("1.5s", Duration::from_millis(1500)),
            ("0.25s", Duration::from_millis(250)),
            (".5s", Duration::from_millis(500)),
            ("250us", Duration::from_micros(250)),
            ("250µs", Duration::from_micros(250)),
            ("10ns", Duration::from_nanos(10)),
            ("1m30s", Duration::from_secs(90)),
            ("1h2m3s", Duration::from_secs(3723)),
            ("1s500ms", Duration::from_millis(1500)),
            (" 5s ", Duration::from_secs(5)),
            ("0s", Duration::ZERO),
            ("2.5m", Duration::from_secs(150)),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration(text), Ok(*want), "{text}");
        }
    }

    #[test]
    fn rejected_forms_say_why() {
        let cases: &[(&str, &str)] = &[
            ("", "empty duration"),
            ("100", "has no unit"),
            ("1.5", "has no unit"),
            ("10x", "unknown unit"),
            ("10 s", "unknown unit"),
            ("10S", "unknown unit"),
            ("-1s", "is not a duration"),
            ("ms", "is not a duration"),
            ("s10", "is not a duration"),
            ("1..5s", "malformed number"),
            ("1.2.3s", "malformed number"),
            (".s", "malformed number"),
            ("99999999999999999999999999999999999999h", "too long"),
            ("999999999999999999999999999999999999999999s", "too long"),
            ("18446744073709551616s", "too long"),
            ("1s2", "has no unit"),
        ];
        for (text, want) in cases {
            let err = parse_duration(text).expect_err(text);
            assert!(err.contains(want), "{text}: {err}");
            assert!(err.contains("100ms") || err.contains("too long"), "{err}");
        }
    }

    #[test]
    fn limits_and_intervals_have_bounds() {
        assert_eq!(parse_limit("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_limit("168h"), Ok(MAX_LIMIT));
        for (text, want) in [
            ("0s", "at once"),
            ("0ms", "at once"),
            ("169h", "longer than a week"),
            ("5000000000000000h", "longer than a week"),
            ("-5s", "negative"),
            (" -1m", "negative"),
        ] {
            let err = parse_limit(text).expect_err(text);
            assert!(err.contains(want), "{text}: {err}");
        }
        assert_eq!(parse_interval("10ms"), Ok(Duration::from_millis(10)));
        assert_eq!(parse_interval("1h"), Ok(Duration::from_secs(3600)));
        for (text, want) in [
            ("500us", "too short"),
            ("0s", "too short"),
            ("2h", "too long an interval"),
            ("5000000000000000h", "too long"),
            ("-10ms", "negative"),
        ] {
            let err = parse_interval(text).expect_err(text);
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn formatting() {
        let cases: &[(Duration, &str)] = &[
            (Duration::from_millis(850), "850ms"),
            (Duration::from_millis(12_340), "12.3s"),
            (Duration::from_secs(245), "4m05s"),
            (Duration::from_secs(3720), "1h02m"),
        ];
        for (d, want) in cases {
            assert_eq!(format_duration(*d), *want);
        }
    }
}
