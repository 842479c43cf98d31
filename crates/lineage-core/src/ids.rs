//! Identifiers: [`SessionId`], [`RunId`], [`NodeId`], [`RequestId`], [`DrainId`].
//!
//! Every id travels inside NATS subjects (`lineage.<cluster>.parent.<parent>.inbox`), so each one
//! is a safe subject token by construction: non-empty, at most [`MAX_ID_LEN`] characters, and none
//! of `.`, `*`, `>` or whitespace. Session and run ids must additionally be UUID (any version,
//! UUIDv7 recommended) or ULID text; node, request and drain ids may be any safe token made of
//! ASCII letters, digits, `-` and `_`.
//!
//! Fresh ids are never minted here (no randomness, no clock in the core): the shell creates them
//! and passes them in.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::CoreError;

/// Longest id accepted, in characters.
pub const MAX_ID_LEN: usize = 64;

/// Checks the rules shared by all ids: a safe NATS subject token.
fn check_token(kind: &'static str, input: &str) -> Result<(), CoreError> {
    let invalid = |reason: &'static str| CoreError::InvalidId {
        kind,
        input: shorten(input),
        reason,
    };
    if input.is_empty() {
        return Err(invalid("it is empty"));
    }
    if input.chars().count() > MAX_ID_LEN {
        return Err(invalid("it is longer than 64 characters"));
    }
    if input.contains('.') || input.contains('*') || input.contains('>') {
        return Err(invalid(
            "'.', '*' and '>' are not allowed in a NATS subject token",
        ));
    }
    if input.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid("whitespace and control characters are not allowed"));
    }
    if !input
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(invalid(
            "only ASCII letters, digits, '-' and '_' are allowed",
        ));
    }
    Ok(())
}

/// Keeps error messages one line and bounded, whatever the input.
fn shorten(input: &str) -> String {
    let mut out: String = input.chars().take(80).collect();
    if input.chars().count() > 80 {
        out.push('…');
    }
    out
}

/// True if `s` is canonical UUID text: 8-4-4-4-12 hex digits.
fn is_uuid_text(s: &str) -> bool {
    let bytes = s.as_bytes();
    if bytes.len() != 36 {
        return false;
    }
    bytes.iter().enumerate().all(|(i, b)| match i {
        8 | 13 | 18 | 23 => *b == b'-',
        _ => b.is_ascii_hexdigit(),
    })
}

/// True if `s` is ULID text: 26 Crockford base32 characters, first one at most `7`.
fn is_ulid_text(s: &str) -> bool {
    const ALPHABET: &str = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let upper = s.to_ascii_uppercase();
    upper.len() == 26
        && upper.chars().all(|c| ALPHABET.contains(c))
        && upper.as_bytes().first().is_some_and(|b| *b <= b'7')
}

macro_rules! token_id {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $strict:expr) => {
        $(#[$doc])*
        ///
        /// Shared text in one thin pointer: a clone (an index entry, a child in its parent's
        /// set) is a reference count, not a copy, and every place that holds the id holds 8
        /// bytes (issue 13: a million sessions in the registry; `Arc<str>` took 16). Equality,
        /// order and hash are those of the text.
        #[derive(Clone)]
        pub struct $name(triomphe::ThinArc<(), u8>);

        impl $name {
            /// Parses and validates an id; the error names the input and what is wrong with it.
            pub fn parse(input: &str) -> Result<Self, CoreError> {
                check_token($kind, input)?;
                let strict: bool = $strict;
                if strict && !is_uuid_text(input) && !is_ulid_text(input) {
                    return Err(CoreError::InvalidId {
                        kind: $kind,
                        input: shorten(input),
                        reason: "it is not UUID or ULID text",
                    });
                }
                Ok(Self(triomphe::ThinArc::from_header_and_slice(
                    (),
                    input.as_bytes(),
                )))
            }

            /// The id as text, usable as one NATS subject token.
            pub fn as_str(&self) -> &str {
                // Only ASCII text that `parse` checked is ever stored: the conversion cannot
                // fail (the empty fallback is never taken).
                std::str::from_utf8(&self.0.slice).unwrap_or_default()
            }
        }

        impl PartialEq for $name {
            fn eq(&self, other: &Self) -> bool {
                self.0.ptr() == other.0.ptr() || self.0.slice == other.0.slice
            }
        }

        impl Eq for $name {}

        impl PartialOrd for $name {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }

        impl Ord for $name {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                self.0.slice.cmp(&other.0.slice)
            }
        }

        impl std::hash::Hash for $name {
            fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
                self.as_str().hash(state)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = CoreError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse(s)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        #[cfg(feature = "schema")]
        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                let strict: bool = $strict;
                let description = match strict {
                    true => concat!("a ", $kind, ": UUID or ULID text"),
                    false => concat!("a ", $kind, ": ASCII letters, digits, '-' and '_'"),
                };
                schemars::json_schema!({
                    "type": "string",
                    "pattern": "^[A-Za-z0-9_-]{1,64}$",
                    "description": description,
                })
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = std::borrow::Cow::<str>::deserialize(d)?;
                Self::parse(&raw).map_err(serde::de::Error::custom)
            }
        }
    };
}

token_id!(
    /// A session's durable identity (UUID or ULID text).
    SessionId,
    "session id",
    true
);
token_id!(
    /// One run of a child (the pair key of `subagent/start` and `subagent/end`; UUID or ULID text).
    RunId,
    "run id",
    true
);
token_id!(
    /// A `lineage` node (process): letters, digits, `-`, `_`; for example `node-1`.
    NodeId,
    "node id",
    false
);
token_id!(
    /// A client-chosen idempotency key: a retried request with the same id returns the first result.
    RequestId,
    "request id",
    false
);
token_id!(
    /// A client-chosen name for one drain's progress stream (`lineage.<cluster>.drain.<id>.progress`).
    DrainId,
    "drain id",
    false
);

/// A deterministic session id for tests and fixtures (feature `test-ids`, which only
/// dev-dependencies turn on): `sid(7)` is `01936c1e-7a3b-7cde-8f00-000000000007` in every run.
#[cfg(any(test, feature = "test-ids"))]
pub fn sid(n: u32) -> SessionId {
    match SessionId::parse(&format!("01936c1e-7a3b-7cde-8f00-{n:012}")) {
        Ok(id) => id,
        Err(e) => unreachable!("a numbered id is a valid UUID: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V7: &str = "01936c1e-7a3b-7cde-8f00-0123456789ab";
    const ULID: &str = "01ARZ3NDEKTSV4RRFFQ69G5FAV";

    #[test]
    fn an_id_is_one_thin_pointer_compared_ordered_and_hashed_as_its_text() {
        use std::hash::{BuildHasher, RandomState};
        // Issue 13: every place that holds an id (map keys, index entries, headers) pays this.
        assert_eq!(std::mem::size_of::<SessionId>(), 8);
        assert_eq!(std::mem::size_of::<Option<SessionId>>(), 8);
        let texts = ["node-1", "node-10", "node-2", "Node-2", "a", "a_b", "z"];
        let hasher = RandomState::new();
        for a in texts {
            let (x, x2) = (NodeId::parse(a).unwrap(), NodeId::parse(a).unwrap());
            assert_eq!(x, x2, "two copies of {a} are equal");
            assert_eq!(
                hasher.hash_one(&x),
                hasher.hash_one(a),
                "{a} hashes as its text"
            );
            assert_eq!(format!("{x} {x:?}"), format!("{a} NodeId({a})"));
            for b in texts {
                let y = NodeId::parse(b).unwrap();
                assert_eq!(x.cmp(&y), a.cmp(b), "{a} vs {b}");
                assert_eq!(x == y, a == b, "{a} == {b}");
            }
        }
    }

    #[test]
    fn ids_accept_uuid_and_ulid_text() {
        assert_eq!(SessionId::parse(V7).unwrap().as_str(), V7);
        assert_eq!(SessionId::parse(ULID).unwrap().as_str(), ULID);
        assert!(RunId::parse(V7).is_ok());
        assert!(NodeId::parse("node-1").is_ok());
        assert!(RequestId::parse("req_42").is_ok());
        assert!(DrainId::parse(V7).is_ok());
    }

    #[test]
    fn ids_refuse_unsafe_subject_tokens_naming_the_input() {
        for bad in ["", "a.b", "*", ">", "a b", "a\tb", "é", &"x".repeat(65)] {
            let err = NodeId::parse(bad).unwrap_err().to_string();
            assert!(err.contains("node id"), "{err}");
            assert!(!err.contains('\n'), "one line: {err}");
            let err = DrainId::parse(bad).unwrap_err().to_string();
            assert!(err.contains("drain id"), "{err}");
        }
        let err = SessionId::parse("not-a-uuid").unwrap_err().to_string();
        assert!(err.contains("not-a-uuid") && err.contains("UUID"), "{err}");
    }

    #[test]
    fn ids_refuse_invalid_text_when_deserialized() {
        let err = serde_json::from_str::<SessionId>("\"a.b\"").unwrap_err();
        assert!(err.to_string().contains("session id"));
        let ok: SessionId = serde_json::from_str(&format!("\"{V7}\"")).unwrap();
        assert_eq!(serde_json::to_string(&ok).unwrap(), format!("\"{V7}\""));
    }

    #[test]
    fn ulid_with_overflowing_first_char_is_refused() {
        assert!(SessionId::parse("81ARZ3NDEKTSV4RRFFQ69G5FAV").is_err());
    }
}
