//! Whole-file SHA-256: the digests a download can be checked against, in the
//! forms people and servers write them, and hashing the finished file.

use base64::Engine;
use sha2::{Digest, Sha256};
use std::{fmt, io::Read, path::Path, str::FromStr};

/// A SHA-256 digest of a whole file.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sha256Digest(pub [u8; 32]);

impl Sha256Digest {
    /// Parses what a person passes to `--expect-digest`: the RFC 9530 form
    /// `sha-256=:<base64>:` (as in a `Repr-Digest` header), `sha256:<hex>`
    /// (as in container registries), or 64 bare hex digits (as `sha256sum`
    /// prints).
    pub fn parse(input: &str) -> Result<Self, String> {
        let s = input.trim();
        let bytes = if let Some(b64) = s.strip_prefix("sha-256=:").and_then(|r| r.strip_suffix(':')) {
            base64::engine::general_purpose::STANDARD.decode(b64).map_err(|e| format!("bad base64 in {s:?}: {e}"))?
        } else {
            let h = s.strip_prefix("sha256:").or_else(|| s.strip_prefix("sha-256:")).unwrap_or(s);
            hex::decode(h).map_err(|_| {
                format!(
                    "cannot read {s:?} as a SHA-256 digest: write sha-256=:<base64>:, sha256:<hex> or 64 hex digits"
                )
            })?
        };
        let arr: [u8; 32] =
            bytes.try_into().map_err(|b: Vec<u8>| format!("{s:?} is {} bytes, a SHA-256 digest is 32", b.len()))?;
        Ok(Self(arr))
    }

    /// The SHA-256 member of a `Repr-Digest` (or `Content-Digest`) header
    /// value, a structured-field dictionary like `sha-256=:..:, sha-512=:..:`.
    /// `None` when there is none or it is malformed: a digest we cannot read
    /// is one we cannot check, not a reason to fail the download.
    pub fn from_repr_digest(value: &str) -> Option<Self> {
        value.split(',').map(str::trim).find(|m| m.starts_with("sha-256=")).and_then(|m| Self::parse(m).ok())
    }

    /// The digest of the file at `path`, read in 1 MiB pieces. Blocking.
    pub fn of_file(path: &Path) -> std::io::Result<Self> {
        let mut file = std::fs::File::open(path)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        Ok(Self(hasher.finalize().into()))
    }

    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl FromStr for Sha256Digest {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex())
    }
}

impl fmt::Debug for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // SHA-256 of "helloworld", from docs/protocol.md section 8.
    const HEX: &str = "936a185caaa266bb9cbe981e9e05cb78cd732b0b3280eb944412bb6f8f8f07af";
    const B64: &str = "k2oYXKqiZrucvpgengXLeM1zKwsygOuURBK7b4+PB68=";

    #[test]
    fn all_three_forms_parse_to_the_same_digest() {
        let want = Sha256Digest::parse(HEX).unwrap();
        assert_eq!(Sha256Digest::parse(&format!("sha256:{HEX}")).unwrap(), want);
        assert_eq!(Sha256Digest::parse(&format!("sha-256=:{B64}:")).unwrap(), want);
        assert_eq!(want.to_string(), format!("sha256:{HEX}"));
        assert!(Sha256Digest::parse("sha256:abcd").unwrap_err().contains("2 bytes"));
        assert!(Sha256Digest::parse("md5:xyz").unwrap_err().contains("cannot read"));
    }

    #[test]
    fn repr_digest_dictionary() {
        let want = Sha256Digest::parse(HEX).unwrap();
        assert_eq!(Sha256Digest::from_repr_digest(&format!("sha-512=:AAAA:, sha-256=:{B64}:")), Some(want));
        assert_eq!(Sha256Digest::from_repr_digest("sha-512=:AAAA:"), None);
        assert_eq!(Sha256Digest::from_repr_digest("sha-256=:!!:"), None);
    }

    #[test]
    fn hashes_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"helloworld").unwrap();
        assert_eq!(Sha256Digest::of_file(&path).unwrap().hex(), HEX);
    }
}
