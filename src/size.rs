//! Sizes on the command line: `512M`, `2G`, `1.5GiB`, `0`.

/// Parses a size in bytes. Units are binary (`K`/`KiB` = 1024, `M`, `G`, `T`), `B` optional;
/// a bare number is bytes, and `0` turns a threshold off.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let s = text.trim();
    if s.starts_with('-') {
        return Err(format!(
            "'{text}' is negative: give 0 (off) or a size such as 512M"
        ));
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num.parse().map_err(|_| {
        format!("'{text}' is not a size: write a number and a unit, e.g. 512M or 2G")
    })?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => {
            return Err(format!(
                "unknown size unit '{other}' in '{text}': use K, M, G or T"
            ));
        }
    };
    let bytes = value * factor as f64;
    if bytes > 0.0 && bytes < 1.0 {
        return Err(format!(
            "'{text}' is less than a byte: give 0 (off) or a size such as 512M"
        ));
    }
    if bytes > MAX_SIZE as f64 {
        return Err(format!(
            "'{text}' is more memory than any machine has: give at most 1P, e.g. 2G"
        ));
    }
    Ok(bytes.round() as u64)
}

/// The largest size accepted: a pebibyte.
const MAX_SIZE: u64 = 1 << 50;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("2X").is_err());
        assert_eq!(parse_size("1024T"), Ok(1 << 50));
        assert!(parse_size("0.4").unwrap_err().contains("less than a byte"));
        for absurd in ["99999999999999T", "1025T", "99999999999999999999999"] {
            let err = parse_size(absurd).expect_err(absurd);
            assert!(err.contains("more memory than any machine has"), "{err}");
        }
    }
}
