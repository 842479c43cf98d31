//! `lineage-registry`: the durable record of who descends from whom (G1–G3).
//!
//! An openraft group of 1, 3 or 5 voters; each member stores its log and vote in a write-ahead
//! log, its identity in a redb file and its last snapshot in a file, and talks Raft over NATS
//! request/reply. The state machine enforces the lineage
//! rules at apply time, so no node can bypass them. Any process reaches it through a
//! [`RegistryClient`] built from a NATS connection and a cluster name.
//!
//! Module map:
//!
//! | module | what | ids |
//! |---|---|---|
//! | [`types`] | `SessionRecord`, `NodeRecord`, `Command`, `CommandResponse`, `RegistryRefusal` | G1 |
//! | [`state`] | [`RegistryState`]: the pure `apply(&Command) -> CommandResponse` and queries | G2, D3, L2, X1, K1, I1 |
//! | [`listing`] | list and search: derived indexes, filters, cursors, pages | Q4 |
//! | [`storage`] | the log store (a write-ahead log) and state machine (openraft 0.10's storage traits); identity in redb | G3 |
//! | [`stored_descriptor`] | a record's descriptor as its compact JSON text (not a parsed tree: memory per session) | P1, Q5 |
//! | [`snapshot_file`] | the last snapshot in its own file (tmp, fsync, rename), not in redb | G3 |
//! | [`snapshot_policy`] | when a member builds a snapshot: after commands in proportion to the state | G3 |
//! | [`store_stats`] | what the store spent: load at open, snapshot builds and installs, sizes | G3 |
//! | [`raft_types`] | the openraft type configuration | G1 |
//! | [`subjects`] | NATS subject names | N3 |
//! | [`wire`] | request/reply payloads between clients, voters and Raft peers | N3 |
//! | [`network`] | Raft RPCs over NATS (openraft's network v2: append, vote, pre-vote, full snapshots in chunks, leader transfer), or over the voters' direct links ([`network::direct`]: token handshake, optional mutual TLS) | G1, Z1 |
//! | [`check_quorum`] | a leader without a quorum's acknowledgement stands aside, so a slow leader does not stall the registry | G1, Z3 |
//! | [`node`] | [`RegistryNode`]: start, bootstrap once, membership, shutdown | G1, G3 |
//! | [`leader_transfer`] | a leader hands leadership to an up-to-date voter before it stops | G4 |
//! | `service` (+ `service/write_many.rs`) | the read endpoints of the `lineage-registry` micro service; answering writes (one command, or an array of them) and reads | G1, O3 |
//! | `write_batch` | group commit: a member's queued commands proposed as one entry; snapshot triggers | G1, Q5 |
//! | [`client`] | [`RegistryClient`]: typed writes with retries, linearizable or stale reads | G1, R3 |
//! | `hedge` | a read sends another copy while none has answered (a stopped member holds its queue subscription) | G3, N3 |
//! | [`error`] | [`RegistryError`], the crate's one error enum | |
//! | [`identity`] | the writer's identity: a node heartbeats and claims only as itself | Z2 |
//! | [`bench`](mod@bench) | the register-child benchmark's method (cargo bench and `lineage bench registry`) | G1 |

#![deny(missing_docs)]

pub mod bench;
pub mod check_quorum;
pub mod client;
pub mod error;
mod hedge;
pub mod identity;
pub mod leader_transfer;
pub mod listing;
pub mod network;
pub mod node;
pub mod raft_types;
mod service;
pub mod snapshot_file;
pub mod snapshot_policy;
pub mod state;
pub mod storage;
pub mod store_stats;
pub mod stored_descriptor;
pub mod subjects;
pub mod types;
pub mod wire;
mod write_batch;

pub use client::{Consistency, RegistryClient};
pub use error::RegistryError;
pub use network::{DirectRaft, LinkTls, RaftToken};
pub use node::{RegistryNode, RegistryNodeConfig};
pub use state::RegistryState;
pub use stored_descriptor::StoredDescriptor;
pub use types::{
    Admission, ChildSummary, Command, CommandResponse, NodeRecord, Placement, RegistryRefusal,
    SessionRecord, SessionState,
};
