//! What an agent's log says about the agent itself: the `host/agent` event ([`AgentRecord`]:
//! what to run on cold resume, and the policy its children inherit) and the event names the
//! host writes.

use lineage_core::policy::ParentPolicyView;
use lineage_drivers::driver::AgentSpec;
use serde::{Deserialize, Serialize};

/// Log event: what to run on cold resume.
pub const AGENT_EVENT: &str = "host/agent";
/// Log event: a message durably accepted.
pub const ACCEPTED_EVENT: &str = "inbox/accepted";

/// Data of a `host/agent` event, written with the creation window. The engine never reads
/// it (it is not a `lineage_core::journal` event): the host reads it to resume the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRecord {
    /// The agent to run.
    pub agent: AgentSpec,
    /// The session's own policy view (what its children inherit).
    #[serde(default)]
    pub policy_view: ParentPolicyView,
    /// A top-level session's idle TTL ([`lineage_core::idle`]), kept here so a cold resume
    /// elsewhere keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_ttl_ms: Option<lineage_core::idle::IdleTtl>,
    /// A top-level session's waking rule (absent: `every`), kept for its cold resumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_on: Option<lineage_core::engine::WakeOn>,
}
