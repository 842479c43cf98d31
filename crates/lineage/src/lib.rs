//! The `lineage` command line, as a library: the `lineage` binary (`main.rs`) is its `main`,
//! and the lab (`lineage-lab`: benchmarks and the fault harness, not shipped in the image)
//! builds on its flags, its local cluster and its helpers.
//!
//! | module | what |
//! |---|---|
//! | [`cli`] | clap definitions: global flags and verbs, each `--help` with an example |
//! | [`cmd`] | one module per verb (its clap args and `run`), over `ControlClient`; dispatch and shared helpers |
//! | [`nats_auth`] | NATS credentials and TLS from flags, `NATS_*` env and natscli contexts |
//! | [`dev`] | `lineage dev`: a local cluster of real processes |
//! | [`demo`] | the demo workload `lineage dev` runs |
//! | [`lab`] | `lineage bench` and `lineage chaos`: run the lab program, `lineage-lab` |
//! | [`acp`] | `lineage acp`: the ACP front door (an ACP agent on stdio for an editor) |
//! | [`telemetry`] | logging setup |
//! | [`output`] | human and `--json` output, one-line errors, exit codes |
//! | [`progress`] | live per-wave bars of `lineage drain` on a terminal |

pub mod acp;
pub mod cli;
pub mod cmd;
pub mod demo;
pub mod dev;
pub mod lab;
pub mod nats_auth;
pub mod output;
pub mod progress;
pub mod telemetry;
