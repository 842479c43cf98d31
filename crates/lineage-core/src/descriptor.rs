//! The subagent descriptor: a child's birth record in its own log (P1, seed §8).
//!
//! Every child log holds exactly one `subagent/descriptor` event after its seed: provider,
//! label, shape, tool filter and persona. A continuable child gets it from
//! [`seed_descriptor_turn`], right after the seed and before the first turn; a one-shot child
//! gets it from [`append_descriptor_at_first_pre_step`], in its first pre-step hook. Cold resume
//! rebuilds the child from [`descriptor_from_log`] alone, without asking the parent.

use serde::{Deserialize, Serialize};

use crate::composition::ChildComposition;
use crate::error::CoreError;
use crate::ids::SessionId;
use crate::log::{SessionEvent, SessionLog};

/// Log event kind of the descriptor.
pub const DESCRIPTOR_EVENT: &str = "subagent/descriptor";

/// The two shapes of child (S1, S3).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SubagentShape {
    /// `one-shot`: one turn, the result returns to the caller, then it is disposed.
    OneShot,
    /// `continuable`: multi-turn, followups, settlement notices, cold resume.
    Continuable,
}

impl SubagentShape {
    /// The wire and log spelling: `one-shot` or `continuable`.
    pub fn as_str(self) -> &'static str {
        match self {
            SubagentShape::OneShot => "one-shot",
            SubagentShape::Continuable => "continuable",
        }
    }
}

/// A child's birth configuration, enough to rebuild its composition on cold resume (P1).
///
/// Unknown fields are refused when read back: a descriptor written by a newer build that this
/// build does not understand must stop a resume rather than lose a restriction.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubagentDescriptor {
    /// The provider that hosts the child, e.g. `scripted` or `acp`; never empty.
    pub provider: String,
    /// A human label for the child, if the parent gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The child's shape.
    pub mode: SubagentShape,
    /// The tool filter applied at birth, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_filter: Option<Vec<String>>,
    /// The persona applied at birth, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persona: Option<String>,
}

impl SubagentDescriptor {
    /// The per-child composition recorded in the descriptor, to re-apply on resume (C1).
    pub fn composition(&self) -> ChildComposition {
        ChildComposition {
            persona: self.persona.clone(),
            tool_filter: self.tool_filter.clone(),
        }
    }

    /// Checks the fields serde cannot: the provider is not blank.
    pub fn validate(&self) -> Result<(), CoreError> {
        if self.provider.trim().is_empty() {
            return Err(CoreError::InvalidPayload {
                what: DESCRIPTOR_EVENT,
                reason: "provider is empty; name the provider that hosts the child".to_owned(),
            });
        }
        Ok(())
    }

    /// The descriptor as log event data.
    fn to_data(&self) -> Result<serde_json::Value, CoreError> {
        self.validate()?;
        serde_json::to_value(self).map_err(|e| CoreError::InvalidPayload {
            what: DESCRIPTOR_EVENT,
            reason: e.to_string(),
        })
    }
}

/// Creates a continuable child's log (P1): the `seed` events first, then the descriptor event,
/// before any turn. The descriptor is validated first.
pub fn seed_descriptor_turn(
    child: SessionId,
    seed: Vec<SessionEvent>,
    descriptor: &SubagentDescriptor,
    at_ms: u64,
) -> Result<SessionLog, CoreError> {
    let data = descriptor.to_data()?;
    let mut log = SessionLog::create(child, seed);
    log.append(DESCRIPTOR_EVENT, data, at_ms);
    Ok(log)
}

/// Rebuilds a child's descriptor from its log alone, for cold resume (P1).
///
/// Only the child's own events count (a descriptor inside the seed belongs to the parent it was
/// forked from). Exactly one descriptor event is expected: none, two, or one that does not parse
/// is refused with [`CoreError::InvalidLog`].
pub fn descriptor_from_log(log: &SessionLog) -> Result<SubagentDescriptor, CoreError> {
    let invalid = |reason: String| CoreError::InvalidLog {
        session: log.session().to_string(),
        reason,
    };
    let mut found = log.own_events_of_kind(DESCRIPTOR_EVENT);
    let event = found.next().ok_or_else(|| {
        invalid(
            "it holds no subagent/descriptor event, so the child cannot be resumed from it; it was not born as a subagent or its log is truncated"
                .to_owned(),
        )
    })?;
    if let Some(second) = found.next() {
        return Err(invalid(format!(
            "it holds more than one subagent/descriptor event (at {} and {}); a child has exactly one",
            event.seq, second.seq
        )));
    }
    let descriptor: SubagentDescriptor =
        serde_json::from_value(event.data.clone()).map_err(|e| {
            invalid(format!(
                "subagent/descriptor event {} is unreadable: {e}",
                event.seq
            ))
        })?;
    descriptor.validate().map_err(|e| match e {
        CoreError::InvalidPayload { reason, .. } => invalid(format!(
            "subagent/descriptor event {} is invalid: {reason}",
            event.seq
        )),
        other => other,
    })?;
    Ok(descriptor)
}

/// The one-shot path of P1: called from the child's pre-step hook, appends the descriptor only
/// if the log has none yet. Returns `true` when it appended, `false` when the same descriptor was
/// already there (so calling it on every pre-step is harmless).
///
/// A log that already holds a *different* descriptor is refused with [`CoreError::InvalidLog`]:
/// a child's birth record never changes.
pub fn append_descriptor_at_first_pre_step(
    log: &mut SessionLog,
    descriptor: &SubagentDescriptor,
    at_ms: u64,
) -> Result<bool, CoreError> {
    let data = descriptor.to_data()?;
    if let Some(existing) = log.descriptor_event() {
        if existing.data != data {
            return Err(CoreError::InvalidLog {
                session: log.session().to_string(),
                reason: format!(
                    "it already holds a different subagent/descriptor event (at {}); a child's descriptor is written once",
                    existing.seq
                ),
            });
        }
        return Ok(false);
    }
    log.append(DESCRIPTOR_EVENT, data, at_ms);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn child() -> SessionId {
        SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000002").unwrap()
    }

    fn continuable() -> SubagentDescriptor {
        SubagentDescriptor {
            provider: "scripted".into(),
            label: Some("reviewer".into()),
            mode: SubagentShape::Continuable,
            tool_filter: Some(vec!["read".into()]),
            persona: Some("You review.".into()),
        }
    }

    fn one_shot() -> SubagentDescriptor {
        SubagentDescriptor {
            provider: "acp".into(),
            label: None,
            mode: SubagentShape::OneShot,
            tool_filter: None,
            persona: None,
        }
    }

    fn seed() -> Vec<SessionEvent> {
        vec![SessionEvent {
            seq: 9,
            kind: "turn/user".into(),
            data: json!({"text": "context"}),
            at_ms: 1,
        }]
    }

    #[test]
    fn p1_descriptor_golden_json() {
        assert_eq!(
            serde_json::to_string(&continuable()).unwrap(),
            r#"{"provider":"scripted","label":"reviewer","mode":"continuable","tool_filter":["read"],"persona":"You review."}"#
        );
        assert_eq!(
            serde_json::to_string(&one_shot()).unwrap(),
            r#"{"provider":"acp","mode":"one-shot"}"#
        );
    }

    #[test]
    fn p1_continuable_descriptor_follows_the_seed_before_any_turn() {
        let log = seed_descriptor_turn(child(), seed(), &continuable(), 5).unwrap();
        let kinds: Vec<_> = log
            .events()
            .iter()
            .map(|e| (e.seq, e.kind.as_str()))
            .collect();
        assert_eq!(kinds, vec![(1, "turn/user"), (2, "subagent/descriptor")]);
        assert_eq!(log.seed_length(), 1);
        assert_eq!(log.events()[1].at_ms, 5);
    }

    #[test]
    fn p1_cold_resume_rebuilds_the_descriptor_from_the_log_alone() {
        let mut log = seed_descriptor_turn(child(), seed(), &continuable(), 5).unwrap();
        log.append("turn/user", json!({"text": "go"}), 6);
        let stored = log.clone().into_events();
        let reloaded = SessionLog::from_events(child(), stored, 1).unwrap();
        let back = descriptor_from_log(&reloaded).unwrap();
        assert_eq!(back, continuable());
        assert_eq!(
            back.composition(),
            ChildComposition {
                persona: Some("You review.".into()),
                tool_filter: Some(vec!["read".into()]),
            }
        );
    }

    #[test]
    fn p1_missing_duplicate_or_unreadable_descriptor_is_a_clear_error() {
        let empty = SessionLog::create(child(), seed());
        let err = descriptor_from_log(&empty).unwrap_err().to_string();
        assert!(err.contains("no subagent/descriptor event"), "{err}");

        let mut twice = seed_descriptor_turn(child(), vec![], &continuable(), 1).unwrap();
        twice.append(
            DESCRIPTOR_EVENT,
            serde_json::to_value(continuable()).unwrap(),
            2,
        );
        let err = descriptor_from_log(&twice).unwrap_err().to_string();
        assert!(err.contains("more than one"), "{err}");

        for (data, expect) in [
            (json!({"provider": "p"}), "missing field `mode`"),
            (
                json!({"provider": "p", "mode": "forever"}),
                "unknown variant",
            ),
            (
                json!({"provider": "p", "mode": "one-shot", "sandbox": "x"}),
                "unknown field",
            ),
            (
                json!({"provider": " ", "mode": "one-shot"}),
                "provider is empty",
            ),
            (json!("text"), "unreadable"),
        ] {
            let mut log = SessionLog::create(child(), vec![]);
            log.append(DESCRIPTOR_EVENT, data, 1);
            let err = descriptor_from_log(&log).unwrap_err();
            assert!(matches!(err, CoreError::InvalidLog { .. }));
            let msg = err.to_string();
            assert!(msg.contains(expect), "{msg}");
            assert!(!msg.contains('\n'), "{msg}");
        }
    }

    #[test]
    fn p1_descriptor_inherited_in_a_fork_seed_is_not_the_childs() {
        let parent_log = seed_descriptor_turn(child(), vec![], &continuable(), 1).unwrap();
        let grandchild = SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000003").unwrap();
        let log =
            seed_descriptor_turn(grandchild, parent_log.into_events(), &one_shot(), 2).unwrap();
        assert_eq!(descriptor_from_log(&log).unwrap(), one_shot());
    }

    #[test]
    fn p1_one_shot_descriptor_is_appended_once_at_first_pre_step() {
        let mut log = SessionLog::create(child(), vec![]);
        log.append("turn/user", json!({"text": "task"}), 1);
        assert!(append_descriptor_at_first_pre_step(&mut log, &one_shot(), 2).unwrap());
        assert!(!append_descriptor_at_first_pre_step(&mut log, &one_shot(), 3).unwrap());
        assert_eq!(log.own_events_of_kind(DESCRIPTOR_EVENT).count(), 1);
        assert_eq!(descriptor_from_log(&log).unwrap(), one_shot());
        let err = append_descriptor_at_first_pre_step(&mut log, &continuable(), 4).unwrap_err();
        assert!(err.to_string().contains("different"), "{err}");
        assert_eq!(log.len(), 2);
    }

    #[test]
    fn p1_blank_provider_is_refused_before_writing() {
        let mut bad = one_shot();
        bad.provider = String::new();
        assert!(seed_descriptor_turn(child(), vec![], &bad, 1).is_err());
        let mut log = SessionLog::create(child(), vec![]);
        assert!(append_descriptor_at_first_pre_step(&mut log, &bad, 1).is_err());
        assert!(log.is_empty());
    }

    #[test]
    fn s1_shapes_serialize_as_kebab_case() {
        assert_eq!(
            serde_json::to_string(&SubagentShape::OneShot).unwrap(),
            "\"one-shot\""
        );
        assert_eq!(SubagentShape::Continuable.as_str(), "continuable");
    }
}
