//! The session header: durable lineage frozen at birth (L1–L4, seed §2).
//!
//! A [`SessionHeader`] can only be built by [`SessionHeader::top_level`], [`child_session_meta`]
//! or deserialization, and each path validates (L2): `origin` is absent or exactly
//! `"subagent"`, `delegation_depth` and `seed_length` are non-negative safe integers, a child
//! names its parent and root, a top-level session names neither a parent nor an origin. An
//! invalid header therefore cannot exist in memory, and a malformed record can never turn a
//! child into a top-level session: it is refused instead.

use serde::{Deserialize, Serialize};

use crate::depth::{safe_integer_from_json, MAX_SAFE_INTEGER};
use crate::error::CoreError;
use crate::ids::SessionId;

/// Where a session came from. Only subagents are marked; a top-level session has no origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Origin {
    /// Born as a child of another session (`"subagent"` on the wire).
    #[serde(rename = "subagent")]
    Subagent,
}

/// One prompt section of a preset.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptSection {
    /// Section name, e.g. `subagent:delegation`.
    pub name: String,
    /// Sort key: lower comes first.
    pub order: i64,
    /// The text.
    pub text: String,
}

/// A composed agent preset: the tools and prompt sections a parent runs with (C1). A child
/// joins its parent's composed preset.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AgentPreset {
    /// Preset name.
    pub name: String,
    /// Tool names available to the agent.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Prompt sections.
    #[serde(default)]
    pub prompt_sections: Vec<PromptSection>,
}

/// A session's frozen birth certificate (L1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawHeader")]
pub struct SessionHeader {
    id: SessionId,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent_session: Option<SessionId>,
    root_session: SessionId,
    #[serde(skip_serializing_if = "Option::is_none")]
    origin: Option<Origin>,
    #[serde(skip_serializing_if = "Number::is_none")]
    delegation_depth: Number,
    #[serde(skip_serializing_if = "Number::is_none")]
    seed_length: Number,
    #[serde(skip_serializing_if = "Option::is_none")]
    cwd: Option<Box<str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    agent_preset: Option<Box<AgentPreset>>,
    #[serde(skip_serializing_if = "Number::is_none")]
    deadline_at_ms: Number,
}

/// An optional non-negative number in 8 bytes where `Option<u64>` takes 16 (issue 13: the
/// registry holds a million headers): `u64::MAX` stands for none. A header's numbers are safe
/// integers (at most 2^53-1), so no valid value is lost; a larger one is kept as
/// `u64::MAX - 1`, which [`SessionHeader::validate`] refuses as it refused the value.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Number(u64);

impl Number {
    const NONE: Number = Number(u64::MAX);

    fn new(value: Option<u64>) -> Self {
        match value {
            Some(v) => Number(v.min(u64::MAX - 1)),
            None => Number::NONE,
        }
    }

    fn get(self) -> Option<u64> {
        (self.0 != u64::MAX).then_some(self.0)
    }

    fn is_none(&self) -> bool {
        self.0 == u64::MAX
    }
}

impl std::fmt::Debug for Number {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

impl Serialize for Number {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.get().serialize(s)
    }
}

/// Its schema is that of what the wire may carry ([`RawHeader`]); the rules serde cannot
/// say (L2: `origin`, safe integers) are checked when it is read.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for SessionHeader {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SessionHeader".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        RawHeader::json_schema(generator)
    }
}

/// The header as it arrives from storage or the wire, before validation.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHeader {
    id: SessionId,
    #[serde(default)]
    parent_session: Option<SessionId>,
    root_session: Option<SessionId>,
    #[serde(default)]
    origin: Option<serde_json::Value>,
    #[serde(default)]
    delegation_depth: Option<serde_json::Value>,
    #[serde(default)]
    seed_length: Option<serde_json::Value>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    agent_preset: Option<AgentPreset>,
    #[serde(default)]
    deadline_at_ms: Option<serde_json::Value>,
}

impl TryFrom<RawHeader> for SessionHeader {
    type Error = CoreError;

    fn try_from(raw: RawHeader) -> Result<Self, Self::Error> {
        let origin = match raw.origin {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) if s == "subagent" => Some(Origin::Subagent),
            Some(other) => {
                return Err(CoreError::InvalidHeader {
                    field: "origin",
                    reason: format!("must be absent or exactly \"subagent\", got {other}"),
                })
            }
        };
        let number =
            |field: &'static str, v: Option<serde_json::Value>| match v {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(v) => safe_integer_from_json(field, &v).map(Some).map_err(|e| {
                    CoreError::InvalidHeader {
                        field,
                        reason: match e {
                            CoreError::InvalidNumber { reason, .. } => {
                                format!("{reason}; it must be a non-negative safe integer")
                            }
                            other => other.to_string(),
                        },
                    }
                }),
            };
        let header = SessionHeader {
            root_session: raw.root_session.unwrap_or_else(|| raw.id.clone()),
            id: raw.id,
            parent_session: raw.parent_session,
            origin,
            delegation_depth: Number::new(number("delegation_depth", raw.delegation_depth)?),
            seed_length: Number::new(number("seed_length", raw.seed_length)?),
            cwd: raw.cwd.map(String::into_boxed_str),
            agent_preset: raw.agent_preset.map(Box::new),
            deadline_at_ms: Number::new(number("deadline_at_ms", raw.deadline_at_ms)?),
        };
        header.validate()?;
        Ok(header)
    }
}

/// What a top-level spawn may ask (issue 37: nothing it asks is silently dropped). A
/// top-level session is continuable (it ends by a drain, the seed's rule), so `one-shot` is
/// refused; a label names a child in its parent's tree, so a top-level one is refused too.
/// `shape` and `label` are what the request gave.
pub fn check_top_level(
    shape: Option<crate::descriptor::SubagentShape>,
    label: Option<&str>,
) -> Result<(), CoreError> {
    let refuse = |reason: &str| {
        Err(CoreError::InvalidPayload {
            what: "spawn",
            reason: reason.to_owned(),
        })
    };
    if shape == Some(crate::descriptor::SubagentShape::OneShot) {
        return refuse(
            "a top-level session is continuable (it ends by a drain); one-shot is a child's \
             shape: give --parent, or leave --shape out",
        );
    }
    if label.is_some() {
        return refuse(
            "a label names a child in its parent's tree; a top-level session has none: give \
             --parent, or leave --label out",
        );
    }
    Ok(())
}

impl SessionHeader {
    /// A top-level session: depth 0, no parent, no origin, its own root.
    pub fn top_level(
        id: SessionId,
        cwd: Option<String>,
        agent_preset: Option<AgentPreset>,
    ) -> Self {
        SessionHeader {
            root_session: id.clone(),
            id,
            parent_session: None,
            origin: None,
            delegation_depth: Number::NONE,
            seed_length: Number::NONE,
            cwd: cwd.map(String::into_boxed_str),
            agent_preset: agent_preset.map(Box::new),
            deadline_at_ms: Number::NONE,
        }
    }

    /// The same header with its deadline (Q2) set to `requested` when that is earlier than the
    /// one it has (a child's starts as its parent's, so a child can never outlive its parent's
    /// deadline: the result is always `min(parent's, requested)`). `None` changes nothing.
    /// Only for building a header at birth: once registered, a header is frozen.
    pub fn with_deadline(mut self, requested: Option<u64>) -> Self {
        self.deadline_at_ms = Number::new(match (self.deadline_at_ms.get(), requested) {
            (Some(current), Some(requested)) => Some(current.min(requested)),
            (current, requested) => current.or(requested),
        });
        self
    }

    /// Checks every L2 rule and the lineage shape; every constructor runs it.
    pub fn validate(&self) -> Result<(), CoreError> {
        let bad = |field: &'static str, reason: &str| {
            Err(CoreError::InvalidHeader {
                field,
                reason: reason.to_owned(),
            })
        };
        for (field, value) in [
            ("delegation_depth", self.delegation_depth.get()),
            ("seed_length", self.seed_length.get()),
            ("deadline_at_ms", self.deadline_at_ms.get()),
        ] {
            if value.is_some_and(|v| v > MAX_SAFE_INTEGER) {
                return bad(
                    field,
                    "must be a non-negative safe integer (at most 2^53-1)",
                );
            }
        }
        if self.seed_length.get() == Some(0) {
            return bad("seed_length", "is only written when greater than 0");
        }
        match (&self.parent_session, self.origin) {
            (Some(parent), Some(Origin::Subagent)) => {
                if parent == &self.id {
                    return bad("parent_session", "a session cannot be its own parent");
                }
                if self.root_session == self.id {
                    return bad("root_session", "a child cannot be the root of its own tree");
                }
                if self.delegation_depth.get().is_none_or(|d| d < 1) {
                    return bad("delegation_depth", "a subagent must have depth 1 or more");
                }
            }
            (Some(_), None) => {
                return bad(
                    "origin",
                    "a session with a parent_session must have origin \"subagent\"",
                )
            }
            (None, Some(Origin::Subagent)) => {
                return bad("parent_session", "a subagent must name its parent_session")
            }
            (None, None) => {
                if self.root_session != self.id {
                    return bad("root_session", "a top-level session is its own root");
                }
                if self.delegation_depth.get().is_some_and(|d| d != 0) {
                    return bad("delegation_depth", "a top-level session has depth 0");
                }
            }
        }
        Ok(())
    }

    /// The session's id.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// Makes its id, parent and root share the text of the given ids where they are equal
    /// (ids are shared text, and a header read from the wire has its own copy of each).
    /// Changes no value; a registry holding a million headers keeps one copy of each id
    /// instead of three.
    pub fn share_ids(&mut self, id: &SessionId, parent: Option<&SessionId>, root: &SessionId) {
        if &self.id == id {
            self.id = id.clone();
        }
        if let Some(parent) = parent {
            if self.parent_session.as_ref() == Some(parent) {
                self.parent_session = Some(parent.clone());
            }
        }
        if &self.root_session == root {
            self.root_session = root.clone();
        }
    }
    /// The durable parent, `None` for a top-level session (L4: walk it to reach the root).
    pub fn parent_session(&self) -> Option<&SessionId> {
        self.parent_session.as_ref()
    }
    /// The root of this session's tree (itself when top level).
    pub fn root_session(&self) -> &SessionId {
        &self.root_session
    }
    /// `Some(Origin::Subagent)` for children.
    pub fn origin(&self) -> Option<Origin> {
        self.origin
    }
    /// The frozen delegation depth, if written (children always have one).
    pub fn delegation_depth(&self) -> Option<u64> {
        self.delegation_depth.get()
    }
    /// How many log events were inherited from a fork seed (only present when > 0).
    pub fn seed_length(&self) -> Option<u64> {
        self.seed_length.get()
    }
    /// The working directory inherited from the parent, if any.
    pub fn cwd(&self) -> Option<&str> {
        self.cwd.as_deref()
    }
    /// The parent's composed preset the child joined, if any.
    pub fn agent_preset(&self) -> Option<&AgentPreset> {
        self.agent_preset.as_deref()
    }
    /// The absolute deadline of this session's subtree (Q2, ms since the Unix epoch), if it has
    /// one: at it, the deadline sweeper drains the subtree with stop reason `deadline`.
    pub fn deadline_at_ms(&self) -> Option<u64> {
        self.deadline_at_ms.get()
    }
    /// True when the header says this session is a subagent.
    pub fn is_subagent(&self) -> bool {
        self.origin == Some(Origin::Subagent)
    }
}

/// Computes a child's header once, at birth (L1): `cwd` inherited if the parent has one,
/// `agent_preset` = the parent's composed preset if any, `parent_session`, `origin =
/// "subagent"`, `delegation_depth`, `seed_length` only when > 0, the parent's root and the
/// parent's deadline (Q2; [`SessionHeader::with_deadline`] can only make it earlier).
///
/// `child_depth` must come from [`crate::depth::resolve_child_depth`].
pub fn child_session_meta(
    parent: &SessionHeader,
    child_id: SessionId,
    child_depth: u64,
    lineage_seed_length: u64,
    composed_preset: Option<AgentPreset>,
) -> Result<SessionHeader, CoreError> {
    let header = SessionHeader {
        id: child_id,
        parent_session: Some(parent.id.clone()),
        root_session: parent.root_session.clone(),
        origin: Some(Origin::Subagent),
        delegation_depth: Number::new(Some(child_depth)),
        seed_length: Number::new((lineage_seed_length > 0).then_some(lineage_seed_length)),
        cwd: parent.cwd.clone(),
        agent_preset: composed_preset.map(Box::new),
        deadline_at_ms: parent.deadline_at_ms,
    };
    header.validate()?;
    Ok(header)
}

#[cfg(test)]
mod top_level_tests {
    use super::*;
    use crate::descriptor::SubagentShape;

    #[test]
    fn a_top_level_spawn_is_continuable_and_unlabelled() {
        assert!(check_top_level(None, None).is_ok());
        assert!(check_top_level(Some(SubagentShape::Continuable), None).is_ok());
        let one_shot = check_top_level(Some(SubagentShape::OneShot), None).unwrap_err();
        assert!(one_shot.to_string().contains("give --parent"), "{one_shot}");
        let labelled = check_top_level(None, Some("x")).unwrap_err();
        assert!(
            labelled.to_string().contains("leave --label out"),
            "{labelled}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::ids::sid;

    fn root() -> SessionHeader {
        SessionHeader::top_level(sid(1), Some("/work".into()), None)
    }

    #[test]
    fn l1_child_header_is_computed_from_the_parent() {
        let preset = AgentPreset {
            name: "coder".into(),
            tools: vec!["read".into()],
            prompt_sections: vec![],
        };
        let child = child_session_meta(&root(), sid(2), 1, 3, Some(preset.clone())).unwrap();
        assert_eq!(child.parent_session(), Some(&sid(1)));
        assert_eq!(child.root_session(), &sid(1));
        assert_eq!(child.origin(), Some(Origin::Subagent));
        assert_eq!(child.delegation_depth(), Some(1));
        assert_eq!(child.seed_length(), Some(3));
        assert_eq!(child.cwd(), Some("/work"));
        assert_eq!(child.agent_preset(), Some(&preset));
        let no_seed = child_session_meta(&root(), sid(3), 1, 0, None).unwrap();
        assert_eq!(no_seed.seed_length(), None);
        let json = serde_json::to_value(&no_seed).unwrap();
        assert!(json.get("seed_length").is_none());
        assert!(json.get("agent_preset").is_none());
    }

    #[test]
    fn l1_grandchild_keeps_the_root() {
        let child = child_session_meta(&root(), sid(2), 1, 0, None).unwrap();
        let grandchild = child_session_meta(&child, sid(3), 2, 0, None).unwrap();
        assert_eq!(grandchild.root_session(), &sid(1));
        assert_eq!(grandchild.parent_session(), Some(&sid(2)));
    }

    #[test]
    fn l2_golden_json_round_trip() {
        let child = child_session_meta(&root(), sid(2), 1, 2, None).unwrap();
        let text = serde_json::to_string(&child).unwrap();
        assert_eq!(
            text,
            r#"{"id":"01936c1e-7a3b-7cde-8f00-000000000002","parent_session":"01936c1e-7a3b-7cde-8f00-000000000001","root_session":"01936c1e-7a3b-7cde-8f00-000000000001","origin":"subagent","delegation_depth":1,"seed_length":2,"cwd":"/work"}"#
        );
        let back: SessionHeader = serde_json::from_str(&text).unwrap();
        assert_eq!(back, child);
    }

    #[test]
    fn l2_store_refuses_malformed_headers() {
        let base = json!({
            "id": sid(2).as_str(), "parent_session": sid(1).as_str(),
            "root_session": sid(1).as_str(), "origin": "subagent", "delegation_depth": 1
        });
        assert!(serde_json::from_value::<SessionHeader>(base.clone()).is_ok());
        let cases: Vec<(&str, serde_json::Value, &str)> = vec![
            ("origin", json!("fork"), "origin"),
            ("origin", json!(1), "origin"),
            ("delegation_depth", json!(-1), "delegation_depth"),
            ("delegation_depth", json!(1.5), "delegation_depth"),
            ("delegation_depth", json!("1"), "delegation_depth"),
            (
                "delegation_depth",
                json!(9007199254740992u64),
                "delegation_depth",
            ),
            ("delegation_depth", json!(0), "delegation_depth"),
            ("seed_length", json!(-3), "seed_length"),
            ("seed_length", json!(0), "seed_length"),
            ("parent_session", json!("a.b"), "session id"),
            ("root_session", json!(sid(2).as_str()), "root_session"),
            ("bogus_field", json!(1), "unknown field"),
        ];
        for (field, value, expect) in cases {
            let mut v = base.clone();
            v[field] = value.clone();
            let err = serde_json::from_value::<SessionHeader>(v)
                .expect_err(&format!("{field}={value}"))
                .to_string();
            assert!(err.contains(expect), "{field}={value}: {err}");
        }
    }

    #[test]
    fn l2_malformed_child_never_becomes_top_level() {
        // A child record whose origin was dropped is refused, not read as a top-level session.
        let v = json!({"id": sid(2).as_str(), "parent_session": sid(1).as_str(), "delegation_depth": 1});
        assert!(serde_json::from_value::<SessionHeader>(v).is_err());
        // A record with origin but no parent is refused too.
        let v = json!({"id": sid(2).as_str(), "origin": "subagent", "delegation_depth": 1});
        assert!(serde_json::from_value::<SessionHeader>(v).is_err());
        // A depth on a top-level record is refused: the record is malformed.
        let v = json!({"id": sid(2).as_str(), "delegation_depth": 2});
        assert!(serde_json::from_value::<SessionHeader>(v).is_err());
    }

    #[test]
    fn l3_resume_reads_depth_parent_and_seed_from_the_frozen_header() {
        let child = child_session_meta(&root(), sid(2), 1, 5, None).unwrap();
        let stored = serde_json::to_vec(&child).unwrap();
        let resumed: SessionHeader = serde_json::from_slice(&stored).unwrap();
        assert_eq!(resumed.delegation_depth(), Some(1));
        assert_eq!(resumed.parent_session(), Some(&sid(1)));
        assert_eq!(resumed.seed_length(), Some(5));
        assert_eq!(crate::depth::delegation_depth_of(&resumed, Some(0)), 1);
    }

    #[test]
    fn l4_walking_parent_session_reaches_the_root() {
        let mut headers = std::collections::HashMap::new();
        let mut parent = root();
        headers.insert(parent.id().clone(), parent.clone());
        for n in 2..8 {
            let child = child_session_meta(&parent, sid(n), n as u64 - 1, 0, None).unwrap();
            headers.insert(child.id().clone(), child.clone());
            parent = child;
        }
        let mut cursor = parent;
        let mut steps = 0;
        while let Some(p) = cursor.parent_session() {
            cursor = headers[p].clone();
            steps += 1;
        }
        assert_eq!(cursor.id(), &sid(1));
        assert_eq!(steps, 6);
    }

    #[test]
    fn q2_a_child_inherits_its_parents_deadline_and_can_only_make_it_earlier() {
        let top = root().with_deadline(Some(10_000));
        assert_eq!(top.deadline_at_ms(), Some(10_000));
        let later = child_session_meta(&top, sid(2), 1, 0, None)
            .unwrap()
            .with_deadline(Some(60_000));
        assert_eq!(
            later.deadline_at_ms(),
            Some(10_000),
            "min(parent's, requested)"
        );
        let earlier = child_session_meta(&top, sid(3), 1, 0, None)
            .unwrap()
            .with_deadline(Some(4_000));
        assert_eq!(earlier.deadline_at_ms(), Some(4_000));
        let none = child_session_meta(&top, sid(4), 1, 0, None)
            .unwrap()
            .with_deadline(None);
        assert_eq!(none.deadline_at_ms(), Some(10_000));
        assert_eq!(root().with_deadline(None).deadline_at_ms(), None);
        let text = serde_json::to_string(&earlier).unwrap();
        assert!(text.contains(r#""deadline_at_ms":4000"#), "{text}");
        let back: SessionHeader = serde_json::from_str(&text).unwrap();
        assert_eq!(back, earlier);
    }

    #[test]
    fn q2_a_deadline_that_is_not_a_safe_integer_is_refused() {
        for bad in ["-1", "1.5", "\"soon\"", "9007199254740992"] {
            let text = format!(
                r#"{{"id":"01936c1e-7a3b-7cde-8f00-000000000001","deadline_at_ms":{bad}}}"#
            );
            let e = serde_json::from_str::<SessionHeader>(&text).unwrap_err();
            assert!(e.to_string().contains("deadline_at_ms"), "{bad}: {e}");
        }
    }
}
