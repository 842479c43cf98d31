//! Delegation depth, the recursion budget (D1–D4, seed §1).
//!
//! Depth is a non-negative *safe* integer (at most 2^53-1, because JavaScript clients read our
//! headers): top level is 0, a child is its parent plus one. A runtime override can only raise
//! it ([`delegation_depth_of`] takes the max), so a resumed child never becomes top level.

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::CoreError;
use crate::header::SessionHeader;

/// `Number.MAX_SAFE_INTEGER`: the largest depth, max depth or seed length we accept.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// The child would be deeper than `max_depth` (D3). Structured so the tool layer can turn it
/// into model feedback ("you may not delegate further").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("subagent depth {attempted_depth} exceeds max depth {max_depth}; finish this task without delegating further or raise max_depth")]
pub struct SubagentDepthError {
    /// The depth the child would have had.
    pub attempted_depth: u64,
    /// The cap in force.
    pub max_depth: u64,
}

/// A validated maximum delegation depth (D4): a non-negative safe integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct MaxDepth(u64);

impl MaxDepth {
    /// Validates a max depth given as a plain integer.
    pub fn new(value: u64) -> Result<Self, CoreError> {
        check_safe("max_depth", value).map(Self)
    }

    /// A max depth from a `u32`, which is always a safe integer (for defaults in code).
    pub const fn from_u32(value: u32) -> Self {
        Self(value as u64)
    }

    /// The cap as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for MaxDepth {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "MaxDepth".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "integer",
            "minimum": 0,
            "maximum": MAX_SAFE_INTEGER,
            "description": "a maximum delegation depth: a non-negative safe integer (D4)",
        })
    }
}

impl<'de> Deserialize<'de> for MaxDepth {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = serde_json::Value::deserialize(d)?;
        validate_max_depth(&raw).map_err(serde::de::Error::custom)
    }
}

fn check_safe(field: &str, value: u64) -> Result<u64, CoreError> {
    if value > MAX_SAFE_INTEGER {
        return Err(CoreError::InvalidNumber {
            field: field.to_owned(),
            reason: format!("{value} is larger than 2^53-1"),
        });
    }
    Ok(value)
}

/// Reads a non-negative safe integer out of untyped JSON (or config) input, refusing negative
/// numbers, negative zero, fractions, NaN-like values, strings and anything above 2^53-1, with
/// an error that names `field`.
pub fn safe_integer_from_json(field: &str, value: &serde_json::Value) -> Result<u64, CoreError> {
    let refuse = |reason: String| CoreError::InvalidNumber {
        field: field.to_owned(),
        reason,
    };
    match value {
        serde_json::Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                return check_safe(field, u);
            }
            if let Some(i) = n.as_i64() {
                return Err(refuse(format!("{i} is negative")));
            }
            match n.as_f64() {
                Some(f) if f == 0.0 && f.is_sign_negative() => {
                    Err(refuse("negative zero is not allowed".to_owned()))
                }
                Some(f) if f.fract() != 0.0 => Err(refuse(format!("{f} is not a whole number"))),
                Some(f) if f < 0.0 => Err(refuse(format!("{f} is negative"))),
                Some(f) if f.is_finite() && f <= MAX_SAFE_INTEGER as f64 => Err(refuse(format!(
                    "{f} is written as a float; write it as an integer"
                ))),
                Some(f) => Err(refuse(format!("{f} is larger than 2^53-1"))),
                None => Err(refuse(format!("{n} is not a number we can read"))),
            }
        }
        serde_json::Value::String(s) => Err(refuse(format!("got the string {s:?}, not a number"))),
        serde_json::Value::Null => Err(refuse("got null, not a number".to_owned())),
        serde_json::Value::Bool(b) => Err(refuse(format!("got {b}, not a number"))),
        serde_json::Value::Array(_) => Err(refuse("got an array, not a number".to_owned())),
        serde_json::Value::Object(_) => Err(refuse("got an object, not a number".to_owned())),
    }
}

/// Validates a `max_depth` from config or a request before any child is created (D4).
pub fn validate_max_depth(value: &serde_json::Value) -> Result<MaxDepth, CoreError> {
    safe_integer_from_json("max_depth", value).map(MaxDepth)
}

/// `delegation_depth_of(agent) = max(header.delegation_depth or 0, runtime override or 0)` (D2).
///
/// The frozen header is a floor: an override can raise the depth, never lower it.
pub fn delegation_depth_of(header: &SessionHeader, runtime_override: Option<u64>) -> u64 {
    header
        .delegation_depth()
        .unwrap_or(0)
        .max(runtime_override.unwrap_or(0))
}

/// The depth of a new child of a parent at `parent_depth` (D3): parent + 1, refused past
/// 2^53-1 ([`CoreError::DepthOverflow`]) or above `max_depth` ([`SubagentDepthError`]).
pub fn resolve_child_depth(
    parent_depth: u64,
    max_depth: Option<MaxDepth>,
) -> Result<u64, CoreError> {
    let child_depth = parent_depth
        .checked_add(1)
        .filter(|d| *d <= MAX_SAFE_INTEGER)
        .ok_or(CoreError::DepthOverflow { parent_depth })?;
    if let Some(max) = max_depth {
        if child_depth > max.get() {
            return Err(SubagentDepthError {
                attempted_depth: child_depth,
                max_depth: max.get(),
            }
            .into());
        }
    }
    Ok(child_depth)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SessionId;
    use serde_json::json;

    const ROOT: &str = "01936c1e-7a3b-7cde-8f00-000000000001";

    fn top() -> SessionHeader {
        SessionHeader::top_level(SessionId::parse(ROOT).unwrap(), None, None)
    }

    #[test]
    fn d1_top_level_is_zero_and_child_is_parent_plus_one() {
        assert_eq!(delegation_depth_of(&top(), None), 0);
        assert_eq!(resolve_child_depth(0, None).unwrap(), 1);
        assert_eq!(resolve_child_depth(4, None).unwrap(), 5);
    }

    #[test]
    fn d2_runtime_override_raises_but_never_lowers() {
        assert_eq!(delegation_depth_of(&top(), Some(3)), 3);
        let child = crate::header::child_session_meta(
            &top(),
            SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000002").unwrap(),
            2,
            0,
            None,
        )
        .unwrap();
        assert_eq!(delegation_depth_of(&child, Some(0)), 2);
        assert_eq!(delegation_depth_of(&child, None), 2);
        assert_eq!(delegation_depth_of(&child, Some(7)), 7);
    }

    #[test]
    fn d3_depth_above_max_is_a_structured_error() {
        let max = MaxDepth::new(2).unwrap();
        assert_eq!(resolve_child_depth(1, Some(max)).unwrap(), 2);
        let err = resolve_child_depth(2, Some(max)).unwrap_err();
        assert_eq!(
            err,
            CoreError::Depth(SubagentDepthError {
                attempted_depth: 3,
                max_depth: 2
            })
        );
        assert!(err.to_string().contains("exceeds max depth 2"));
        let zero = MaxDepth::new(0).unwrap();
        assert!(resolve_child_depth(0, Some(zero)).is_err());
    }

    #[test]
    fn d3_overflow_past_safe_integer_is_an_error() {
        assert_eq!(
            resolve_child_depth(MAX_SAFE_INTEGER, None),
            Err(CoreError::DepthOverflow {
                parent_depth: MAX_SAFE_INTEGER
            })
        );
        assert_eq!(
            resolve_child_depth(u64::MAX, None),
            Err(CoreError::DepthOverflow {
                parent_depth: u64::MAX
            })
        );
        assert_eq!(
            resolve_child_depth(MAX_SAFE_INTEGER - 1, None).unwrap(),
            MAX_SAFE_INTEGER
        );
    }

    #[test]
    fn d4_max_depth_accepts_non_negative_safe_integers() {
        assert_eq!(validate_max_depth(&json!(0)).unwrap().get(), 0);
        assert_eq!(validate_max_depth(&json!(3)).unwrap().get(), 3);
        assert_eq!(
            validate_max_depth(&json!(MAX_SAFE_INTEGER)).unwrap().get(),
            MAX_SAFE_INTEGER
        );
    }

    #[test]
    fn d4_max_depth_refuses_negative_fractional_negzero_strings_and_too_large() {
        let bad: Vec<serde_json::Value> = vec![
            json!(-1),
            json!(1.5),
            serde_json::from_str("-0").unwrap(),
            serde_json::from_str("-0.0").unwrap(),
            json!("3"),
            json!(null),
            json!(true),
            json!([1]),
            json!({"a": 1}),
            json!(MAX_SAFE_INTEGER + 1),
            json!(1e300),
            serde_json::from_str("3.0").unwrap(),
        ];
        for v in bad {
            let err = validate_max_depth(&v).expect_err(&v.to_string());
            let msg = err.to_string();
            assert!(msg.starts_with("invalid max_depth"), "{v}: {msg}");
        }
        assert!(MaxDepth::new(MAX_SAFE_INTEGER + 1).is_err());
    }

    #[test]
    fn d4_max_depth_deserializes_only_valid_values() {
        assert_eq!(serde_json::from_str::<MaxDepth>("4").unwrap().get(), 4);
        for bad in ["-1", "-0", "1.5", "\"2\"", "9007199254740992"] {
            let err = serde_json::from_str::<MaxDepth>(bad)
                .unwrap_err()
                .to_string();
            assert!(err.contains("max_depth"), "{bad}: {err}");
        }
    }
}
