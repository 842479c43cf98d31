//! `lineage-node`: assembles one `lineage` process.
//!
//! | module | what | ids |
//! |---|---|---|
//! | [`config`] | figment config: defaults, TOML, `LINEAGE_` env, flags; validation | O1, D4 |
//! | [`node`] | [`node::run`]: NATS, registry member or client, host and service, probes | G1, H1, O2 |
//! | [`drivers`] | the drivers this node runs: script and ACP | H1 |
//! | [`http`] | `/metrics`, `/healthz`, `/readyz` | O2 |
//! | [`error`] | [`NodeError`] | |

#![deny(missing_docs)]

pub mod config;
pub mod drivers;
pub mod error;
pub mod http;
pub mod node;

pub use error::NodeError;
