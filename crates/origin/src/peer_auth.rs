//! Members proving themselves: with a key shared by every member
//! (`--peer-key`), a member's request carries [`PEER_AUTH_HEADER`], the
//! time and a keyed BLAKE3 hash of the time, the method, the request's
//! [`crate::PEER_HEADER`] value (an ask, a probe, a purge) and the target,
//! and a node
//! takes a request marked [`crate::PEER_HEADER`] as a member's only when
//! that proof holds, within [`SKEW`] of its own clock. Anything else that
//! claims to be a member (a client reaching a node past the front) is
//! served as a client. The proof binds what the request is and when, not
//! the connection: someone who can read the members' traffic can repeat
//! that very request for a few minutes, which gets them what the member
//! got (the proof never goes on to the origin).

use http::{HeaderValue, Method};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A member's proof on its requests to other members: `SECONDS.HEX`.
pub const PEER_AUTH_HEADER: &str = "circus-peer-auth";

/// How far a proof's time may be from this node's clock.
const SKEW: Duration = Duration::from_secs(300);

/// The key every member of a cluster shares.
#[derive(Clone)]
pub struct PeerKey(blake3::Hasher);

impl std::fmt::Debug for PeerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerKey(..)")
    }
}

impl PeerKey {
    /// The key derived from a secret of any length.
    pub fn new(secret: &[u8]) -> Self {
        PeerKey(blake3::Hasher::new_keyed(&blake3::derive_key("circus 2026-11 member requests", secret)))
    }

    fn mac(&self, seconds: u64, method: &Method, mark: &[u8], target: &str) -> blake3::Hash {
        let mut h = self.0.clone();
        for part in [seconds.to_string().as_bytes(), method.as_str().as_bytes(), mark, target.as_bytes()] {
            // Each part with its length first: no two requests hash alike.
            h.update(&(part.len() as u64).to_le_bytes());
            h.update(part);
        }
        h.finalize()
    }

    /// The proof for a `method` request of `target` marked `mark`, sent at
    /// `now`.
    pub fn sign(&self, method: &Method, mark: &HeaderValue, target: &str, now: SystemTime) -> HeaderValue {
        let seconds = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let value = format!("{seconds}.{}", self.mac(seconds, method, mark.as_bytes(), target).to_hex());
        HeaderValue::from_str(&value).expect("digits, a dot and hex")
    }

    /// Whether `proof` is this key's for a `method` request of `target`
    /// marked `mark`, made within `SKEW` of `now`.
    pub fn verify(
        &self,
        method: &Method,
        mark: &HeaderValue,
        target: &str,
        proof: &HeaderValue,
        now: SystemTime,
    ) -> bool {
        let Some((seconds, hex)) = proof.to_str().ok().and_then(|p| p.split_once('.')) else { return false };
        let (Ok(seconds), Ok(given)) = (seconds.parse::<u64>(), blake3::Hash::from_hex(hex)) else { return false };
        let now = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        // blake3::Hash compares in constant time.
        now.abs_diff(seconds) <= SKEW.as_secs() && self.mac(seconds, method, mark.as_bytes(), target) == given
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_holds_for_its_key_request_and_time_only() {
        let key = PeerKey::new(b"members only");
        let ask = HeaderValue::from_static("1");
        let now = SystemTime::now();
        let proof = key.sign(&Method::GET, &ask, "/big.iso", now);
        let holds = |m: &Method, mark: &str, t: &str, p: &HeaderValue, at: SystemTime| {
            key.verify(m, &HeaderValue::from_str(mark).unwrap(), t, p, at)
        };
        assert!(holds(&Method::GET, "1", "/big.iso", &proof, now));
        assert!(holds(&Method::GET, "1", "/big.iso", &proof, now + Duration::from_secs(299)), "a slow clock");
        assert!(holds(&Method::GET, "1", "/big.iso", &proof, now - Duration::from_secs(299)), "a fast one");
        assert!(!holds(&Method::GET, "1", "/big.iso", &proof, now + Duration::from_secs(301)), "too old");
        assert!(!holds(&Method::GET, "1", "/big.iso", &proof, now - Duration::from_secs(301)), "too new");
        assert!(!holds(&Method::GET, "1", "/other.iso", &proof, now), "another target");
        assert!(!holds(&Method::POST, "1", "/big.iso", &proof, now), "another method");
        assert!(!holds(&Method::GET, "purge", "/big.iso", &proof, now), "another mark");
        assert!(!PeerKey::new(b"another key").verify(&Method::GET, &ask, "/big.iso", &proof, now), "another key");
        let zeros = "0".repeat(64);
        for forged in [
            String::new(),
            "1.".into(),
            ".abc".into(),
            "x.00".into(),
            "12".into(),
            "99999999999999999999.00".into(),
            // Past what a time can hold: refused, not a panic.
            format!("{}.{zeros}", u64::MAX),
            format!("9223372036854775808.{zeros}"),
        ] {
            assert!(!holds(&Method::GET, "1", "/big.iso", &HeaderValue::from_str(&forged).unwrap(), now), "{forged:?}");
        }
        // The time is part of what is hashed: moving it breaks the proof.
        let text = proof.to_str().unwrap();
        let (secs, hex) = text.split_once('.').unwrap();
        let moved = format!("{}.{hex}", secs.parse::<u64>().unwrap() + 1);
        assert!(!holds(&Method::GET, "1", "/big.iso", &HeaderValue::from_str(&moved).unwrap(), now));
    }
}
