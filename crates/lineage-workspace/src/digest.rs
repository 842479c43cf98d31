//! [`Digest`]: a snapshot's SHA-256 as `SHA-256=<base64url>`, the form NATS' Object Store
//! records for an object (`ObjectInfo::digest`), so the two compare as text.

use base64::engine::general_purpose::URL_SAFE;
use base64::Engine as _;
use sha2::{Digest as _, Sha256};

use crate::error::WorkspaceError;

/// A SHA-256 digest, written `SHA-256=<base64url>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest([u8; 32]);

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Digest(Sha256::digest(bytes).into())
    }

    /// Reads `SHA-256=<base64url>` (padded, as NATS writes it, or not).
    pub fn parse(text: &str) -> Result<Self, WorkspaceError> {
        let bad = || WorkspaceError::BadDigest(text.chars().take(80).collect());
        let b64 = text.strip_prefix("SHA-256=").ok_or_else(bad)?;
        let raw = URL_SAFE
            .decode(b64)
            .or_else(|_| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(b64))
            .map_err(|_| bad())?;
        let bytes: [u8; 32] = raw.try_into().map_err(|_| bad())?;
        Ok(Digest(bytes))
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SHA-256={}", URL_SAFE.encode(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_reads_back_and_bad_ones_are_refused() {
        let d = Digest::of(b"workspace");
        assert_eq!(Digest::parse(&d.to_string()).unwrap(), d);
        assert!(d.to_string().starts_with("SHA-256="));
        for bad in ["", "SHA-256=", "sha256=abc", "SHA-256=AAAA", "SHA-256=!!"] {
            let e = Digest::parse(bad).unwrap_err().to_string();
            assert!(e.contains("bad workspace digest"), "{e}");
        }
    }
}
