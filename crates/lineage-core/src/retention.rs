//! Q5: retention of disposed sessions, and the tombstone that keeps purged ids from coming back.
//!
//! A disposed session is gone for good, but its registry record, its event log and its inbox
//! stay until they are purged. [`purge_due`] says when: once `disposed_after_ms` has passed
//! since its disposal and no child record of it remains (children are always disposed before
//! their parent, so oldest disposal first is leaves first, and a subtree is purged only once all
//! of it is disposed).
//!
//! Purged ids must never be registered again (a parent's notice, a retried spawn or a stale
//! node could otherwise revive a dead identity). The [`Tombstone`] remembers them compactly:
//!
//! - ids with a time in them (UUIDv7, ULID: every id lineage mints) through one watermark,
//!   the latest mint time of any purged id: an id minted at or before it is refused. Purged
//!   ids were all minted at or before it, so none can return. The cost: an unknown id minted
//!   that long ago is refused too, which only a clock behind by more than the retention (or a
//!   caller re-using an old id) can meet; the refusal says to mint a fresh id.
//! - ids with no time in them (other UUID versions, chosen by a caller) exactly, in a set:
//!   refused forever too, at about 40 bytes each.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::ids::SessionId;

/// The default retention of disposed sessions: one day.
pub const DEFAULT_DISPOSED_AFTER_MS: u64 = 24 * 60 * 60 * 1000;

/// The most sessions one purge command removes.
pub const PURGE_BATCH: usize = 256;

/// When `id` was minted, from the time in it: the first 48 bits of a UUIDv7 or of a ULID (ms
/// since the Unix epoch). `None` for any other id.
pub fn minted_at_ms(id: &SessionId) -> Option<u64> {
    let text = id.as_str();
    if text.len() == 36 {
        // UUID text: version nibble at index 14.
        if text.as_bytes().get(14) != Some(&b'7') {
            return None;
        }
        let hex: String = text.chars().filter(|c| *c != '-').take(12).collect();
        return u64::from_str_radix(&hex, 16).ok();
    }
    if text.len() == 26 {
        const ALPHABET: &[u8] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
        let mut ms: u64 = 0;
        for c in text.to_ascii_uppercase().bytes().take(10) {
            let digit = ALPHABET.iter().position(|a| *a == c)? as u64;
            ms = ms.checked_mul(32)?.checked_add(digit)?;
        }
        return Some(ms);
    }
    None
}

/// True when a session disposed at `disposed_at_ms`, with `child_records` child records left,
/// is due to be purged at `now_ms` under a retention of `disposed_after_ms`.
pub fn purge_due(
    disposed_at_ms: u64,
    child_records: usize,
    now_ms: u64,
    disposed_after_ms: u64,
) -> bool {
    child_records == 0 && disposed_at_ms.saturating_add(disposed_after_ms) <= now_ms
}

/// What the registry remembers of purged sessions (see the module docs for the guarantee).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tombstone {
    /// The latest mint time of a purged time-ordered id (ms), if any was purged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub horizon_ms: Option<u64>,
    /// Purged ids with no time in them.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub untimed: BTreeSet<SessionId>,
    /// How many sessions were purged in all.
    #[serde(default)]
    pub purged: u64,
}

impl Tombstone {
    /// Remembers a purged id.
    pub fn record(&mut self, id: &SessionId) {
        self.purged = self.purged.saturating_add(1);
        match minted_at_ms(id) {
            Some(at) => self.horizon_ms = Some(self.horizon_ms.map_or(at, |h| h.max(at))),
            None => {
                self.untimed.insert(id.clone());
            }
        }
    }

    /// True when `id` may have been purged, so it must not be registered.
    pub fn refuses(&self, id: &SessionId) -> bool {
        match minted_at_ms(id) {
            Some(at) => self.horizon_ms.is_some_and(|h| at <= h),
            None => self.untimed.contains(id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sid(s: &str) -> SessionId {
        SessionId::parse(s).unwrap()
    }

    #[test]
    fn q5_mint_times_are_read_from_uuid_v7_and_ulid_and_nothing_else() {
        // 0x01936c1e7a3b = 1732800000571 ms.
        assert_eq!(
            minted_at_ms(&sid("01936c1e-7a3b-7cde-8f00-0123456789ab")),
            Some(0x0193_6c1e_7a3b)
        );
        // 1733000000123 ms, encoded by hand (Crockford base32, 10 characters).
        assert_eq!(
            minted_at_ms(&sid("01JDZDJWKV0000000000000000")),
            Some(1_733_000_000_123)
        );
        // A v4 UUID has no time.
        assert_eq!(
            minted_at_ms(&sid("9b2f3c1e-7a3b-4cde-8f00-0123456789ab")),
            None
        );
    }

    #[test]
    fn q5_a_purged_id_is_refused_for_ever_and_a_fresh_one_is_not() {
        let mut t = Tombstone::default();
        let old = sid("01936c1e-7a3b-7cde-8f00-0123456789ab");
        let older = sid("01936c1e-0000-7cde-8f00-0123456789ab");
        let fresh = sid("01936c1f-0000-7cde-8f00-0123456789ab");
        let untimed = sid("9b2f3c1e-7a3b-4cde-8f00-0123456789ab");
        let other_untimed = sid("9b2f3c1e-7a3b-4cde-8f00-0123456789ac");
        assert!(!t.refuses(&old) && !t.refuses(&untimed));
        t.record(&old);
        t.record(&untimed);
        assert!(t.refuses(&old));
        assert!(
            t.refuses(&older),
            "minted before the horizon: may have been purged"
        );
        assert!(!t.refuses(&fresh));
        assert!(t.refuses(&untimed));
        assert!(!t.refuses(&other_untimed));
        assert_eq!(t.purged, 2);
        // A later purge of an older id never lowers the horizon.
        t.record(&older);
        assert!(t.refuses(&old));
        let back: Tombstone = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn q5_a_purge_is_due_after_the_retention_and_only_without_child_records() {
        assert!(!purge_due(1_000, 0, 1_999, 1_000));
        assert!(purge_due(1_000, 0, 2_000, 1_000));
        assert!(!purge_due(1_000, 1, 9_000, 1_000));
        assert!(purge_due(u64::MAX, 0, u64::MAX, 0));
        assert!(!purge_due(u64::MAX - 1, 0, u64::MAX - 1, 5));
    }
}
