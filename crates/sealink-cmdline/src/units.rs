//! Command-line values with units: durations (`--timeout`, `--idle-timeout`, ...), rates
//! (`send --limit`), sizes (`recv --max-bytes`), and integers within a range. Each is a clap
//! value parser: its error is clap's usage error (exit 2).

use std::time::Duration;

/// A duration: a bare number of seconds as before (`30`, `0.5`), or with units through
/// humantime (`30s`, `5m`, `1h 30m`, `7days`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        return Duration::try_from_secs_f64(secs)
            .map_err(|_| format!("{s:?} is not a duration in seconds"));
    }
    humantime::parse_duration(s).map_err(|e| {
        format!(
            "{s:?} is not a duration ({e}): give seconds (30, 0.5) or units (30s, 5m, 2h, 7days)"
        )
    })
}

/// [`parse_duration`] within `min..=max` seconds, as the `f64` seconds the options hold.
pub fn parse_secs_within(s: &str, min: f64, max: f64) -> Result<f64, String> {
    let v = parse_duration(s)?.as_secs_f64();
    if (min..=max).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{} is not within {min}..={max} seconds", s.trim()))
    }
}

/// An integer within `min..=max` (counts, record and payload sizes).
pub fn parse_within<T>(s: &str, min: T, max: T) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
    T::Err: std::fmt::Display,
{
    let v: T = s.trim().parse().map_err(|e| format!("{e}"))?;
    if (min..=max).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not within {min}..={max}"))
    }
}

/// `send --limit`: bytes per second. A plain number is bytes; k, M, G, T are powers of 1000
/// and Ki, Mi, Gi, Ti powers of 1024, each optionally followed by `B`; kbit, Mbit, Gbit, Tbit
/// (and bit) are bits. A trailing `/s` is allowed. `10M` = `10MB` = 10,000,000 bytes/s,
/// `10MiB` = 10,485,760, `80Mbit` = 10,000,000.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t.strip_suffix("/s").unwrap_or(t);
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim());
    let bad = || {
        format!(
            "{s:?} is not a rate: give bytes per second with an optional unit \
             (500k, 10M, 10MiB, 80Mbit)"
        )
    };
    let n: f64 = num.parse().map_err(|_| bad())?;
    let unit_lc = unit.to_ascii_lowercase();
    // Bits: the unit ends in "bit" (the prefix is case-insensitive: kbit, Mbit).
    let (prefix, per_unit) = match unit_lc.strip_suffix("bit") {
        Some(p) => (p.to_owned(), 1.0 / 8.0),
        None => (
            unit_lc.strip_suffix('b').unwrap_or(&unit_lc).to_owned(),
            1.0,
        ),
    };
    let scale = match prefix.as_str() {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        "t" => 1e12,
        "ki" => 1024.0,
        "mi" => 1024.0 * 1024.0,
        "gi" => 1024.0 * 1024.0 * 1024.0,
        "ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad()),
    };
    let v = n * scale * per_unit;
    // Below 1 KiB/s a 16 KiB record would stall the receiver for most of its idle timeout.
    if !v.is_finite() || v < 1024.0 {
        return Err(format!(
            "{s:?} is below the least rate, 1KiB (1024 bytes per second)"
        ));
    }
    if v >= u64::MAX as f64 {
        return Err(format!("{s:?} is too large a rate"));
    }
    Ok(v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_seconds_or_units() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("7days"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        for bad in ["", "-1", "NaN", "inf", "5 parsecs", "m5"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_secs_within("2m", 0.01, 3600.0), Ok(120.0));
        assert!(parse_secs_within("2h", 0.01, 3600.0).is_err());
    }

    #[test]
    fn rates_take_decimal_binary_and_bit_units() {
        for (s, want) in [
            ("2048", 2048),
            ("1M", 1_000_000),
            ("10MB", 10_000_000),
            ("10MB/s", 10_000_000),
            ("1.5k", 1500),
            ("10MiB", 10 << 20),
            ("1Ki", 1024),
            ("80Mbit", 10_000_000),
            ("1Gbit/s", 125_000_000),
            ("2G", 2_000_000_000),
        ] {
            assert_eq!(parse_rate(s), Ok(want), "{s}");
        }
        for bad in [
            "",
            "M",
            "ten",
            "10X",
            "10 parsecs",
            "-1M",
            "100",
            "1e400",
            "1..2M",
        ] {
            assert!(parse_rate(bad).is_err(), "{bad:?}");
        }
    }
}

/// A size in bytes: a number with an optional unit, k/M/G/T powers of 1000, Ki/Mi/Gi/Ti powers
/// of 1024 (a trailing `B` is allowed: `64TiB`).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t.strip_suffix('B').unwrap_or(t);
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| {
        format!("{s:?} is not a size (a number, with k, M, G, T, Ki, Mi, Gi or Ti)")
    })?;
    let mul: u64 = match unit {
        "" => 1,
        "k" | "K" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => return Err(format!("{s:?}: unknown unit {unit:?}")),
    };
    n.checked_mul(mul)
        .ok_or_else(|| format!("{s:?} is too large"))
}

#[cfg(test)]
mod size_tests {
    #[test]
    fn sizes_parse() {
        use super::parse_size;
        assert_eq!(parse_size("64TiB"), Ok(64 << 40));
        assert_eq!(parse_size("10M"), Ok(10_000_000));
        assert_eq!(parse_size("7"), Ok(7));
        assert!(parse_size("x").is_err() && parse_size("1Q").is_err());
    }

    #[test]
    fn integers_within_a_range() {
        use super::parse_within;
        assert_eq!(parse_within(" 7 ", 1usize, 8), Ok(7));
        assert_eq!(
            parse_within("9", 1usize, 8),
            Err("9 is not within 1..=8".into())
        );
        assert!(parse_within::<u16>("-1", 1, 8).is_err());
    }
}
