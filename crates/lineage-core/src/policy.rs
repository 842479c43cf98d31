//! The delegated policy snapshot (C2, C3, seed §6.2).
//!
//! Before the first await of a spawn, the shell reads a [`ParentPolicyView`] off the parent and
//! [`capture_delegated_policy_overrides`] turns it into a [`DelegatedPolicyOverrides`]: the
//! parent's sandbox override, and approval policy `never` whenever the parent has an approval
//! service, so a child can never ask a human for approval. The snapshot is appended to the
//! child's log as `sandbox/mode` and `approval/policy` events with `source: "delegation"`; on
//! resume [`reapply_delegated_policy`] rebuilds it from those events alone, so later changes by
//! the parent (or anything else not marked `delegation`) never reach a delegated child.

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::log::{SessionEvent, SessionLog};

/// Log event kind of the delegated sandbox mode.
pub const SANDBOX_MODE_EVENT: &str = "sandbox/mode";
/// Log event kind of the delegated approval policy.
pub const APPROVAL_POLICY_EVENT: &str = "approval/policy";
/// The `source` value that marks a policy event written at delegation time.
pub const DELEGATION_SOURCE: &str = "delegation";

/// How far an agent's tools may reach. An enum rather than free text, so an unknown mode in a
/// log is refused instead of being silently ignored (which could widen a child's permissions).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// `read-only`: may read, never write.
    ReadOnly,
    /// `workspace-write`: may write inside the working directory only.
    WorkspaceWrite,
    /// `danger-full-access`: no sandbox.
    DangerFullAccess,
}

impl SandboxMode {
    /// The wire and log spelling, e.g. `workspace-write`.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::DangerFullAccess => "danger-full-access",
        }
    }

    /// Parses the wire and log spelling; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "read-only" => Some(SandboxMode::ReadOnly),
            "workspace-write" => Some(SandboxMode::WorkspaceWrite),
            "danger-full-access" => Some(SandboxMode::DangerFullAccess),
            _ => None,
        }
    }
}

/// When an agent may ask a human to approve an action. A delegated child only ever gets
/// [`ApprovalPolicy::Never`] (C2).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalPolicy {
    /// `never`: never ask; an action that would need approval is refused.
    Never,
}

impl ApprovalPolicy {
    /// The wire and log spelling, e.g. `never`.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalPolicy::Never => "never",
        }
    }

    /// Parses the wire and log spelling; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "never" => Some(ApprovalPolicy::Never),
            _ => None,
        }
    }
}

/// The policy a child inherits at delegation time (C2). `None` fields leave the child on its
/// defaults.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct DelegatedPolicyOverrides {
    /// The parent's sandbox override, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_mode: Option<SandboxMode>,
    /// `never` whenever the parent has an approval service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_policy: Option<ApprovalPolicy>,
}

/// What the shell reads synchronously off the parent before the first await of a spawn.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct ParentPolicyView {
    /// The parent session's sandbox override, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_override: Option<SandboxMode>,
    /// True when the parent's context has an approval service (a human who could approve).
    pub has_approval_service: bool,
}

/// Snapshots the parent's policy for a child (C2): sandbox mode = the parent's override;
/// approval policy = `never` whenever the parent has an approval service. Synchronous, so the
/// shell calls it before its first await and later parent changes cannot leak in.
pub fn capture_delegated_policy_overrides(parent: &ParentPolicyView) -> DelegatedPolicyOverrides {
    DelegatedPolicyOverrides {
        sandbox_mode: parent.sandbox_override,
        approval_policy: parent.has_approval_service.then_some(ApprovalPolicy::Never),
    }
}

/// The log events that record a snapshot (C3), as `(kind, data)` pairs: `sandbox/mode {mode,
/// source: "delegation"}` then `approval/policy {policy, source: "delegation"}`, each only when
/// the snapshot has that field.
pub fn delegated_policy_events(
    overrides: &DelegatedPolicyOverrides,
) -> Vec<(&'static str, serde_json::Value)> {
    let record = |key: &str, value: &str| {
        let mut data = serde_json::Map::new();
        data.insert(key.to_owned(), serde_json::Value::from(value));
        data.insert(
            "source".to_owned(),
            serde_json::Value::from(DELEGATION_SOURCE),
        );
        serde_json::Value::Object(data)
    };
    let mut events = Vec::new();
    if let Some(mode) = overrides.sandbox_mode {
        events.push((SANDBOX_MODE_EVENT, record("mode", mode.as_str())));
    }
    if let Some(policy) = overrides.approval_policy {
        events.push((APPROVAL_POLICY_EVENT, record("policy", policy.as_str())));
    }
    events
}

/// Appends the snapshot's events to the child's log (C3), all stamped `at_ms`.
pub fn append_delegated_policy_overrides(
    log: &mut SessionLog,
    overrides: &DelegatedPolicyOverrides,
    at_ms: u64,
) {
    for (kind, data) in delegated_policy_events(overrides) {
        log.append(kind, data, at_ms);
    }
}

/// Rebuilds the delegated snapshot from a child's log on resume (C3). Only the child's own
/// events (after the seed) with `source: "delegation"` count; any other `sandbox/mode` or
/// `approval/policy` event, earlier or later, is ignored, so nothing after delegation can widen
/// the child's policy.
///
/// Fails closed with [`CoreError::InvalidLog`] when a delegation event is unreadable (unknown
/// mode or policy) or when two delegation events disagree: dropping such a record could
/// silently widen a child's permissions.
pub fn reapply_delegated_policy(log: &SessionLog) -> Result<DelegatedPolicyOverrides, CoreError> {
    let invalid = |reason: String| CoreError::InvalidLog {
        session: log.session().to_string(),
        reason,
    };
    let mut overrides = DelegatedPolicyOverrides::default();
    for event in log.events_after_seed() {
        if !is_delegation(event) {
            continue;
        }
        if event.kind == SANDBOX_MODE_EVENT {
            let mode = read_field(event, "mode", SandboxMode::parse).map_err(&invalid)?;
            keep_one(&mut overrides.sandbox_mode, mode, event).map_err(&invalid)?;
        } else if event.kind == APPROVAL_POLICY_EVENT {
            let policy = read_field(event, "policy", ApprovalPolicy::parse).map_err(&invalid)?;
            keep_one(&mut overrides.approval_policy, policy, event).map_err(&invalid)?;
        }
    }
    Ok(overrides)
}

/// True for an event whose data says `source: "delegation"`.
fn is_delegation(event: &SessionEvent) -> bool {
    event.data.get("source").and_then(serde_json::Value::as_str) == Some(DELEGATION_SOURCE)
}

/// Reads and parses the string field `key` of a delegation event.
fn read_field<T>(
    event: &SessionEvent,
    key: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<T, String> {
    let raw = event.data.get(key);
    raw.and_then(serde_json::Value::as_str)
        .and_then(parse)
        .ok_or_else(|| {
            let found = raw.map_or_else(|| "nothing".to_owned(), |v| shorten(&v.to_string()));
            format!(
                "delegation event {} ({}) has an unreadable {key}: {found}; the delegated policy cannot be restored",
                event.seq, event.kind
            )
        })
}

/// Records a snapshot field, refusing a second delegation event that disagrees with the first.
fn keep_one<T: PartialEq + Copy>(
    slot: &mut Option<T>,
    value: T,
    event: &SessionEvent,
) -> Result<(), String> {
    match slot {
        Some(existing) if *existing != value => Err(format!(
            "delegation event {} ({}) disagrees with an earlier delegation event; the delegated policy is ambiguous",
            event.seq, event.kind
        )),
        Some(_) => Ok(()),
        None => {
            *slot = Some(value);
            Ok(())
        }
    }
}

/// Keeps error text bounded whatever the log holds.
fn shorten(text: &str) -> String {
    let mut out: String = text.chars().take(80).collect();
    if text.chars().count() > 80 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SessionId;
    use serde_json::json;

    fn child_log() -> SessionLog {
        SessionLog::create(
            SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000002").unwrap(),
            vec![],
        )
    }

    #[test]
    fn c2_approval_policy_is_never_when_parent_has_approval_service() {
        let view = ParentPolicyView {
            sandbox_override: None,
            has_approval_service: true,
        };
        let snap = capture_delegated_policy_overrides(&view);
        assert_eq!(snap.approval_policy, Some(ApprovalPolicy::Never));
        assert_eq!(snap.sandbox_mode, None);
    }

    #[test]
    fn c2_no_approval_service_leaves_approval_unset() {
        let view = ParentPolicyView {
            sandbox_override: Some(SandboxMode::ReadOnly),
            has_approval_service: false,
        };
        let snap = capture_delegated_policy_overrides(&view);
        assert_eq!(
            snap,
            DelegatedPolicyOverrides {
                sandbox_mode: Some(SandboxMode::ReadOnly),
                approval_policy: None,
            }
        );
    }

    #[test]
    fn c2_sandbox_mode_spellings_are_kebab_case() {
        for mode in [
            SandboxMode::ReadOnly,
            SandboxMode::WorkspaceWrite,
            SandboxMode::DangerFullAccess,
        ] {
            let text = serde_json::to_string(&mode).unwrap();
            assert_eq!(text, format!("\"{}\"", mode.as_str()));
            assert_eq!(SandboxMode::parse(mode.as_str()), Some(mode));
            assert_eq!(serde_json::from_str::<SandboxMode>(&text).unwrap(), mode);
        }
        assert_eq!(
            serde_json::to_string(&ApprovalPolicy::Never).unwrap(),
            "\"never\""
        );
        assert_eq!(SandboxMode::parse("full"), None);
        assert_eq!(ApprovalPolicy::parse("on-request"), None);
    }

    #[test]
    fn c3_snapshot_becomes_delegation_events() {
        let snap = DelegatedPolicyOverrides {
            sandbox_mode: Some(SandboxMode::WorkspaceWrite),
            approval_policy: Some(ApprovalPolicy::Never),
        };
        assert_eq!(
            delegated_policy_events(&snap),
            vec![
                (
                    "sandbox/mode",
                    json!({"mode": "workspace-write", "source": "delegation"})
                ),
                (
                    "approval/policy",
                    json!({"policy": "never", "source": "delegation"})
                ),
            ]
        );
        assert!(delegated_policy_events(&DelegatedPolicyOverrides::default()).is_empty());
    }

    #[test]
    fn c3_append_writes_the_events_in_order() {
        let mut log = child_log();
        let snap = DelegatedPolicyOverrides {
            sandbox_mode: Some(SandboxMode::ReadOnly),
            approval_policy: Some(ApprovalPolicy::Never),
        };
        append_delegated_policy_overrides(&mut log, &snap, 7);
        let kinds: Vec<_> = log
            .events()
            .iter()
            .map(|e| (e.seq, e.kind.as_str(), e.at_ms))
            .collect();
        assert_eq!(
            kinds,
            vec![(1, "sandbox/mode", 7), (2, "approval/policy", 7)]
        );
        assert_eq!(
            serde_json::to_string(&log.events()[0].data).unwrap(),
            r#"{"mode":"read-only","source":"delegation"}"#
        );
    }

    #[test]
    fn c3_resume_reapplies_the_snapshot_and_ignores_later_changes() {
        let mut log = child_log();
        let snap = DelegatedPolicyOverrides {
            sandbox_mode: Some(SandboxMode::ReadOnly),
            approval_policy: Some(ApprovalPolicy::Never),
        };
        append_delegated_policy_overrides(&mut log, &snap, 1);
        log.append("turn/user", json!({"text": "go"}), 2);
        log.append(
            "sandbox/mode",
            json!({"mode": "danger-full-access", "source": "user"}),
            3,
        );
        log.append("sandbox/mode", json!({"mode": "danger-full-access"}), 4);
        log.append(
            "approval/policy",
            json!({"policy": "on-request", "source": "parent"}),
            5,
        );
        assert_eq!(reapply_delegated_policy(&log).unwrap(), snap);
    }

    #[test]
    fn c3_resume_ignores_delegation_events_inherited_in_the_seed() {
        let mut parent = child_log();
        append_delegated_policy_overrides(
            &mut parent,
            &DelegatedPolicyOverrides {
                sandbox_mode: Some(SandboxMode::DangerFullAccess),
                approval_policy: None,
            },
            1,
        );
        let seed = parent.into_events();
        let mut log = SessionLog::create(
            SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000003").unwrap(),
            seed,
        );
        assert_eq!(
            reapply_delegated_policy(&log).unwrap(),
            DelegatedPolicyOverrides::default()
        );
        let own = DelegatedPolicyOverrides {
            sandbox_mode: Some(SandboxMode::ReadOnly),
            approval_policy: Some(ApprovalPolicy::Never),
        };
        append_delegated_policy_overrides(&mut log, &own, 2);
        assert_eq!(reapply_delegated_policy(&log).unwrap(), own);
    }

    #[test]
    fn c3_resume_fails_closed_on_unreadable_or_conflicting_delegation_events() {
        let cases = [
            (
                json!({"mode": "everything", "source": "delegation"}),
                "unreadable mode",
            ),
            (
                json!({"mode": 3, "source": "delegation"}),
                "unreadable mode: 3",
            ),
            (json!({"source": "delegation"}), "unreadable mode: nothing"),
        ];
        for (data, expect) in cases {
            let mut log = child_log();
            log.append(SANDBOX_MODE_EVENT, data, 1);
            let err = reapply_delegated_policy(&log).unwrap_err();
            assert!(matches!(err, CoreError::InvalidLog { .. }));
            assert!(err.to_string().contains(expect), "{err}");
        }
        let mut log = child_log();
        log.append(
            APPROVAL_POLICY_EVENT,
            json!({"policy": "ask", "source": "delegation"}),
            1,
        );
        assert!(reapply_delegated_policy(&log).is_err());

        let mut log = child_log();
        log.append(
            SANDBOX_MODE_EVENT,
            json!({"mode": "read-only", "source": "delegation"}),
            1,
        );
        log.append(
            SANDBOX_MODE_EVENT,
            json!({"mode": "read-only", "source": "delegation"}),
            2,
        );
        assert!(
            reapply_delegated_policy(&log).is_ok(),
            "a repeated identical record is harmless"
        );
        log.append(
            SANDBOX_MODE_EVENT,
            json!({"mode": "danger-full-access", "source": "delegation"}),
            3,
        );
        let err = reapply_delegated_policy(&log).unwrap_err().to_string();
        assert!(err.contains("disagrees"), "{err}");
    }
}
