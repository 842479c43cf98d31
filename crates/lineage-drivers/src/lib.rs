//! `lineage-drivers`: how a node runs an agent (H1, T4), below `lineage-host` in the layering.
//!
//! A driver turns one turn's input into actions, or asks for actions during the turn through a
//! [`TurnCtx`]; the host executes them. This crate holds the [`AgentDriver`] trait and its data,
//! the three drivers (the deterministic scripted agent, the Agent Client Protocol driver and the
//! A2A driver of a remote agent), and
//! agent profiles, the node-config decision of what a spec may run. It knows nothing of NATS, the
//! registry or the host; the ACP SDK (`agent-client-protocol`) is a dependency of this crate only.
//!
//! Module map (requirement ids from `shared/spec/requirements.md`):
//!
//! | module | what | ids |
//! |---|---|---|
//! | [`driver`] | the [`AgentDriver`] trait, [`DriverAction`] data, [`TurnCtx`] (actions during a turn), [`DriverFactory`], [`ScriptDrivers`], [`provider_of`] | H1 |
//! | [`script`] | the deterministic scripted driver (the script's data types are `lineage_protocol::script`) | H1 |
//! | [`acp`] | the ACP driver: an Agent Client Protocol agent as a subprocess over stdio (`acp/{start,live,process,text}.rs`) | H1, M4, K1 |
//! | [`a2a`] | the A2A driver: a remote A2A agent (`a2a-client-lf`) as a session's agent, its task kept across a cold resume | A2 |
//! | [`profiles`] | agent profiles: what a node runs, never a command line from the wire | T4 |
//! | [`sandbox`] | per-session sandboxes (bubblewrap: user, pid, mount namespaces) and how a session's processes are recognised ([`sandbox::Confinement`]) | V1, V2 |
//! | [`tools`] | lineage's delegation tools as an MCP server (`rmcp`) bound to one hosted session: each call is an action of its running turn | T1–T3, T5 |
//! | [`git`] | a root's files cloned from a git repository, as the node's operator allows (`agents.git_protocols`) | issue 39 |
//! | [`error`] | [`DriverError`], the crate's one error enum | |

#![deny(missing_docs)]

pub mod a2a;
pub mod acp;
pub mod driver;
pub mod error;
pub mod git;
pub mod profiles;
pub mod sandbox;
pub mod script;
pub mod tools;

pub use driver::{
    provider_of, ActionOutcome, AgentDriver, DriverAction, DriverFactory, DriverStart,
    ScriptDrivers, TurnAction, TurnCtx, TurnInput, ACP_PROVIDER,
};
pub use error::DriverError;
