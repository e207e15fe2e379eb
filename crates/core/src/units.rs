//! Sizes and link rates in the units people write ("64KiB", "1.544Mbit").

use serde::{Deserialize, Serialize};
use std::{fmt, str::FromStr};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error("cannot read {input:?} as a size: write a number with a unit, like 64KiB, 16MiB or 1GiB")]
    Size { input: String },
    #[error(
        "cannot read {input:?} as a link rate: write a number with a unit, like 28.8kbit, 1.544Mbit or 1Gbit (per second)"
    )]
    Rate { input: String },
    #[error("cannot read {input:?} as a length of time: write a number with a unit, like 500ms, 30s, 5m or 1h")]
    Span { input: String },
}

/// A number of bytes. Parses `KiB`/`MiB`/`GiB` as powers of 1024 and
/// `KB`/`MB`/`GB` as powers of 1000, as written in the IEC standard. In
/// config files it is written either way: `cache = "1GiB"` or a plain number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "SizeRepr")]
pub struct ByteSize(pub u64);

#[derive(Deserialize)]
#[serde(untagged)]
enum SizeRepr {
    Bytes(u64),
    Text(String),
}

impl TryFrom<SizeRepr> for ByteSize {
    type Error = UnitError;
    fn try_from(r: SizeRepr) -> Result<Self, Self::Error> {
        match r {
            SizeRepr::Bytes(n) => Ok(ByteSize(n)),
            SizeRepr::Text(s) => ByteSize::parse(&s),
        }
    }
}

impl ByteSize {
    pub fn parse(input: &str) -> Result<Self, UnitError> {
        parse_size::parse_size(input.trim()).map(ByteSize).map_err(|_| UnitError::Size { input: input.to_owned() })
    }
}

impl FromStr for ByteSize {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for ByteSize {
    /// The largest binary unit that divides the value exactly, so that a
    /// displayed size parses back to the same number.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u64); 4] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
        for (name, unit) in UNITS {
            if self.0 >= unit && self.0.is_multiple_of(unit) {
                return write!(f, "{}{name}", self.0 / unit);
            }
        }
        write!(f, "{}B", self.0)
    }
}

/// A link rate in bits per second. Network rates are decimal: 1 Mbit/s is
/// 10^6 bit/s, as in the T1 (1.544 Mbit/s) and Ethernet definitions.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize)]
pub struct BitRate(pub f64);

impl BitRate {
    pub fn bytes_per_sec(&self) -> f64 {
        self.0 / 8.0
    }

    pub fn parse(input: &str) -> Result<Self, UnitError> {
        let err = || UnitError::Rate { input: input.to_owned() };
        let s = input.trim().trim_end_matches("/s").trim_end_matches("ps");
        let split = s.find(|c: char| c.is_ascii_alphabetic()).ok_or_else(err)?;
        let (num, unit) = s.split_at(split);
        let value: f64 = num.trim().parse().map_err(|_| err())?;
        let scale = match unit.to_ascii_lowercase().as_str() {
            "bit" | "b" => 1.0,
            "kbit" | "kb" | "k" => 1e3,
            "mbit" | "mb" | "m" => 1e6,
            "gbit" | "gb" | "g" => 1e9,
            _ => return Err(err()),
        };
        let rate = value * scale;
        (rate.is_finite() && rate > 0.0).then_some(BitRate(rate)).ok_or_else(err)
    }
}

impl FromStr for BitRate {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for BitRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (v, u) = match self.0 {
            r if r >= 1e9 => (r / 1e9, "Gbit/s"),
            r if r >= 1e6 => (r / 1e6, "Mbit/s"),
            r if r >= 1e3 => (r / 1e3, "kbit/s"),
            r => (r, "bit/s"),
        };
        write!(f, "{}{u}", (v * 1000.0).round() / 1000.0)
    }
}

/// A length of time as people write it: `30s`, `500ms`, `2m`, `1h 30m`,
/// or a bare number of seconds (`30`). In config files a string or a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(try_from = "SpanRepr")]
pub struct Span(pub std::time::Duration);

#[derive(Deserialize)]
#[serde(untagged)]
enum SpanRepr {
    Seconds(u64),
    Text(String),
}

impl TryFrom<SpanRepr> for Span {
    type Error = UnitError;
    fn try_from(r: SpanRepr) -> Result<Self, Self::Error> {
        match r {
            SpanRepr::Seconds(n) => Ok(Span(std::time::Duration::from_secs(n))),
            SpanRepr::Text(s) => s.parse(),
        }
    }
}

impl FromStr for Span {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if let Ok(secs) = s.parse::<u64>() {
            return Ok(Span(std::time::Duration::from_secs(secs)));
        }
        humantime::parse_duration(s).map(Span).map_err(|_| UnitError::Span { input: s.to_owned() })
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_take_units_or_plain_seconds() {
        let secs = |s: &str| s.parse::<Span>().map(|d| d.0.as_millis());
        assert_eq!(secs("10s"), Ok(10_000));
        assert_eq!(secs("10"), Ok(10_000));
        assert_eq!(secs("500ms"), Ok(500));
        assert_eq!(secs("1h 30m"), Ok(5_400_000));
        assert!(secs("soon").unwrap_err().to_string().contains("like 500ms"));
        assert_eq!(Span(std::time::Duration::from_secs(90)).to_string(), "1m 30s");
    }

    #[test]
    fn sizes() {
        assert_eq!(ByteSize::parse("64KiB"), Ok(ByteSize(65536)));
        assert_eq!(ByteSize::parse("16MiB"), Ok(ByteSize(16 << 20)));
        assert_eq!(ByteSize::parse("1GB"), Ok(ByteSize(1_000_000_000)));
        assert_eq!(ByteSize::parse("123"), Ok(ByteSize(123)));
        assert!(ByteSize::parse("lots").is_err());
        for v in [0, 1, 1023, 65536, 3 << 30, 1536] {
            let shown = ByteSize(v).to_string();
            assert_eq!(ByteSize::parse(&shown), Ok(ByteSize(v)), "{shown}");
        }
    }

    #[test]
    fn rates() {
        assert_eq!(BitRate::parse("1.544Mbit").unwrap().0, 1_544_000.0);
        assert_eq!(BitRate::parse("28.8kbit/s").unwrap().0, 28_800.0);
        assert_eq!(BitRate::parse("1Gbit").unwrap().bytes_per_sec(), 125e6);
        assert_eq!(BitRate::parse("10Mbps").unwrap().0, 10e6);
        for bad in ["", "fast", "0Mbit", "-1Mbit", "5 parsecs"] {
            let e = BitRate::parse(bad).unwrap_err().to_string();
            assert!(e.contains("1.544Mbit"), "{e}");
        }
        assert_eq!(BitRate(44_736_000.0).to_string(), "44.736Mbit/s");
    }
}
