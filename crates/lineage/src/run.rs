//! The dispatch: runs the verb the command line names ([`run`]). The top room of the CLI: it
//! uses every verb, the local cluster, the front door and the lab; nothing uses it but `main`.

use lineage_bus::control::ControlError;
use lineage_bus::trace::TraceContext;

use crate::cli::{Cli, ConfigVerb, Verb};
use crate::cmd::{
    agents, config, docs, drain, interrupt, logs, ls, mcp, node, script, send, show, spawn, status,
    tree, ui, watch, workspace,
};
use crate::global::Global;
use crate::output::fail;

/// Runs the verb and returns the exit code. Verbs that talk to the cluster run in a `cli`
/// span that starts a new trace (or continues the caller's, when `TRACEPARENT` holds a W3C
/// `traceparent`); every control request they send carries it as its `traceparent` header.
pub async fn run(cli: Cli) -> i32 {
    let g = cli.global.clone();
    let command = match &cli.verb {
        Verb::Spawn(_) => Some("spawn"),
        Verb::Send(_) => Some("send"),
        Verb::Interrupt(_) => Some("interrupt"),
        Verb::Tree(_) => Some("tree"),
        Verb::Show(_) => Some("show"),
        Verb::Logs(_) => Some("logs"),
        Verb::Ls(_) => Some("ls"),
        Verb::Drain(_) => Some("drain"),
        Verb::Watch(_) => Some("watch"),
        Verb::Status => Some("status"),
        Verb::Agents => Some("agents"),
        Verb::Workspace(_) => Some("workspace"),
        Verb::Ui(_) => None,
        Verb::Node { .. }
        | Verb::Dev { .. }
        | Verb::Config(_)
        | Verb::Script(_)
        | Verb::Docs(_)
        | Verb::Bench { .. }
        | Verb::Chaos { .. }
        | Verb::Mcp
        | Verb::Acp(_)
        | Verb::A2a(_) => None,
    };
    let outcome = match command {
        Some(command) => traced(command, run_verb(&g, cli.verb)).await,
        None => run_verb(&g, cli.verb).await,
    };
    match outcome {
        Ok(code) => code,
        Err(e) => fail(g.json, &e),
    }
}

/// Runs one CLI command in its own trace (see [`run`]).
async fn traced(
    command: &'static str,
    fut: impl std::future::Future<Output = Result<i32, ControlError>>,
) -> Result<i32, ControlError> {
    use tracing::Instrument;
    let caller = std::env::var("TRACEPARENT")
        .ok()
        .and_then(|v| TraceContext::parse(v.trim()).ok());
    let telemetry = crate::telemetry::init_cli();
    let span = tracing::info_span!(
        "cli",
        command,
        error = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
    );
    // Without an exporter the CLI's own span is never seen: the caller's context goes out as
    // is, so the nodes' spans hang under the caller's span.
    let ctx = match (caller, telemetry.exporting()) {
        (Some(c), false) => c,
        (caller, _) => lineage_bus::trace::open_span(&span, caller).0,
    };
    let outcome = lineage_bus::trace::scope(ctx, fut)
        .instrument(span.clone())
        .await;
    if let Err(e) = &outcome {
        span.record("error", e.message.as_str());
        span.record("otel.status_description", e.message.as_str());
    }
    drop(span);
    telemetry.shutdown().await;
    outcome
}

/// Runs the verb; `Ok` holds the exit code (0, or what `spawn --wait` saw).
async fn run_verb(g: &Global, verb: Verb) -> Result<i32, ControlError> {
    let done = match verb {
        Verb::Spawn(args) => return spawn::run(g, args).await,
        Verb::Node { config } => node::run(g, config).await,
        Verb::Dev {
            nodes,
            no_demo,
            exit_after_demo,
            dir,
            nats_port,
            raft_over_nats,
        } => {
            let links = if raft_over_nats {
                crate::dev::RaftLinks::Nats
            } else {
                crate::dev::RaftLinks::Direct
            };
            crate::dev::dev(g, nodes, !no_demo, exit_after_demo, dir, nats_port, links).await
        }
        Verb::Send(args) => send::run(g, args).await,
        Verb::Interrupt(args) => interrupt::run(g, args).await,
        Verb::Tree(args) => tree::run(g, args).await,
        Verb::Show(args) => show::run(g, args).await,
        Verb::Logs(args) => logs::run(g, args).await,
        Verb::Ls(args) => ls::run(g, args).await,
        Verb::Drain(args) => drain::run(g, args).await,
        Verb::Watch(args) => watch::run(g, args).await,
        Verb::Status => status::run(g).await,
        Verb::Agents => agents::run(g).await,
        Verb::Mcp => mcp::run().await,
        Verb::Acp(args) => crate::acp::run(g, args).await,
        Verb::A2a(args) => crate::a2a::run(g, args).await,
        Verb::Config(ConfigVerb::Show { config }) => config::show(g, config),
        Verb::Script(verb) => script::run(verb),
        Verb::Docs(verb) => docs::run(verb),
        Verb::Workspace(verb) => workspace::run(g, verb).await,
        Verb::Ui(args) => ui::run(g, args).await,
        // `main` hands these to the lab program before the runtime starts.
        Verb::Bench { .. } | Verb::Chaos { .. } => std::process::exit(crate::lab::forward()),
    };
    done.map(|()| 0)
}

/// Runs `fut` to its exit code on a new multi-threaded runtime and exits the process with it
/// (`lineage` and `lineage-lab` start the same way); exit 1 when the runtime cannot start.
pub fn exit_with(fut: impl std::future::Future<Output = i32>) -> ! {
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
    let code = runtime.block_on(fut);
    std::process::exit(code)
}
