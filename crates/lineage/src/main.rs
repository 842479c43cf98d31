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
    no_transparent_huge_pages();
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

/// Turns transparent huge pages off for this process (and what it starts), unless
/// `LINEAGE_ALLOW_THP=1`. mimalloc asks for huge pages on its arenas, and the kernel then zeroes
/// 2 MiB at a page's first touch, in the middle of a request: a profile of `lineage bench
/// registry` (issue 35) spent 10% of the nodes' samples in `clear_page_erms` under redb's and
/// openraft's allocations. Measured in one session, three runs each: with it off, 64 clients
/// wrote 11,555–12,265 registrations/s at p99 8.5–11.8 ms, with it on 9,318–10,073/s at
/// p99 19.8–35.3 ms; one client was the same (1.30–1.38 ms p50 either way).
fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    if std::env::var("LINEAGE_ALLOW_THP").as_deref() != Ok("1") {
        // SAFETY: PR_SET_THP_DISABLE only sets a flag on this process's memory map; it takes
        // no pointers.
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    }
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
