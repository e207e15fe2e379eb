//! Addresses to listen on, as operators write them: `host:port`,
//! `:port` (every interface), `[v6]:port`, a bare port, and `off` where a
//! listener may be switched off.

use serde::Deserialize;
use std::{
    fmt,
    net::{SocketAddr, ToSocketAddrs},
    str::FromStr,
};

/// One `--listen` value: a name may stand for several addresses
/// (`localhost:8080` is 127.0.0.1 and ::1 where both exist).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct Listen {
    pub written: String,
    pub addrs: Vec<SocketAddr>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot listen on {input:?}: {why} (write host:port, :port, [v6]:port or a port number)")]
pub struct ListenError {
    input: String,
    why: String,
}

impl Listen {
    pub fn one(addr: SocketAddr) -> Self {
        Listen { written: addr.to_string(), addrs: vec![addr] }
    }
}

impl FromStr for Listen {
    type Err = ListenError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let input = s.trim();
        let fail = |why: &str| ListenError { input: input.to_owned(), why: why.to_owned() };
        let port = |p: &str| p.parse::<u16>().map_err(|_| fail("the port is not a number from 0 to 65535"));
        let addrs = if let Ok(addr) = input.parse::<SocketAddr>() {
            vec![addr]
        } else if input.matches(':').count() > 1 && !input.starts_with('[') {
            return Err(fail("an IPv6 address goes in brackets: [::1]:8080"));
        } else if let Some(p) = input.strip_prefix(':') {
            vec![SocketAddr::from(([0, 0, 0, 0], port(p)?))]
        } else if input.bytes().all(|b| b.is_ascii_digit()) && !input.is_empty() {
            vec![SocketAddr::from(([0, 0, 0, 0], port(input)?))]
        } else {
            let (host, p) = input.rsplit_once(':').ok_or_else(|| fail("no port"))?;
            if host.is_empty() {
                return Err(fail("no host before the colon"));
            }
            port(p)?;
            let mut found: Vec<SocketAddr> = input.to_socket_addrs().map_err(|e| fail(&e.to_string()))?.collect();
            found.sort();
            found.dedup();
            found
        };
        if addrs.is_empty() {
            return Err(fail("the name has no address"));
        }
        Ok(Listen { written: input.to_owned(), addrs })
    }
}

impl TryFrom<String> for Listen {
    type Error = ListenError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.written)
    }
}

/// A listener that may be switched off: an address, or `off`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum Switch {
    Off,
    On(Listen),
}

impl FromStr for Switch {
    type Err = ListenError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "off" | "none" | "false" => Ok(Switch::Off),
            other => other.parse().map(Switch::On),
        }
    }
}

impl TryFrom<String> for Switch {
    type Error = ListenError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forms_operators_write() {
        let addrs = |s: &str| s.parse::<Listen>().map(|l| l.addrs);
        assert_eq!(addrs("127.0.0.1:8080").unwrap(), vec!["127.0.0.1:8080".parse().unwrap()]);
        assert_eq!(addrs(":8080").unwrap(), vec!["0.0.0.0:8080".parse().unwrap()]);
        assert_eq!(addrs("8080").unwrap(), vec!["0.0.0.0:8080".parse().unwrap()]);
        assert_eq!(addrs("[::1]:443").unwrap(), vec!["[::1]:443".parse().unwrap()]);
        assert!(addrs("localhost:8080").unwrap().contains(&"127.0.0.1:8080".parse().unwrap()));
        for bad in ["", "host", ":http", "::1:80", "1.2.3.4:70000", "no-such-host.invalid:80"] {
            assert!(addrs(bad).is_err(), "{bad}");
        }
        assert!(addrs("::1:80").unwrap_err().to_string().contains("brackets"));
        assert_eq!("off".parse::<Switch>().unwrap(), Switch::Off);
        assert!(matches!(":9".parse::<Switch>().unwrap(), Switch::On(_)));
    }
}
