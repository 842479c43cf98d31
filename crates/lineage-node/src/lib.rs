//! `lineage-node`: assembles one `lineage` process.
//!
//! | module | what | ids |
//! |---|---|---|
//! | [`config`] | figment config: defaults, TOML, `LINEAGE_` env, flags; validation | O1, D4 |
//! | [`node`] | [`node::run`]: NATS, registry member or client, host and service, probes | G1, H1, O2 |
//! | [`drivers`] | the drivers this node runs: script and ACP | H1 |
//! | [`warm`] | sandboxes made ahead for sandboxed profiles' spawns | V2 |
//! | [`http`] | `/metrics`, `/healthz`, `/readyz` | O2 |
//! | [`metrics`] | the Prometheus text of `/metrics` | O2 |
//! | [`otlp`] | trace export over OTLP (http/protobuf, gRPC, TLS) on the OpenTelemetry SDK, from `OTEL_*` | O2, U2 |
//! | [`process`] | the process's CPU, memory and descriptors from `/proc/self` (`process_*`) | O2 |
//! | [`raft_noise`] | openraft's expected RPC timeouts and unreachable members counted, not logged as errors | O2 |
//! | [`error`] | [`NodeError`] | |

#![deny(missing_docs)]

pub mod config;
pub mod drivers;
pub mod error;
pub mod http;
pub mod metrics;
pub mod node;
pub mod otlp;
pub mod process;
pub mod raft_noise;
pub mod warm;

pub use error::NodeError;
