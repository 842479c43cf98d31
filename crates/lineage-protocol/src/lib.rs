//! `lineage-protocol`: what both ends of the lineage wire agree on (N3, O3), with no IO.
//!
//! A client (the `lineage` CLI, `lineage bench`, a test, another program) and every node read
//! and write these types and subject names; the NATS side (the request helper, the typed
//! `ControlClient`) is `lineage_bus`, and the node's handlers are `lineage_host`. Dependencies:
//! `lineage-core`, `serde`, `serde_json`, `schemars`, `thiserror`.
//!
//! | module | what | ids |
//! |---|---|---|
//! | [`envelope`] | reply envelope, error codes (and their exit codes), the `Lineage-Forwarded` routing header, request decoding | N3 |
//! | [`birth`] | [`Birth`]: a new session in one value, parsed once at the edge, carried by `start` | S1, L1, P1, C1–C3, D4, Q1–Q3 |
//! | [`control`] | request and reply bodies of every control op; op names | N3, M3, M4, K1, X1, T4 |
//! | [`agent`] | [`AgentSpec`] (what a session runs) and the profiles a node offers | P1, T4 |
//! | [`script`] | the scripted agent's language: [`Script`], [`Step`], [`AfterScript`]; its JSON Schema | H1 |
//! | [`subjects`] | every subject and stream name of a cluster (`Subjects`): the wire contract `nats sub` scripts against | N1 |
//! | [`schema`] | the JSON Schemas of every op's request and reply (endpoint metadata) | N3, O3 |
//! | [`sandbox`] | the launch line a node writes to its warm sandbox's `lineage-sandbox-exec` | V2 |
//! | [`tools`] | the tools socket's contract between a hosting node and `lineage mcp` | T1, T5 |
//! | [`approval`] | a hosted root's permission request asked through the front door, and the answer | C2, C4 |
//! | [`editor_mcp`] | an editor's HTTP MCP servers passed on to its ACP session's root agent | issue 38 |
//! | [`workspace`] | [`workspace::SpawnWorkspace`]: the files a spawn gives a new session | C1, issue 39 |
//! | [`error`] | [`ProtocolError`], the crate's one error enum | |
//!
//! Wire JSON is pinned by golden tests (`tests/golden.rs`): a change to any body's bytes fails
//! them.

#![deny(missing_docs)]

pub mod agent;
pub mod approval;
pub mod birth;
pub mod control;
pub mod editor_mcp;
pub mod envelope;
pub mod error;
pub mod sandbox;
pub mod schema;
pub mod script;
pub mod subjects;
pub mod tools;
pub mod workspace;

pub use agent::{AgentSpec, ProfileDriver, ProfileInfo};
pub use birth::{Birth, BirthKind};
pub use envelope::{ControlError, ErrorCode, Hop, Reply, FORWARDED_HEADER};
pub use error::ProtocolError;
pub use script::{AfterScript, Script, Step, SCRIPT_PROVIDER};
