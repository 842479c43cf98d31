//! [`Birth`]: everything a new session is born with, in one value (S1, L1, P1, C1–C3, D4, Q1–Q3).
//!
//! The spawning node parses a spawn (a client's [`crate::control::SpawnRequest`], or the
//! spawn tool of a live parent) once into a `Birth`: the frozen header, the typed descriptor,
//! the agent, the first prompt, the limits and the policy. Its parts are types that cannot hold
//! bad values ([`SessionHeader`], [`MaxDepth`](lineage_core::depth::MaxDepth),
//! [`Timeout`](lineage_core::deadline::Timeout) turned into the header's deadline, ...), so
//! nothing downstream checks them again. The per-node `start` op carries it to the node that
//! hosts the session ([`crate::control::StartRequest`]); that node writes the creation window
//! from it and registers it (`RegisterSession`, whose apply in the registry has the final say).
//! It becomes raw JSON only in the registry's storage.

use lineage_core::descriptor::SubagentDescriptor;
use lineage_core::header::SessionHeader;
use lineage_core::ids::{NodeId, RequestId, RunId};
use lineage_core::limits::BirthLimits;
use lineage_core::policy::{DelegatedPolicyOverrides, ParentPolicyView};
use serde::{Deserialize, Serialize};

use crate::agent::AgentSpec;

/// A new session, as the node that hosts it receives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Birth {
    /// The spawn's idempotency key: the birth is registered under it, so a retried spawn is
    /// answered with its first birth (or refused), never registered twice.
    pub request_id: RequestId,
    /// The frozen header (L1): id, lineage, depth, composition, deadline.
    pub header: SessionHeader,
    /// The agent to run.
    pub agent: AgentSpec,
    /// The first user message (empty: a top-level session starts idle).
    #[serde(default)]
    pub prompt: String,
    /// What the spawning node enforces for the new subtree (D4, Q1, Q3).
    #[serde(default)]
    pub limits: BirthLimits,
    /// A child's or a top-level session's own part.
    pub kind: BirthKind,
    /// The snapshot its files start from (issue 39): a root's upload
    /// (`upload.<request id>`), or the copy of its parent's files the spawning node stored as
    /// the child's base. Checked against those two names where `start` is parsed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<lineage_core::workspace::WorkspaceSnapshot>,
}

/// What only a child, or only a top-level session, is born with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum BirthKind {
    /// A session with no parent.
    TopLevel {
        /// Its own policy view (what its children inherit, C2).
        #[serde(default)]
        policy: ParentPolicyView,
        /// Its idle TTL ([`lineage_core::idle`]): the spawn's, else the spawning node's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idle_ttl_ms: Option<lineage_core::idle::IdleTtl>,
        /// What wakes it into a turn (absent: `every`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wake_on: Option<lineage_core::engine::WakeOn>,
        /// Its editor's MCP servers for its agent (issue 38): carried to the hosting node,
        /// never written to its log.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        mcp_servers: Vec<crate::editor_mcp::PassedMcpServer>,
    },
    /// A child of a live parent.
    Child {
        /// Its descriptor (P1): provider, label, shape, composition (C1).
        descriptor: SubagentDescriptor,
        /// Its first run.
        run: RunId,
        /// The delegated policy snapshot (C2), taken before the spawn's first await.
        #[serde(default)]
        policy: DelegatedPolicyOverrides,
        /// The node of the live parent (the `local` flag of `subagent/start`, the owner).
        parent_node: NodeId,
    },
}

impl Birth {
    /// The child's descriptor; `None` for a top-level session.
    pub fn descriptor(&self) -> Option<&SubagentDescriptor> {
        match &self.kind {
            BirthKind::Child { descriptor, .. } => Some(descriptor),
            BirthKind::TopLevel { .. } => None,
        }
    }

    /// The child's first run; `None` for a top-level session.
    pub fn run(&self) -> Option<&RunId> {
        match &self.kind {
            BirthKind::Child { run, .. } => Some(run),
            BirthKind::TopLevel { .. } => None,
        }
    }

    /// Refuses a birth whose workspace names an object that is not its own: one line.
    pub fn check_workspace(&self) -> Result<(), String> {
        let Some(snapshot) = &self.workspace else {
            return Ok(());
        };
        let session = self.header.id();
        let own = snapshot.object == lineage_core::workspace::upload_object(&self.request_id)
            || snapshot.object == lineage_core::workspace::base_object(session);
        match own {
            true => Ok(()),
            false => Err(format!(
                "start of {session} names workspace object {:?}, which is neither its upload nor its base; a birth starts only from its own files",
                snapshot.object
            )),
        }
    }

    /// Refuses a birth whose kind disagrees with its header (a child with no parent in its
    /// header, or a top-level one with a parent): one line, checked where `start` is parsed.
    pub fn check_kind(&self) -> Result<(), String> {
        match (&self.kind, self.header.parent_session()) {
            (BirthKind::Child { .. }, Some(_)) | (BirthKind::TopLevel { .. }, None) => Ok(()),
            (BirthKind::Child { .. }, None) => Err(format!(
                "start of {} is a child birth but its header names no parent; a child's header names its parent",
                self.header.id()
            )),
            (BirthKind::TopLevel { .. }, Some(parent)) => Err(format!(
                "start of {} is a top-level birth but its header names parent {parent}; send kind child with a descriptor",
                self.header.id()
            )),
        }
    }
}
