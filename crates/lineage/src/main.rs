//! The `lineage` command line.
//!
//! | module | what |
//! |---|---|
//! | [`cli`] | clap definitions: global flags and verbs, each `--help` with an example |
//! | [`cmd`] | one module per verb (its clap args and `run`), over `ControlClient`; dispatch and shared helpers |
//! | [`nats_auth`] | NATS credentials and TLS from flags, `NATS_*` env and natscli contexts |
//! | [`dev`] | `lineage dev`: a local cluster of real processes |
//! | [`demo`] | the demo workload `lineage dev` runs |
//! | [`bench`] | `lineage bench`: statistics, baseline, workers |
//! | [`scenarios`] | the benchmark scenarios |
//! | [`telemetry`] | logging setup |
//! | [`output`] | human and `--json` output, one-line errors, exit codes |
//! | [`progress`] | live per-wave bars of `lineage drain` on a terminal |

mod acp;
mod bench;
mod cli;
mod cmd;
mod demo;
mod dev;
mod nats_auth;
mod output;
mod progress;
mod scenarios;
mod telemetry;

use clap::{CommandFactory, FromArgMatches};

fn main() {
    let matches = cli::Cli::command().get_matches();
    let mut cli = cli::Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    cli.global.from_env = cli::flags_from_env(&matches);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = runtime.block_on(cmd::run(cli));
    std::process::exit(code);
}
