//! Subject and stream names: the wire contract users script against with `nats sub` (N1). Pure
//! names, no IO: `lineage_bus` re-exports them and opens what they name.
//!
//! | subject | what | kind |
//! |---|---|---|
//! | `lineage.<cluster>.parent.<parent>.start` / `.end` | lifecycle of `<parent>`'s direct children | core NATS |
//! | `lineage.<cluster>.parent.<parent>.inbox` | reports and settlements for `<parent>` | JetStream `LINEAGE_<CLUSTER>_INBOX` |
//! | `lineage.<cluster>.session.<id>.events` | the session's event log | JetStream `LINEAGE_<CLUSTER>_EVENTS` |
//! | `lineage.<cluster>.ctl.<op>` | control ops any node may serve (queue group) | service `lineage` |
//! | `lineage.<cluster>.node.<node>.<op>` | control ops one node must serve | service `lineage` |
//! | `lineage.<cluster>.drain.<drain>.progress` | live progress of one drain that asked for it | core NATS, best effort |
//! | `lineage.<cluster>.raft.<raft_id>.<rpc>` | Raft RPC between registry voters | request/reply |

use lineage_core::ids::{DrainId, NodeId, SessionId};

use crate::error::ProtocolError;

/// Builds every subject of one lineage cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subjects {
    cluster: String,
}

impl Subjects {
    /// Validates the cluster name (a safe subject token: letters, digits, `-`, `_`; at most 32).
    pub fn new(cluster: &str) -> Result<Self, ProtocolError> {
        let refuse = |reason| ProtocolError::InvalidCluster {
            name: cluster.chars().take(80).collect(),
            reason,
        };
        if cluster.is_empty() {
            return Err(refuse("it is empty"));
        }
        if cluster.len() > 32 {
            return Err(refuse("it is longer than 32 characters"));
        }
        if !cluster
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(refuse(
                "it has a character that is not a letter, digit, '-' or '_'",
            ));
        }
        Ok(Subjects {
            cluster: cluster.to_owned(),
        })
    }

    /// The cluster name.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// `lineage.<cluster>.parent.<parent>.start`: `subagent/start` of `<parent>`'s children.
    pub fn parent_start(&self, parent: &SessionId) -> String {
        format!("lineage.{}.parent.{parent}.start", self.cluster)
    }

    /// `lineage.<cluster>.parent.<parent>.end`: `subagent/end` of `<parent>`'s children.
    pub fn parent_end(&self, parent: &SessionId) -> String {
        format!("lineage.{}.parent.{parent}.end", self.cluster)
    }

    /// `lineage.<cluster>.parent.<parent>.inbox`: reports and settlements for `<parent>`.
    pub fn parent_inbox(&self, parent: &SessionId) -> String {
        format!("lineage.{}.parent.{parent}.inbox", self.cluster)
    }

    /// `lineage.<cluster>.parent.*.inbox`: what the inbox stream captures.
    pub fn all_inboxes(&self) -> String {
        format!("lineage.{}.parent.*.inbox", self.cluster)
    }

    /// `lineage.<cluster>.session.<id>.events`: the session's event log.
    pub fn session_events(&self, session: &SessionId) -> String {
        format!("lineage.{}.session.{session}.events", self.cluster)
    }

    /// `lineage.<cluster>.session.*.events`: what the events stream captures.
    pub fn all_session_events(&self) -> String {
        format!("lineage.{}.session.*.events", self.cluster)
    }

    /// Every parent's `start` subject (a wildcard subscription).
    pub fn all_parent_starts(&self) -> String {
        format!("lineage.{}.parent.*.start", self.cluster)
    }

    /// Every parent's `end` subject (a wildcard subscription).
    pub fn all_parent_ends(&self) -> String {
        format!("lineage.{}.parent.*.end", self.cluster)
    }

    /// `lineage.<cluster>.session.<id>.output`: a turn's output as it comes (F1).
    pub fn session_output(&self, session: &SessionId) -> String {
        format!("lineage.{}.session.{session}.output", self.cluster)
    }

    /// Every session's output (a wildcard subscription).
    pub fn all_session_outputs(&self) -> String {
        format!("lineage.{}.session.*.output", self.cluster)
    }

    /// `lineage.<cluster>.session.<id>.approval`: a hosted root's permission request, asked of
    /// the front door that opened it (C4; core NATS request/reply).
    pub fn session_approval(&self, session: &SessionId) -> String {
        format!("lineage.{}.session.{session}.approval", self.cluster)
    }

    /// Every session's approval requests (a wildcard subscription: the front door).
    pub fn all_session_approvals(&self) -> String {
        format!("lineage.{}.session.*.approval", self.cluster)
    }

    /// `lineage.<cluster>.ctl.<op>`: a control op any node may serve.
    pub fn control(&self, op: &str) -> String {
        format!("lineage.{}.ctl.{op}", self.cluster)
    }

    /// `lineage.<cluster>.node.<node>.<op>`: a control op one node must serve.
    pub fn node_control(&self, node: &NodeId, op: &str) -> String {
        format!("lineage.{}.node.{node}.{op}", self.cluster)
    }

    /// `lineage.<cluster>.node.<node>.errors`: where the micro library's own copy of each error
    /// reply of `<node>`'s `lineage` service goes (headers only, empty body; nobody needs to
    /// subscribe): sending it is how `$SRV.STATS` counts the error ([`crate::service`]).
    pub fn node_errors(&self, node: &NodeId) -> String {
        self.node_control(node, "errors")
    }

    /// `lineage.<cluster>.drain.<drain>.progress`: progress of the drain whose request named
    /// `<drain>` (plan, then each wave as it is disposed). Core NATS, best effort: whoever wants
    /// it subscribes before sending the drain request.
    pub fn drain_progress(&self, drain: &DrainId) -> String {
        format!("lineage.{}.drain.{drain}.progress", self.cluster)
    }

    /// `LINEAGE_<CLUSTER>_INBOX`: the JetStream stream of parent inboxes.
    pub fn inbox_stream(&self) -> String {
        format!("LINEAGE_{}_INBOX", self.stream_token())
    }

    /// `LINEAGE_<CLUSTER>_WORKSPACES`: the Object Store bucket of session workspaces (issue 39;
    /// its stream is `OBJ_LINEAGE_<CLUSTER>_WORKSPACES`).
    pub fn workspace_bucket(&self) -> String {
        format!("LINEAGE_{}_WORKSPACES", self.stream_token())
    }

    /// `LINEAGE_<CLUSTER>_A2A_PUSH`: the Key-Value bucket of the A2A gateways' push
    /// notification configs and what each has delivered (issue 38, A1).
    pub fn a2a_push_bucket(&self) -> String {
        format!("LINEAGE_{}_A2A_PUSH", self.stream_token())
    }

    /// `LINEAGE_<CLUSTER>_EVENTS`: the JetStream stream of session event logs.
    pub fn events_stream(&self) -> String {
        format!("LINEAGE_{}_EVENTS", self.stream_token())
    }

    /// The durable consumer name of a parent's inbox.
    pub fn inbox_consumer(&self, parent: &SessionId) -> String {
        format!("inbox-{parent}")
    }

    fn stream_token(&self) -> String {
        self.cluster.to_ascii_uppercase().replace('-', "_")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sid() -> SessionId {
        SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000001").unwrap()
    }

    #[test]
    fn n1_subjects_are_pinned() {
        let s = Subjects::new("dev").unwrap();
        let p = sid();
        assert_eq!(s.parent_start(&p), format!("lineage.dev.parent.{p}.start"));
        assert_eq!(s.parent_end(&p), format!("lineage.dev.parent.{p}.end"));
        assert_eq!(s.parent_inbox(&p), format!("lineage.dev.parent.{p}.inbox"));
        assert_eq!(
            s.session_events(&p),
            format!("lineage.dev.session.{p}.events")
        );
        assert_eq!(s.control("spawn"), "lineage.dev.ctl.spawn");
        let n = NodeId::parse("node-1").unwrap();
        assert_eq!(s.node_control(&n, "start"), "lineage.dev.node.node-1.start");
        let d = DrainId::parse("01936c1e-7a3b-7cde-8f00-0000000000d1").unwrap();
        assert_eq!(
            s.drain_progress(&d),
            "lineage.dev.drain.01936c1e-7a3b-7cde-8f00-0000000000d1.progress"
        );
        assert_eq!(s.inbox_stream(), "LINEAGE_DEV_INBOX");
        assert_eq!(s.workspace_bucket(), "LINEAGE_DEV_WORKSPACES");
        assert_eq!(
            Subjects::new("my-c").unwrap().events_stream(),
            "LINEAGE_MY_C_EVENTS"
        );
    }

    #[test]
    fn n1_cluster_names_must_be_subject_tokens() {
        for bad in ["", "a.b", "a*", "a>", "a b", &"x".repeat(33)] {
            let err = Subjects::new(bad).unwrap_err().to_string();
            assert!(err.starts_with("invalid cluster name"), "{err}");
        }
    }
}
