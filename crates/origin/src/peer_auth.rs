//! Members proving themselves: with a key shared by every member
//! (`--peer-key`), a member's request carries [`PEER_AUTH_HEADER`], the
//! time and a keyed BLAKE3 hash of the time and the target, and a node
//! takes a request marked [`crate::PEER_HEADER`] as a member's only when
//! that proof holds, within [`SKEW`] of its own clock. Anything else that
//! claims to be a member (a client reaching a node past the front) is
//! served as a client. The proof binds the target and the time, not the
//! connection: someone who can read the members' traffic can repeat an ask
//! for the same target for a few minutes, which gets them what the member
//! got.

use http::HeaderValue;
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

    fn mac(&self, seconds: u64, target: &str) -> blake3::Hash {
        let mut h = self.0.clone();
        h.update(seconds.to_string().as_bytes());
        h.update(b"\n");
        h.update(target.as_bytes());
        h.finalize()
    }

    /// The proof for a request of `target` sent at `now`.
    pub fn sign(&self, target: &str, now: SystemTime) -> HeaderValue {
        let seconds = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let value = format!("{seconds}.{}", self.mac(seconds, target).to_hex());
        HeaderValue::from_str(&value).expect("digits, a dot and hex")
    }

    /// Whether `proof` is this key's for `target`, made within [`SKEW`] of
    /// `now`.
    pub fn verify(&self, target: &str, proof: &HeaderValue, now: SystemTime) -> bool {
        let Some((seconds, hex)) = proof.to_str().ok().and_then(|p| p.split_once('.')) else { return false };
        let (Ok(seconds), Ok(given)) = (seconds.parse::<u64>(), blake3::Hash::from_hex(hex)) else { return false };
        let at = UNIX_EPOCH + Duration::from_secs(seconds);
        let fresh = match now.duration_since(at) {
            Ok(age) => age <= SKEW,
            Err(ahead) => ahead.duration() <= SKEW,
        };
        // blake3::Hash compares in constant time.
        fresh && self.mac(seconds, target) == given
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_holds_for_its_key_target_and_time_only() {
        let key = PeerKey::new(b"members only");
        let now = SystemTime::now();
        let proof = key.sign("/big.iso", now);
        assert!(key.verify("/big.iso", &proof, now));
        assert!(key.verify("/big.iso", &proof, now + Duration::from_secs(299)), "a slow clock");
        assert!(key.verify("/big.iso", &proof, now - Duration::from_secs(299)), "a fast one");
        assert!(!key.verify("/big.iso", &proof, now + Duration::from_secs(301)), "too old");
        assert!(!key.verify("/other.iso", &proof, now), "another target");
        assert!(!PeerKey::new(b"another key").verify("/big.iso", &proof, now), "another key");
        for forged in ["", "1.", ".abc", "x.00", "12", "99999999999999999999.00"] {
            assert!(!key.verify("/big.iso", &HeaderValue::from_static(forged), now), "{forged:?}");
        }
        // The time is part of what is hashed: moving it breaks the proof.
        let text = proof.to_str().unwrap();
        let (secs, hex) = text.split_once('.').unwrap();
        let moved = format!("{}.{hex}", secs.parse::<u64>().unwrap() + 1);
        assert!(!key.verify("/big.iso", &HeaderValue::from_str(&moved).unwrap(), now));
    }
}
