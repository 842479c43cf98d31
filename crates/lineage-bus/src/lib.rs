//! `lineage-bus`: everything lineage puts on NATS.
//!
//! Module map:
//!
//! | module | what | ids |
//! |---|---|---|
//! | [`connect`] | connecting with credentials and TLS; secrets redacted | Z1 |
//! | [`subjects`] | the subject and stream names (the wire contract; defined in `lineage_protocol::subjects`, re-exported) | N1 |
//! | [`inbox`] | the parent inbox: JetStream, deduplicated, acked after durable acceptance | M1, M2, N2 |
//! | [`events`] | the session event log: one JetStream subject per session; a turn's end compacts a log spread over many messages (`events/compaction.rs`) | L3, P1, K1 |
//! | [`lifecycle`] | `subagent/start` and `subagent/end` on core NATS | E1, E2 |
//! | [`output`] | a turn's output as it comes, on core NATS (`session.<id>.output`) | F1 |
//! | [`workspace`] | [`workspace::NatsWorkspaces`]: session workspace snapshots in JetStream's Object Store (bucket `LINEAGE_<CLUSTER>_WORKSPACES`, opened on first use; not yet used by a node) | issue 39 |
//! | [`streams`] | [`StreamOptions`]: replicas of the two streams, checked and reconciled on open | Z3 |
//! | [`ports`] | the narrow traits the host uses: [`ports::EventLog`], [`ports::Inbox`], [`ports::Lifecycle`], [`ports::ControlTransport`], [`ports::TurnOutputs`], [`ports::WorkspaceStore`] | issue 10, 39 |
//! | [`memory`] | in-memory twins of the ports (same semantics, no nats-server); feature `twins` | issue 10 |
//! | [`conformance`] | one suite both the NATS ports and the twins pass; feature `twins` | issue 10 |
//! | [`local_server`] | [`local_server::NatsServer`]: a local `nats-server` process (`lineage dev`, the suites) | |
//! | [`control`] | the control request helper over NATS; envelope and codes re-exported from `lineage_protocol` | N3 |
//! | [`transport`] | [`transport::NatsControl`]: the control transport on NATS (the `lineage` micro service, node-to-node requests, drain progress) | N3, R2 |
//! | [`service`] | replies of the micro services: error replies with `Nats-Service-Error(-Code)` headers and their JSON body, counted in `$SRV.STATS` | O3, N3 |
//! | [`client`] | [`ControlClient`]: one typed method per control op, node-wide or per node | N3, O3 |
//! | [`trace`] | W3C `traceparent`: format, strict parse, the task-local current context | O2 |
//! | [`error`] | [`BusError`], the crate's one error enum | |
//!
//! Payloads are the versioned JSON types of `lineage_core::messages`; this crate adds subjects,
//! headers (`Nats-Msg-Id`, `traceparent`) and JetStream plumbing, and decides nothing.

#![deny(missing_docs)]

pub mod client;
#[cfg(feature = "twins")]
pub mod conformance;
pub mod connect;
pub mod control;
mod direct;
pub mod error;
pub mod events;
pub mod inbox;
pub mod lifecycle;
pub mod local_server;
#[cfg(feature = "twins")]
pub mod memory;
pub mod output;
pub mod ports;
pub mod service;
pub mod streams;
pub use lineage_protocol::subjects;
pub mod trace;
pub mod transport;
pub mod workspace;

pub use client::ControlClient;
pub use error::BusError;
pub use ports::{
    BusPorts, ControlTransport, EventLog, Inbox, Lifecycle, TurnOutputs, WorkspaceStore,
};
pub use streams::StreamOptions;
pub use subjects::Subjects;

pub use connect::{connect, connect_with, redact_url, NatsAuth, NatsConnect, NatsTls};
