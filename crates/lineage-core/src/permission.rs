//! How a hosted agent's permission request is answered (C2, C4, seed §6.2): pure rules the
//! drivers execute.
//!
//! A delegated child's approval policy is `never`: it never reaches a person. What it may do
//! without asking is its policy's harness mode ([`mode_key`] names the profile's mode for it);
//! what it asks is answered by [`decide`]: a call to one of lineage's own tools that its tool
//! filter allows is allowed, anything else is refused. A top-level session with an approval
//! service (opened through an editor) asks that person instead of refusing.

use crate::policy::SandboxMode;

/// What the driver does with one permission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionDecision {
    /// Allow it once: a call to one of lineage's own tools the session may use.
    Allow,
    /// Ask the person behind the session's editor; no answer is a refusal.
    AskPerson,
    /// Refuse it: the model reads that it was refused and goes on.
    Refuse,
}

/// The decision for a request: `own_tool` when it is a call to one of lineage's own tools that
/// the session's filter allows, `asks_person` when the session has an approval service (a
/// root opened through an editor; never a delegated child).
pub fn decide(own_tool: bool, asks_person: bool) -> PermissionDecision {
    match (own_tool, asks_person) {
        (true, _) => PermissionDecision::Allow,
        (false, true) => PermissionDecision::AskPerson,
        (false, false) => PermissionDecision::Refuse,
    }
}

/// The key of a profile's `modes` table for a session's policy: its sandbox mode's spelling,
/// else `delegated` for a child, else `root`.
pub fn mode_key(sandbox: Option<SandboxMode>, delegated: bool) -> &'static str {
    match (sandbox, delegated) {
        (Some(mode), _) => mode.as_str(),
        (None, true) => "delegated",
        (None, false) => "root",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c2_c4_own_tools_are_allowed_a_child_never_asks_a_root_asks_its_person() {
        assert_eq!(decide(true, false), PermissionDecision::Allow);
        assert_eq!(decide(true, true), PermissionDecision::Allow);
        assert_eq!(decide(false, true), PermissionDecision::AskPerson);
        assert_eq!(decide(false, false), PermissionDecision::Refuse);
    }

    #[test]
    fn c4_the_mode_key_is_the_sandbox_mode_else_the_sessions_place() {
        assert_eq!(mode_key(Some(SandboxMode::ReadOnly), true), "read-only");
        assert_eq!(
            mode_key(Some(SandboxMode::WorkspaceWrite), false),
            "workspace-write"
        );
        assert_eq!(mode_key(None, true), "delegated");
        assert_eq!(mode_key(None, false), "root");
    }
}
