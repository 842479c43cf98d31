//! The `lineage` command line, as a library: the `lineage` binary (`main.rs`) is its `main`,
//! and the lab (`lineage-lab`: benchmarks and the fault harness, not shipped in the image)
//! builds on its flags, its local cluster and its helpers.
//!
//! | module | what |
//! |---|---|
//! | [`run`] | the dispatch: runs the verb the command line names (the top room; only `main` uses it) |
//! | [`cli`] | clap definitions: the command line and its verbs, each `--help` with an example |
//! | [`cmd`] | one module per verb (its clap args and `run`), over `ControlClient` |
//! | [`client`] | what verbs, front door and local cluster share: the NATS connection, `ControlClient`, small helpers |
//! | [`global`] | the global flags (`Global`), the cluster name and subjects (the lowest room) |
//! | [`nats_auth`] | NATS credentials and TLS from flags, `NATS_*` env and natscli contexts |
//! | [`dev`] | `lineage dev`: a local cluster of real processes (`dev/cluster.rs`) and its demo workload (`dev/demo.rs`) |
//! | [`lab`] | `lineage bench` and `lineage chaos`: run the lab program, `lineage-lab` |
//! | [`acp`] | `lineage acp`: the ACP front door (an ACP agent on stdio for an editor) |
//! | [`telemetry`] | logging setup |
//! | [`output`] | human and `--json` output, one-line errors, exit codes |
//! | [`progress`] | live per-wave bars of `lineage drain` on a terminal |

pub mod a2a;
pub mod acp;
pub mod cli;
pub mod client;
pub mod cmd;
pub mod dev;
pub mod global;
pub mod lab;
pub mod nats_auth;
pub mod output;
pub mod progress;
pub mod run;
pub mod telemetry;
