//! [`StoredDescriptor`]: a session's descriptor (P1) as a record keeps it, its compact JSON
//! text (issue 13, scale). A parsed `serde_json::Value` object cost about 700 B per session in
//! the registry's memory (a map with its own table and a heap string per key and value), the
//! text about 50 B; a registry of a million sessions keeps one per child. On the wire and in
//! snapshots it is the same JSON object as before (byte for byte: the text is written raw).
//!
//! Readers that need fields parse it on demand ([`StoredDescriptor::parse`],
//! [`StoredDescriptor::mode`], [`StoredDescriptor::label`]); in the registry only the label
//! index reads one, a field at a time, without building a map.

use std::borrow::Cow;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

/// A descriptor's JSON text, always a valid JSON value (usually an object).
#[derive(Clone)]
pub struct StoredDescriptor(Box<RawValue>);

impl StoredDescriptor {
    /// The compact text of `value`.
    pub fn from_value(value: &serde_json::Value) -> Self {
        // A `Value` always renders as valid JSON, so this cannot fail; the fallback keeps it
        // total all the same (JSON `null`).
        let raw = serde_json::value::to_raw_value(value)
            .unwrap_or_else(|_| RawValue::from_string("null".to_owned()).expect("null is JSON"));
        Self(raw)
    }

    /// The compact text of a typed descriptor (what a birth carries), with its keys in the
    /// order [`StoredDescriptor::from_value`] writes them (sorted), so a record reads the same
    /// bytes whether it was applied or decoded from a snapshot (and as before descriptors
    /// were typed: digests and snapshots already on disk stay equal).
    pub fn of(descriptor: &lineage_core::descriptor::SubagentDescriptor) -> Self {
        // A descriptor is strings and a list of strings: it always serializes; the fallback
        // keeps this total all the same (JSON `null`).
        Self::from_value(&serde_json::to_value(descriptor).unwrap_or(serde_json::Value::Null))
    }

    /// The JSON text.
    pub fn as_json(&self) -> &str {
        self.0.get()
    }

    /// The descriptor as a `serde_json::Value` (parsed anew on each call).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_str(self.0.get()).unwrap_or(serde_json::Value::Null)
    }

    /// The descriptor as `T`, if it reads as one.
    pub fn parse<T: DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_str(self.0.get()).ok()
    }

    /// The descriptor's `mode` (`one-shot`, `continuable`), if it has one as a string.
    pub fn mode(&self) -> Option<Cow<'_, str>> {
        self.fields().and_then(|f| f.mode)
    }

    /// The descriptor's `label`, if it has one as a string.
    pub fn label(&self) -> Option<Cow<'_, str>> {
        self.fields().and_then(|f| f.label)
    }

    /// The indexed fields, read without building a map (unknown fields are skipped).
    fn fields(&self) -> Option<Fields<'_>> {
        serde_json::from_str(self.0.get()).ok()
    }
}

/// The fields of a descriptor the registry reads (borrowed from the text unless escaped).
#[derive(Deserialize)]
struct Fields<'a> {
    #[serde(borrow, default, deserialize_with = "string_or_none")]
    mode: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "string_or_none")]
    label: Option<Cow<'a, str>>,
}

/// A string, or `None` for any other JSON value (a descriptor with `"label": 3` has no label).
fn string_or_none<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum StrOrOther<'a> {
        Str(#[serde(borrow)] Cow<'a, str>),
        Other(serde::de::IgnoredAny),
    }
    Ok(match StrOrOther::deserialize(d)? {
        StrOrOther::Str(s) => Some(s),
        StrOrOther::Other(_) => None,
    })
}

impl From<&serde_json::Value> for StoredDescriptor {
    fn from(value: &serde_json::Value) -> Self {
        Self::from_value(value)
    }
}

impl From<serde_json::Value> for StoredDescriptor {
    fn from(value: serde_json::Value) -> Self {
        Self::from_value(&value)
    }
}

impl PartialEq for StoredDescriptor {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl Eq for StoredDescriptor {}

impl fmt::Debug for StoredDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.get())
    }
}

impl Serialize for StoredDescriptor {
    /// The JSON object itself, written raw (JSON serializers; the registry's only encoding).
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for StoredDescriptor {
    /// Any JSON value, from any deserializer (read as a value, then kept as its compact text).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Ok(Self::from_value(&value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_wire_form_is_the_json_object_itself() {
        let value = json!({"provider": "script", "mode": "one-shot", "label": "a \"b\""});
        let stored = StoredDescriptor::from_value(&value);
        let wire = serde_json::to_string(&stored).expect("encode");
        assert_eq!(wire, serde_json::to_string(&value).expect("encode"));
        let back: StoredDescriptor = serde_json::from_str(&wire).expect("decode");
        assert_eq!(back, stored);
        assert_eq!(back.to_value(), value);
        // From a `Value` too (not only from text).
        let from_value: StoredDescriptor = serde_json::from_value(value.clone()).expect("decode");
        assert_eq!(from_value, stored);
    }

    #[test]
    fn fields_read_as_strings_or_not_at_all() {
        let stored = StoredDescriptor::from_value(
            &json!({"mode": "continuable", "label": "caf\u{e9} \"x\"", "depth": 3}),
        );
        assert_eq!(stored.mode().as_deref(), Some("continuable"));
        assert_eq!(stored.label().as_deref(), Some("caf\u{e9} \"x\""));
        let odd = StoredDescriptor::from_value(&json!({"mode": 3, "label": null}));
        assert_eq!(odd.mode(), None, "not a string");
        assert_eq!(odd.label(), None, "null");
        assert_eq!(
            StoredDescriptor::from_value(&json!({})).label(),
            None,
            "absent"
        );
        assert_eq!(
            StoredDescriptor::from_value(&json!([1])).mode(),
            None,
            "not an object"
        );
    }
}
