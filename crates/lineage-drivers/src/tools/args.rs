//! The delegation tools' arguments, as the MCP schema shows them to an agent: one struct per
//! tool ([`SpawnSubagent`], [`ReportToParent`], [`SendToChild`], [`InterruptChild`],
//! [`ListChildren`], [`WaitForChildren`], [`ApplyChildChanges`]) and the tools' spellings of shapes, deliveries and wait
//! modes.

use schemars::JsonSchema;
use serde::Deserialize;

/// How a child lives: the tools' spelling of
/// [`SubagentShape`](lineage_core::descriptor::SubagentShape).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum Shape {
    /// Runs one task; the call returns its result once it settled.
    #[serde(rename = "one-shot")]
    OneShot,
    /// Stays: the call returns its id at once; its reports and settlement arrive in your inbox
    /// (`wait_for_children`), and `send_to_child` gives it more work.
    #[serde(rename = "continuable")]
    Continuable,
}

/// `spawn_subagent`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpawnSubagent {
    /// The agent profile the child runs: one the hosting node offers (`lineage agents`).
    pub profile: String,
    /// The child's first message: its task, self-contained.
    pub prompt: String,
    /// `one-shot` (wait for its result) or `continuable` (its id now, its results later).
    pub shape: Shape,
    /// A short name for the child, shown in trees and lists.
    #[serde(default)]
    pub label: Option<String>,
    /// A persona for the child's prompt.
    #[serde(default)]
    pub persona: Option<String>,
    /// The tools the child may use (names); all of its profile's when absent.
    #[serde(default)]
    pub tool_filter: Option<Vec<String>>,
    /// The node to run it on; any node when absent.
    #[serde(default)]
    pub node: Option<String>,
    /// How long the child (and everything it spawns) may run, in ms; it is stopped at that
    /// deadline, and never outlives yours (1 ms to 30 days).
    #[serde(default)]
    pub timeout_ms: Option<lineage_core::deadline::Timeout>,
    /// The files the child starts in: `inherit` (a copy of yours as they are now; the default
    /// when you have a workspace) or `empty`. Its changes come back as a patch you apply.
    #[serde(default)]
    pub workspace: Option<WorkspaceChoice>,
}

/// The files a child starts in: the tools' spelling of
/// [`SpawnWorkspace`](lineage_protocol::workspace::SpawnWorkspace)'s child choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceChoice {
    /// A copy of the parent's files as they are at the spawn.
    Inherit,
    /// An empty working directory.
    Empty,
}

/// `apply_child_changes`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyChildChanges {
    /// The child whose changes to apply (its id, as spawn_subagent or list_children gave it).
    pub child: String,
}

/// `report_to_parent`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportToParent {
    /// What to tell the parent.
    pub content: String,
    /// `quiet` (read at the parent's next turn) or `wakeup` (starts a turn of the parent).
    #[serde(default)]
    pub delivery: ReportDelivery,
}

/// How a report reaches the parent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReportDelivery {
    /// Read at the parent's next turn.
    #[default]
    Quiet,
    /// Starts a turn of the parent.
    Wakeup,
}

/// `send_to_child`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendToChild {
    /// The child's session id (from `spawn_subagent` or `list_children`).
    pub child: String,
    /// The message: more work, or an answer.
    pub content: String,
}

/// `interrupt_child`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InterruptChild {
    /// The session id of a child (or deeper descendant) whose current turn to cancel.
    pub child: String,
}

/// `list_children` takes no arguments.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListChildren {}

/// `wait_for_children`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitForChildren {
    /// The children to wait for; every continuable child that has not settled when absent.
    #[serde(default)]
    pub children: Option<Vec<String>>,
    /// `all` (every child waited for settled) or `any` (the first report or settlement).
    #[serde(default)]
    pub mode: WaitFor,
    /// How long to wait at most, in milliseconds (default 60000); what arrived by then is the
    /// result.
    #[serde(default = "default_wait_ms")]
    pub timeout_ms: u64,
}

fn default_wait_ms() -> u64 {
    60_000
}

/// What `wait_for_children` waits for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WaitFor {
    /// Every child waited for settled.
    #[default]
    All,
    /// The first report or settlement.
    Any,
}
