//! Strict decoding of the payloads (N3): JSON parsing, the version check, the `kind` a payload
//! names, one-line errors that quote what they refuse, shortened; and the text helpers the
//! summaries use.

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::*;

/// Serializes a payload. Our payload types hold only strings, integers, booleans and unit
/// enums, which serde_json always serializes, and writing into a `Vec` cannot fail; should that
/// ever change, the result is empty bytes, which every decoder refuses (fail closed).
pub(super) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// Parses bytes as JSON.
pub(super) fn parse_json(what: &'static str, bytes: &[u8]) -> Result<serde_json::Value, CoreError> {
    serde_json::from_slice(bytes).map_err(|e| invalid(what, &e.to_string()))
}

/// Checks that `value` is an object carrying `"v": 1`.
pub(super) fn check_version(
    what: &'static str,
    value: &serde_json::Value,
) -> Result<(), CoreError> {
    let object = value
        .as_object()
        .ok_or_else(|| invalid(what, "expected a JSON object"))?;
    let v = object.get("v").ok_or_else(|| {
        invalid(
            what,
            "missing field `v`; every lineage payload carries \"v\": 1",
        )
    })?;
    let found = v.as_u64().ok_or_else(|| {
        invalid(
            what,
            &format!(
                "v must be a non-negative integer, got {}",
                shorten(&v.to_string())
            ),
        )
    })?;
    if found != WIRE_VERSION {
        return Err(CoreError::UnsupportedVersion {
            what,
            found,
            supported: WIRE_VERSION,
        });
    }
    Ok(())
}

/// Checks the version, then decodes `T` (whose serde checks the literal fields).
pub(super) fn from_checked_value<T: DeserializeOwned>(
    what: &'static str,
    value: serde_json::Value,
) -> Result<T, CoreError> {
    check_version(what, &value)?;
    serde_json::from_value(value).map_err(|e| invalid(what, &e.to_string()))
}

/// Checks the version, then reads payload `T` out of its envelope.
fn from_envelope<T: super::wire::Payload>(value: serde_json::Value) -> Result<T, CoreError> {
    from_checked_value::<super::wire::Incoming<T>>(T::WHAT, value).map(|incoming| incoming.body)
}

/// Reads a string field of a JSON object, for dispatch.
pub(super) fn literal_field<'a>(value: &'a serde_json::Value, field: &str) -> Option<&'a str> {
    value.get(field).and_then(serde_json::Value::as_str)
}

/// Decodes an inbox payload by its `kind`.
pub(super) fn inbox_from_value(value: serde_json::Value) -> Result<InboxMessage, CoreError> {
    check_version(INBOX_WHAT, &value)?;
    match literal_field(&value, "kind") {
        Some(REPORT_KIND) => from_envelope(value).map(InboxMessage::Report),
        Some(SETTLED_KIND) => from_envelope(value).map(InboxMessage::Settled),
        other => Err(invalid(
            INBOX_WHAT,
            &format!(
                "kind must be {REPORT_KIND:?} or {SETTLED_KIND:?}, got {}",
                describe(other, &value, "kind")
            ),
        )),
    }
}

/// Decodes a lifecycle payload by its `event`.
pub(super) fn lifecycle_from_value(value: serde_json::Value) -> Result<LifecycleEvent, CoreError> {
    check_version(LIFECYCLE_WHAT, &value)?;
    match literal_field(&value, "event") {
        Some(START_EVENT) => from_envelope(value).map(LifecycleEvent::Start),
        Some(END_EVENT) => from_envelope(value).map(LifecycleEvent::End),
        other => Err(invalid(
            LIFECYCLE_WHAT,
            &format!(
                "event must be {START_EVENT:?} or {END_EVENT:?}, got {}",
                describe(other, &value, "event")
            ),
        )),
    }
}

/// Describes a dispatch field that matched nothing, for the error.
pub(super) fn describe(text: Option<&str>, value: &serde_json::Value, field: &str) -> String {
    match (text, value.get(field)) {
        (Some(text), _) => format!("{:?}", shorten(text)),
        (None, Some(other)) => shorten(&other.to_string()),
        (None, None) => "nothing".to_owned(),
    }
}

/// A [`CoreError::InvalidPayload`] whose reason is one bounded line.
pub(super) fn invalid(what: &'static str, reason: &str) -> CoreError {
    CoreError::InvalidPayload {
        what,
        reason: one_line(reason),
    }
}

/// True for characters that break a line or are otherwise invisible control codes.
pub(super) fn breaks_line(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// Every run of whitespace and control characters becomes one space; ends trimmed.
pub(super) fn one_line(text: &str) -> String {
    text.split(|c: char| c.is_whitespace() || breaks_line(c))
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Keeps echoed input bounded in error messages.
pub(super) fn shorten(text: &str) -> String {
    let mut out: String = text.chars().take(80).collect();
    if text.chars().count() > 80 {
        out.push('…');
    }
    out
}
