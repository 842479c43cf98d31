//! The `lineage` binary: parses the command line and runs the verb (the verbs live in the
//! `lineage` library, `lib.rs`).

use clap::{CommandFactory, FromArgMatches};
use lineage::cli;

/// The global allocator: mimalloc, which hands freed pages back to the system and keeps a
/// registry member's heap close to what its state holds (issue 13; glibc's malloc kept the
/// holes a decode and the idempotency table's churn leave). Off with
/// `--no-default-features` (the system allocator).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let matches = cli::Cli::command().get_matches();
    let mut cli = cli::Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    cli.global.from_env = cli::flags_from_env(&matches);
    quiet_on_closed_pipe(&cli.verb);
    if let cli::Verb::Bench { .. } | cli::Verb::Chaos { .. } = cli.verb {
        // The lab is a program of its own; it takes this command line as is.
        std::process::exit(lineage::lab::forward());
    }
    lineage::run::exit_with(lineage::run::run(cli));
}

/// A verb that only prints ends quietly when its reader goes away (`lineage ls --all | head`),
/// as Unix tools do: SIGPIPE goes back to its default for it. The Rust runtime ignores SIGPIPE,
/// so `println!` would panic on the closed pipe. The long-running verbs (`node`, `dev`, `acp`,
/// `mcp`, `bench`) keep ignoring it: a write to a dead agent's pipe or socket must be an error
/// they handle, not the end of the process.
fn quiet_on_closed_pipe(verb: &cli::Verb) {
    use cli::Verb;
    let long_running = match verb {
        Verb::Node { .. }
        | Verb::Dev { .. }
        | Verb::Acp(_)
        | Verb::A2a(_)
        | Verb::Ui(_)
        | Verb::Mcp
        | Verb::Bench { .. }
        | Verb::Chaos { .. } => true,
        Verb::Spawn(_)
        | Verb::Send(_)
        | Verb::Interrupt(_)
        | Verb::Tree(_)
        | Verb::Show(_)
        | Verb::Logs(_)
        | Verb::Ls(_)
        | Verb::Drain(_)
        | Verb::Watch(_)
        | Verb::Agents
        | Verb::Status
        | Verb::Workspace(_)
        | Verb::Config(_)
        | Verb::Script(_)
        | Verb::Docs(_) => false,
    };
    #[cfg(unix)]
    if !long_running {
        // SAFETY: called once, before any thread starts; SIG_DFL is a valid disposition.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
}
