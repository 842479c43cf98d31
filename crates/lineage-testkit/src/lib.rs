//! Test helpers for lineage, shared by every suite: real processes, never stand-ins.
//!
//! Module map:
//! - [`nats`]: [`NatsServer`], a real `nats-server` on a free loopback port, JetStream on
//!   (`sync_interval: always`, Z3), store in a temp dir, killed by pid when dropped; optional
//!   extra config ([`NatsOptions`]); [`free_port`], [`nats_server_binary`], [`http_get`].
//! - [`nats_cluster`]: [`NatsCluster`], three of those routed into one JetStream cluster (Z3
//!   fault tests: SIGKILL one, restart it).
//! - [`wait`]: [`wait_for`] and its async twin [`wait_for_async`], the one way a test waits
//!   (what was awaited, how long, the last observation); [`poll`] without the panic.
//! - [`binary`]: [`lineage_bin`], the `lineage` binary under test (`$LINEAGE_BIN`, else next to
//!   the test executable; missing or stale panics with what to run), and [`lab_bin`], the lab
//!   beside it (`lineage bench`, `lineage chaos`).
//! - [`node`]: [`NodeProc`], one `lineage node` process, and its config text.
//! - [`cluster`]: [`Cluster`], a nats-server (or [`NatsCluster`]) and N node processes, plain
//!   or secured with the shipped NATS users; [`cli`]: the CLI against it (and
//!   [`cli::lineage_chaos`], a `lineage chaos` run and its report); [`bus`]: the test's
//!   own NATS connection (session logs from JetStream, raw control requests).
//! - [`shipped`]: the shipped `config/nats-server.conf` (users, passwords, a server started
//!   from it); [`user_conn`]: a connection as one of its users that records permission errors.
//! - [`script`]: [`Script`], a builder of the script driver's JSON.
//! - [`seeded`]: [`seeded::Rng`] and [`seeded::from_env`], repeatable runs of the fault and fuzz
//!   suites (a seed from the environment).
//! - [`toxiproxy`]: [`toxiproxy::Toxiproxy`], a real TCP fault proxy between a node and NATS
//!   (latency, blackhole, reset, cut).
//! - [`tls`]: [`tls::make_ca`], a test CA with a server and a client certificate (openssl).
//! - [`prelude`]: what an end-to-end suite imports (`use lineage_testkit::prelude::*`).

#![deny(missing_docs)]

pub mod binary;
pub mod bus;
pub mod cli;
pub mod cluster;
pub mod jaeger;
pub mod nats;
pub mod nats_cluster;
pub mod node;
pub mod script;
pub mod seeded;
pub mod shipped;
pub mod tls;
pub mod toxiproxy;
pub mod user_conn;
pub mod wait;

pub use binary::{delegator_profiles, lab_bin, lineage_bin, workspace_root};
pub use cluster::Cluster;
pub use nats::{
    free_port, greeting, http, http_get, http_within, nats_server_binary, NatsOptions, NatsServer,
};
pub use nats_cluster::NatsCluster;
pub use node::NodeProc;
pub use script::Script;
pub use wait::{poll, poll_async, wait_for, wait_for_async, Probe};

/// What an end-to-end suite imports: the cluster fixture, the CLI and bus helpers, the log
/// helpers, the script builders and [`wait_for`].
pub mod prelude {
    pub use crate::bus::{accepted, of_kind, render_log, turns_consuming, Bus, Event};
    pub use crate::cli::id_of;
    pub use crate::cluster::{Cluster, ClusterOptions, Nats, Secured, TEST_ADMIN};
    pub use crate::node::{nats_user_env, write_password_file, NodeProc};
    pub use crate::script::{agent, spawn_step, Script};
    pub use crate::{lineage_bin, wait_for, NatsCluster, NatsOptions, NatsServer};
}
