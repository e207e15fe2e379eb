//! Client link classes from the paper, and the TCP model that turns a link,
//! a round-trip time and a loss rate into a sustained sending rate.

use circus_core::BitRate;
use serde::{Deserialize, Serialize};
use std::{fmt, str::FromStr};

/// The client link classes of the Circus evaluation, plus a dial-up modem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum LinkClass {
    /// 28.8 kbit/s.
    Modem,
    /// 1.544 Mbit/s.
    T1,
    /// 10 Mbit/s Ethernet.
    #[serde(rename = "10T")]
    TenT,
    /// 44.736 Mbit/s.
    T3,
}

impl LinkClass {
    pub const ALL: [LinkClass; 4] = [LinkClass::Modem, LinkClass::T1, LinkClass::TenT, LinkClass::T3];

    pub fn rate(self) -> BitRate {
        BitRate(match self {
            LinkClass::Modem => 28_800.0,
            LinkClass::T1 => 1_544_000.0,
            LinkClass::TenT => 10_000_000.0,
            LinkClass::T3 => 44_736_000.0,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            LinkClass::Modem => "modem",
            LinkClass::T1 => "T1",
            LinkClass::TenT => "10T",
            LinkClass::T3 => "T3",
        }
    }
}

impl fmt::Display for LinkClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The classes clients are drawn from, each equally likely.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkMix(pub Vec<LinkClass>);

impl LinkMix {
    /// Mean over the classes of the time one byte takes.
    pub fn mean_secs_per_byte(&self) -> f64 {
        self.0.iter().map(|c| 1.0 / c.rate().bytes_per_sec()).sum::<f64>() / self.0.len() as f64
    }

    pub fn slowest(&self) -> LinkClass {
        *self.0.iter().min().expect("a mix has at least one class")
    }
}

impl FromStr for LinkMix {
    type Err = String;
    /// `T1`, `10T`, `T3`, `modem`; `mix` for T1+10T+T3 (the paper's mixed
    /// panels); or a `+`-joined list such as `10T+T3`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("mix") {
            return Ok(LinkMix(vec![LinkClass::T1, LinkClass::TenT, LinkClass::T3]));
        }
        let classes =
            s.split('+')
                .map(|part| {
                    LinkClass::ALL.into_iter().find(|c| c.name().eq_ignore_ascii_case(part.trim())).ok_or_else(|| {
                        format!("unknown link class {part:?}: use T1, 10T, T3, modem, mix or e.g. 10T+T3")
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
        Ok(LinkMix(classes))
    }
}

impl fmt::Display for LinkMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == [LinkClass::T1, LinkClass::TenT, LinkClass::T3] {
            return f.write_str("mix");
        }
        let names: Vec<_> = self.0.iter().map(|c| c.name()).collect();
        f.write_str(&names.join("+"))
    }
}

/// Sustained TCP rate over a path: the least of the link rate, the window
/// limit (window / RTT) and, with loss, the Mathis et al. (1997) steady-state
/// throughput MSS * sqrt(3/2) / (RTT * sqrt(p)).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TcpModel {
    pub rtt_secs: f64,
    pub loss: f64,
    pub window_bytes: f64,
    pub mss_bytes: f64,
}

impl Default for TcpModel {
    fn default() -> Self {
        Self { rtt_secs: 0.0, loss: 0.0, window_bytes: 4.0 * 1024.0 * 1024.0, mss_bytes: 1460.0 }
    }
}

impl TcpModel {
    pub fn rate(&self, link_bytes_per_sec: f64) -> f64 {
        let mut rate = link_bytes_per_sec;
        if self.rtt_secs > 0.0 {
            rate = rate.min(self.window_bytes / self.rtt_secs);
        }
        if self.loss > 0.0 {
            // Without a stated RTT the loss still costs: assume a LAN's 1 ms.
            let rtt = self.rtt_secs.max(0.001);
            rate = rate.min(self.mss_bytes * 1.5f64.sqrt() / (rtt * self.loss.sqrt()));
        }
        rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_and_mixes_parse() {
        assert_eq!("10t".parse::<LinkMix>().unwrap().0, vec![LinkClass::TenT]);
        assert_eq!("mix".parse::<LinkMix>().unwrap().to_string(), "mix");
        assert_eq!("10T+T3".parse::<LinkMix>().unwrap().0, vec![LinkClass::TenT, LinkClass::T3]);
        assert!("T5".parse::<LinkMix>().unwrap_err().contains("T1, 10T"));
        assert_eq!(LinkClass::T1.rate().bytes_per_sec(), 193_000.0);
    }

    #[test]
    fn tcp_rate_limits() {
        let t3 = LinkClass::T3.rate().bytes_per_sec();
        assert_eq!(TcpModel::default().rate(t3), t3);
        let lossy = TcpModel { rtt_secs: 0.075, loss: 0.1, ..Default::default() };
        let r = lossy.rate(t3);
        assert!((r - 75_400.0).abs() < 500.0, "{r}");
        let small_window = TcpModel { rtt_secs: 0.1, window_bytes: 65536.0, ..Default::default() };
        assert_eq!(small_window.rate(t3), 655_360.0);
    }
}
