//! `lineage-host`: everything a node does to host agents (H1, H2), as a library that the node
//! process (`lineage-node`) assembles.
//!
//! Build a [`Host`] with [`Host::start`] (node id, cluster subjects, NATS client, a
//! [`RegistryPort`], a [`Clock`], a [`DriverFactory`], a shutdown token), then serve it on NATS
//! with [`service::serve`]. The node process owns config, tracing and process shutdown.
//!
//! Module map (requirement ids from `shared/spec/requirements.md`):
//!
//! | module | what | ids |
//! |---|---|---|
//! | (drivers) | the driver trait, the script and ACP drivers and agent profiles are `lineage_drivers`; [`DriverFactory`] and [`ScriptDrivers`] are re-exported for [`HostDeps`] | H1, T4 |
//! | [`registry`] | [`RegistryPort`], the narrow registry trait; [`MemoryRegistry`]; the `RegistryClient` impl | G1, K1, R3 |
//! | [`clock`] | injected time ([`Clock`]) and id minting | |
//! | `config` | [`HostConfig`] and [`HostDeps`] (re-exported by [`host`]) | |
//! | [`host`] | [`Host`]: live agents of one node, node lease; [`HostConfig`], [`HostDeps`] | R1–R3 |
//! | `shared` | `Shared`: the host's state in named parts (config, bus ports, registry, live agents, lifetime, lease), and its registry writes | |
//! | `lease` | `LeaseMarks`: the node lease as this node last saw it | K1, R1 |
//! | `live` | `Live`: the live agents, births and resumes under way, local ancestry | R3, M4 |
//! | `lifetime` | `Lifetime`: background tasks, shutdown, graceful wind-down and hand-off | K1, X1 |
//! | `agent` | one live agent: a task executing `lineage_core::engine` commands; turns beside the mailbox | X2, M3 |
//! | [`spawn`] | birth: depth, policy snapshot, header, register, creation window, start event | S1–S3, D2–D4, L1, C1–C3, P1, E1 |
//! | [`start`] | the hosting node's half of a birth: creation window, confirm, launch | S1, P1, C1, C3, E1 |
//! | [`settle`] | settlement: commit, end event, notice to the parent inbox | X2, M2, E1 |
//! | [`report`] | reports and the durable inbox consumer | M1, N2 |
//! | [`followup`] | next user message, cold-resuming first | M3 |
//! | [`interrupt`] | authority-checked turn cancellation | M4, R3 |
//! | `routing` | node liveness, forward-once routing, the control transport, agent admission | R2, T4, N3 |
//! | [`resume`] | cold resume by CAS on the placement epoch | K1, R2, L3 |
//! | [`births`] | the birth sweeper: dispose births no node started in time, tell the parent | S1, M2 |
//! | [`budgets`] | the budget sweeper: drain subtrees whose budget is spent, stop reason `budget` | Q3 |
//! | [`deadlines`] | the deadline sweeper: drain subtrees past their deadline, stop reason `deadline` | Q2 |
//! | `idle` | the idle sweep: drain this node's roots idle past their idle TTL, stop reason `idle` | Q2 |
//! | [`retention`] | the retention sweeper: purge disposed sessions past `retention.disposed_after_ms` (record, log, inbox, workspace objects) | Q5 |
//! | `sweeps` | the background loops: lease heartbeat, and the birth, deadline/budget/retention and takeover sweeps on their periods | S1, Q2, Q3, Q5, K1 |
//! | [`fence`] | after a lease lapse, stop the agents whose sessions moved to another node | K1, R1 |
//! | [`outbox`] | an adopted node's outboxes (reports, settlement notices) sent again from the logs | M1, M2 |
//! | [`readopt`] | at start-up, take back the sessions placed here; close cut-short turns | K1, X2, R1 |
//! | [`handoff`] | graceful shutdown: quiesce, let running turns finish within the grace, release idle sessions | K1, X1 |
//! | [`drain`] | close admission, stop, dispose leaves first; live progress | X1, H2, N3 |
//! | `remote_ends` | a drained cold session's remote side told it ended (an A2A child's task cancelled) | A2 |
//! | [`control`] | request/reply bodies of the `lineage` service: a re-export of `lineage_protocol::control` (and `Hop`) | N3 |
//! | [`service`] | the `lineage` control service on the host's control transport (on NATS the `lineage` micro service); dispatches each op by its hop (`Lineage-Forwarded`) | N3, O3 |
//! | `workspace` | a session's files: an upload or a parent's copy as its base, materialized at each launch, checkpointed at each turn's end (issue 39) | C1, K1 |
//! | `timed_registry` | the registry port with every write timed (`lineage_registry_write_duration_seconds`) | O2 |
//! | [`telemetry`] | operation spans with W3C trace context; [`HostMetrics`] counters | O2 |
//! | [`error`] | [`HostError`], the crate's one error enum | |

#![deny(missing_docs)]

mod agent;
pub mod births;
pub mod budgets;
pub mod clock;
mod config;
pub mod control;
pub mod deadlines;
pub mod drain;
pub mod error;
pub mod fence;
pub mod followup;
pub mod handoff;
pub mod host;
mod idle;
pub mod interrupt;
mod lease;
mod lifetime;
mod live;
pub mod outbox;
pub mod readopt;
pub mod registry;
mod remote_ends;
pub mod report;
pub mod resume;
pub mod retention;
mod routing;
pub mod service;
pub mod settle;
mod shared;
pub mod spawn;
pub mod start;
mod sweeps;
pub mod telemetry;
mod timed_registry;
mod workspace;

pub use agent::{AgentRecord, AGENT_EVENT};
pub use clock::{Clock, IdMint, ManualClock, SystemClock};
pub use error::HostError;
pub use host::{DriverFactory, Host, HostConfig, HostDeps, ScriptDrivers};
pub use registry::{MemoryRegistry, RegistryPort};
pub use telemetry::{HostMetrics, HostMetricsSnapshot, LatencyHistogram, LATENCY_BOUNDS_MS};
