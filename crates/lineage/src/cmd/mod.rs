//! The CLI verbs, one module each (mini-redis `cmd/`): its clap arguments and its `run`. Verbs
//! that talk to the cluster go through [`ControlClient`] (the control service) or the registry
//! client; none of them compiles against the host. This module is the dispatch and the helpers
//! the verbs share.
//!
//! | module | verb |
//! |---|---|
//! | [`node`] | `lineage node`: run one node |
//! | [`spawn`] | `lineage spawn` |
//! | [`send`] | `lineage send` (followup) |
//! | [`interrupt`] | `lineage interrupt` |
//! | [`tree`] | `lineage tree` |
//! | [`ls`] | `lineage ls`: list and search sessions (Q4) |
//! | [`drain`] | `lineage drain` |
//! | [`watch`] | `lineage watch` |
//! | [`status`] | `lineage status` |
//! | [`agents`] | `lineage agents` |
//! | [`mcp`] | `lineage mcp`: a hosted agent's stdio MCP server (a bridge to its node's tools socket) |
//! | [`config`] | `lineage config show` |
//! | [`script`] | `lineage script schema` / `check`: the scripted agent's language |

pub mod agents;
pub mod config;
pub mod drain;
pub mod interrupt;
pub mod ls;
pub mod mcp;
pub mod node;
pub mod script;
pub mod send;
pub mod spawn;
pub mod status;
pub mod tree;
pub mod watch;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lineage_bus::control::{ControlError, ErrorCode};
use lineage_bus::trace::TraceContext;
use lineage_bus::{ControlClient, Subjects};
use lineage_core::ids::SessionId;
use lineage_registry::RegistryError;
pub(crate) use script::read_script;

use crate::cli::{Cli, ConfigVerb, Global, Verb};
use crate::output::{fail, usage};

/// The default NATS URL when neither `--nats` nor `NATS_URL` is given.
pub const DEFAULT_NATS: &str = "nats://127.0.0.1:4222";
/// The default cluster name.
pub const DEFAULT_CLUSTER: &str = "dev";

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
        Verb::Ls(_) => Some("ls"),
        Verb::Drain(_) => Some("drain"),
        Verb::Watch(_) => Some("watch"),
        Verb::Status => Some("status"),
        Verb::Agents => Some("agents"),
        Verb::Node { .. }
        | Verb::Dev { .. }
        | Verb::Config(_)
        | Verb::Script(_)
        | Verb::Bench { .. }
        | Verb::Chaos { .. }
        | Verb::Mcp
        | Verb::Acp(_) => None,
    };
    let outcome = match command {
        Some(command) => traced(command, run_verb(&g, cli.verb)).await,
        None => run_verb(&g, cli.verb).await,
    };
    match outcome {
        Ok(()) => 0,
        Err(e) => fail(g.json, &e),
    }
}

/// Runs one CLI command in its own trace (see [`run`]).
async fn traced(
    command: &'static str,
    fut: impl std::future::Future<Output = Result<(), ControlError>>,
) -> Result<(), ControlError> {
    use tracing::Instrument;
    let caller = std::env::var("TRACEPARENT")
        .ok()
        .and_then(|v| TraceContext::parse(v.trim()).ok());
    let telemetry = crate::telemetry::init_cli();
    // Without an exporter the CLI's own span is never seen: the caller's context goes out as
    // is, so the nodes' spans hang under the caller's span.
    let ctx = match (caller, telemetry.exporting()) {
        (Some(c), true) => c.child(),
        (Some(c), false) => c,
        (None, _) => TraceContext::new_root(),
    };
    let span = tracing::info_span!(
        "cli",
        command,
        error = tracing::field::Empty,
        trace_id = %ctx.trace_id_hex(),
        span_id = %ctx.span_id_hex(),
        parent_span_id = tracing::field::Empty,
    );
    if let Some(c) = caller.filter(|c| c.span_id != ctx.span_id) {
        span.record("parent_span_id", c.span_id_hex().as_str());
    }
    let outcome = lineage_bus::trace::scope(ctx, fut)
        .instrument(span.clone())
        .await;
    if let Err(e) = &outcome {
        span.record("error", e.message.as_str());
    }
    drop(span);
    telemetry.shutdown().await;
    outcome
}

async fn run_verb(g: &Global, verb: Verb) -> Result<(), ControlError> {
    match verb {
        Verb::Node { config } => node::run(g, config).await,
        Verb::Dev {
            nodes,
            no_demo,
            exit_after_demo,
            dir,
            nats_port,
        } => crate::dev::dev(g, nodes, !no_demo, exit_after_demo, dir, nats_port).await,
        Verb::Spawn(args) => spawn::run(g, args).await,
        Verb::Send(args) => send::run(g, args).await,
        Verb::Interrupt(args) => interrupt::run(g, args).await,
        Verb::Tree(args) => tree::run(g, args).await,
        Verb::Ls(args) => ls::run(g, args).await,
        Verb::Drain(args) => drain::run(g, args).await,
        Verb::Watch(args) => watch::run(g, args).await,
        Verb::Status => status::run(g).await,
        Verb::Agents => agents::run(g).await,
        Verb::Mcp => mcp::run().await,
        Verb::Acp(args) => crate::acp::run(g, args).await,
        Verb::Config(ConfigVerb::Show { config }) => config::show(g, config),
        Verb::Script(verb) => script::run(verb),
        // `main` hands these to the lab program before the runtime starts.
        Verb::Bench { .. } | Verb::Chaos { .. } => std::process::exit(crate::lab::forward()),
    }
}

/// The cluster name: `--cluster`, else [`DEFAULT_CLUSTER`].
pub fn cluster(g: &Global) -> String {
    g.cluster
        .clone()
        .unwrap_or_else(|| DEFAULT_CLUSTER.to_owned())
}

/// The subjects of the cluster `--cluster` names; a bad name is a usage error.
pub fn subjects(g: &Global) -> Result<Subjects, ControlError> {
    Subjects::new(&cluster(g)).map_err(|e| usage(e.to_string()))
}

pub(crate) async fn connect(g: &Global) -> Result<async_nats::Client, ControlError> {
    let how = crate::nats_auth::client_connect(g, "lineage-cli")?;
    let url = lineage_bus::redact_url(&how.url);
    tokio::time::timeout(Duration::from_secs(5), lineage_bus::connect_with(&how))
        .await
        .map_err(|_| {
            ControlError::new(
                ErrorCode::Unavailable,
                format!(
                "cannot connect to NATS at {url} within 5 s; start nats-server or pass --nats URL"
            ),
            )
        })?
        .map_err(ControlError::from)
}

pub(crate) fn parse_session(what: &str, raw: &str) -> Result<SessionId, ControlError> {
    SessionId::parse(raw).map_err(|e| usage(format!("{what}: {e}")))
}

pub(crate) fn registry_error(e: RegistryError) -> ControlError {
    let text = e.to_string();
    let code = match &e {
        RegistryError::Refused(_) => ErrorCode::Refused,
        _ if text.contains("not found") => ErrorCode::NotFound,
        _ => ErrorCode::Unavailable,
    };
    ControlError::new(code, text)
}

/// Milliseconds since the Unix epoch (0 before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub(crate) fn print_json(value: &impl serde::Serialize) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        Err(e) => eprintln!("error: cannot print JSON: {e}"),
    }
}

/// A [`ControlClient`] of the cluster `--cluster` names, over a new connection, with the
/// `--timeout-ms` deadline per call.
pub(crate) async fn control(g: &Global) -> Result<ControlClient, ControlError> {
    let nats = connect(g).await?;
    Ok(ControlClient::new(
        nats,
        subjects(g)?,
        Duration::from_millis(g.timeout_ms),
    ))
}

pub(crate) async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
