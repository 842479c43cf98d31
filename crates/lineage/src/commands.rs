//! One function per verb. Each returns the process exit code.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use lineage_bus::control::{self, ControlError, ErrorCode};
use lineage_bus::trace::TraceContext;
use lineage_bus::Subjects;
use lineage_core::authority::InterruptAuthority;
use lineage_core::descriptor::SubagentShape;
use lineage_core::ids::{DrainId, NodeId, RequestId, SessionId};
use lineage_host::control::{
    ops, DrainReport, DrainRequest, FollowupReply, FollowupRequest, InterruptReply,
    InterruptRequest, SpawnReply, SpawnRequest, StatusReply, StatusRequest,
};
use lineage_host::driver::AgentSpec;
use lineage_node::config::{self, FlagOverrides};
use lineage_registry::{Consistency, RegistryClient, RegistryError, SessionRecord};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::cli::{Cli, ConfigVerb, Global, ShapeArg, SpawnArgs, Verb};
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
        Verb::Send { .. } => Some("send"),
        Verb::Interrupt { .. } => Some("interrupt"),
        Verb::Tree { .. } => Some("tree"),
        Verb::Drain { .. } => Some("drain"),
        Verb::Watch { .. } => Some("watch"),
        Verb::Status => Some("status"),
        Verb::Agents => Some("agents"),
        Verb::Node { .. } | Verb::Dev { .. } | Verb::Config(_) | Verb::Bench { .. } => None,
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
        Verb::Node { config } => node(g, config).await,
        Verb::Dev {
            nodes,
            no_demo,
            exit_after_demo,
            dir,
            nats_port,
        } => crate::dev::dev(g, nodes, !no_demo, exit_after_demo, dir, nats_port).await,
        Verb::Spawn(args) => spawn(g, args).await,
        Verb::Send {
            session,
            content,
            request_id,
        } => send(g, &session, content, request_id).await,
        Verb::Interrupt {
            target,
            as_user,
            as_ancestor,
        } => interrupt(g, &target, as_user, as_ancestor).await,
        Verb::Tree { root } => tree(g, &root).await,
        Verb::Drain { roots } => drain(g, &roots).await,
        Verb::Watch { parent, count } => watch(g, &parent, count).await,
        Verb::Status => status(g).await,
        Verb::Agents => crate::agents::agents(g).await,
        Verb::Config(ConfigVerb::Show { config }) => config_show(g, config),
        Verb::Bench { scenario } => crate::bench::bench(g, &scenario).await,
    }
}

pub(crate) fn cluster(g: &Global) -> String {
    g.cluster
        .clone()
        .unwrap_or_else(|| DEFAULT_CLUSTER.to_owned())
}

pub(crate) fn subjects(g: &Global) -> Result<Subjects, ControlError> {
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

fn parse_session(what: &str, raw: &str) -> Result<SessionId, ControlError> {
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

pub(crate) fn now_ms() -> u64 {
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

async fn node(g: &Global, file: Option<std::path::PathBuf>) -> Result<(), ControlError> {
    let flags = FlagOverrides {
        nats_url: g.nats.clone(),
        cluster: g.cluster.clone(),
        nats: crate::nats_auth::node_overrides(g)?,
    };
    let loaded = config::load(file.as_deref(), &flags).map_err(|e| usage(e.to_string()))?;
    let telemetry = crate::telemetry::init(Some(&loaded.config.node.id));
    let shutdown = CancellationToken::new();
    let signal = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("signal received: shutting down");
        signal.cancel();
    });
    let outcome = lineage_node::node::run(loaded.config, shutdown)
        .await
        .map_err(|e| ControlError::new(ErrorCode::Unavailable, e.to_string()));
    telemetry.shutdown().await;
    outcome
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

fn config_show(g: &Global, file: Option<std::path::PathBuf>) -> Result<(), ControlError> {
    let flags = FlagOverrides {
        nats_url: g.nats.clone(),
        cluster: g.cluster.clone(),
        nats: crate::nats_auth::node_overrides(g)?,
    };
    let loaded = config::load(file.as_deref(), &flags).map_err(|e| usage(e.to_string()))?;
    let rows = loaded.with_sources();
    if g.json {
        let items: Vec<_> = rows
            .iter()
            .map(|(k, v, s)| json!({"key": k, "value": v, "source": s}))
            .collect();
        print_json(&items);
    } else {
        let width = rows.iter().map(|(k, _, _)| k.len()).max().unwrap_or(0);
        for (k, v, s) in rows {
            println!("{k:width$} = {v:30}  # {s}");
        }
    }
    Ok(())
}

/// Reads `--script`: inline JSON, or `@FILE` (JSON, or TOML when the file ends in `.toml`).
pub(crate) fn read_script(raw: &str) -> Result<lineage_host::script::Script, ControlError> {
    let (text, toml) = match raw.strip_prefix('@') {
        Some(path) => (
            std::fs::read_to_string(path)
                .map_err(|e| usage(format!("cannot read script file {path}: {e}")))?,
            path.ends_with(".toml"),
        ),
        None => (raw.to_owned(), false),
    };
    if toml {
        figment::Figment::from(
            <figment::providers::Toml as figment::providers::Format>::string(&text),
        )
        .extract()
        .map_err(|e| usage(format!("invalid script TOML: {e}")))
    } else {
        serde_json::from_str(&text).map_err(|e| {
            usage(format!(
                "invalid script JSON: {e}; example: {{\"turns\":[[{{\"do\":\"reply\",\"text\":\"hi\"}}]]}}"
            ))
        })
    }
}

async fn spawn(g: &Global, args: SpawnArgs) -> Result<(), ControlError> {
    let agent = match (&args.script, &args.acp) {
        _ if args.profile.is_some() => AgentSpec::Profile {
            profile: args.profile.clone().unwrap_or_default(),
        },
        (Some(script), None) => AgentSpec::Script {
            script: read_script(script)?,
        },
        (None, Some(cmd)) => {
            let command: Vec<String> = cmd.split_whitespace().map(str::to_owned).collect();
            if command.is_empty() {
                return Err(usage(
                    "--acp needs a command line, e.g. --acp 'my-agent --stdio'",
                ));
            }
            AgentSpec::Acp { command }
        }
        (None, None) => AgentSpec::Script {
            script: read_script(r#"{"turns":[[{"do":"echo"}]]}"#)?,
        },
        (Some(_), Some(_)) => return Err(usage("give either --script or --acp, not both")),
    };
    let parent = args
        .parent
        .as_deref()
        .map(|p| parse_session("--parent", p))
        .transpose()?;
    let node = args
        .node
        .as_deref()
        .map(|n| NodeId::parse(n).map_err(|e| usage(format!("--node: {e}"))))
        .transpose()?;
    let max_depth = match &args.max_depth {
        None => None,
        Some(raw) => {
            let value: serde_json::Value = serde_json::from_str(raw)
                .unwrap_or_else(|_| serde_json::Value::String(raw.clone()));
            lineage_core::depth::validate_max_depth(&value)
                .map_err(|e| usage(format!("--max-depth: {e}")))?;
            Some(value)
        }
    };
    let request_id = args
        .request_id
        .as_deref()
        .map(|r| RequestId::parse(r).map_err(|e| usage(format!("--request-id: {e}"))))
        .transpose()?;
    let request = SpawnRequest {
        parent,
        shape: Some(match args.shape {
            ShapeArg::OneShot => SubagentShape::OneShot,
            ShapeArg::Continuable => SubagentShape::Continuable,
        }),
        agent,
        prompt: args.prompt,
        node,
        label: args.label,
        persona: None,
        tool_filter: None,
        max_depth,
        request_id,
        cwd: None,
        preset: None,
        policy: None,
        forwarded: false,
    };
    let client = connect(g).await?;
    let subjects = subjects(g)?;
    let reply: SpawnReply = control::request(
        &client,
        subjects.control(ops::SPAWN),
        &request,
        Duration::from_millis(g.timeout_ms),
    )
    .await?;
    if g.json {
        print_json(&reply);
    } else {
        println!(
            "spawned {} on {} (depth {}{})",
            reply.session,
            reply.node,
            reply.depth,
            reply
                .run
                .as_ref()
                .map(|r| format!(", run {r}"))
                .unwrap_or_default()
        );
        if let Some(result) = &reply.result {
            println!(
                "result: {} ({})",
                result.output.as_deref().unwrap_or("-"),
                result.stop_reason.as_str()
            );
        }
    }
    Ok(())
}

async fn send(
    g: &Global,
    session: &str,
    content: String,
    request_id: Option<String>,
) -> Result<(), ControlError> {
    let session = parse_session("session", session)?;
    let request_id = match request_id {
        Some(r) => RequestId::parse(&r).map_err(|e| usage(format!("--request-id: {e}")))?,
        None => RequestId::parse(&uuid::Uuid::now_v7().to_string())
            .map_err(|e| usage(format!("cannot mint a request id: {e}")))?,
    };
    let client = connect(g).await?;
    let reply: FollowupReply = control::request(
        &client,
        subjects(g)?.control(ops::FOLLOWUP),
        &FollowupRequest {
            session,
            content,
            request_id: Some(request_id),
            forwarded: false,
        },
        Duration::from_millis(g.timeout_ms),
    )
    .await?;
    if g.json {
        print_json(&reply);
    } else {
        println!(
            "delivered to {} on {} ({:?})",
            reply.session, reply.node, reply.outcome
        );
    }
    Ok(())
}

async fn interrupt(
    g: &Global,
    target: &str,
    as_user: Option<String>,
    as_ancestor: Option<String>,
) -> Result<(), ControlError> {
    let target = parse_session("target", target)?;
    let authority = match (as_user, as_ancestor) {
        (Some(p), None) => InterruptAuthority::User {
            parent_session_id: parse_session("--as-user", &p)?,
        },
        (None, Some(a)) => InterruptAuthority::Ancestor {
            session: parse_session("--as-ancestor", &a)?,
        },
        _ => {
            return Err(usage(
                "say who interrupts: --as-user PARENT_SESSION or --as-ancestor SESSION",
            ))
        }
    };
    let client = connect(g).await?;
    let reply: InterruptReply = control::request(
        &client,
        subjects(g)?.control(ops::INTERRUPT),
        &InterruptRequest {
            target,
            authority,
            forwarded: false,
        },
        Duration::from_millis(g.timeout_ms),
    )
    .await?;
    if g.json {
        print_json(&reply);
    } else {
        println!(
            "{}: {:?}{}",
            reply.target,
            reply.outcome,
            reply.node.map(|n| format!(" on {n}")).unwrap_or_default()
        );
    }
    Ok(())
}

/// Asks every node in `nodes` for its live agents; returns session -> (owner) for live ones.
pub(crate) async fn live_owners(
    client: &async_nats::Client,
    subjects: &Subjects,
    nodes: impl IntoIterator<Item = NodeId>,
) -> BTreeMap<SessionId, Option<SessionId>> {
    let mut out = BTreeMap::new();
    for node in nodes {
        let reply: Result<StatusReply, _> = control::request(
            client,
            subjects.node_control(&node, ops::STATUS),
            &StatusRequest {},
            Duration::from_millis(1500),
        )
        .await;
        if let Ok(reply) = reply {
            for agent in reply.live {
                out.insert(agent.session, agent.owner);
            }
        }
    }
    out
}

fn shape_of(record: &SessionRecord) -> String {
    record
        .descriptor
        .as_ref()
        .and_then(|d| d.get("mode"))
        .and_then(|m| m.as_str())
        .map(str::to_owned)
        .unwrap_or_else(|| {
            if record.header.parent_session().is_none() {
                "root".into()
            } else {
                "-".into()
            }
        })
}

fn age(ms: u64) -> String {
    let s = ms / 1000;
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{}h{}m", s / 3600, (s % 3600) / 60)
    }
}

/// Renders a subtree (parents before children) as indented lines.
pub(crate) fn render_tree(
    records: &[SessionRecord],
    owners: &BTreeMap<SessionId, Option<SessionId>>,
    now: u64,
) -> Vec<String> {
    let by_id: BTreeMap<&SessionId, &SessionRecord> =
        records.iter().map(|r| (r.header.id(), r)).collect();
    let mut lines = Vec::new();
    let roots: Vec<&SessionRecord> = records
        .iter()
        .filter(|r| {
            r.header
                .parent_session()
                .is_none_or(|p| !by_id.contains_key(p))
        })
        .collect();
    fn walk(
        r: &SessionRecord,
        prefix: &str,
        by_id: &BTreeMap<&SessionId, &SessionRecord>,
        owners: &BTreeMap<SessionId, Option<SessionId>>,
        now: u64,
        lines: &mut Vec<String>,
    ) {
        let owner = match owners.get(r.header.id()) {
            Some(Some(o)) => short(o.as_str()),
            Some(None) => "-".into(),
            None => "-".into(),
        };
        let node = r
            .placement
            .as_ref()
            .map(|p| format!("{}@{}", p.node, p.epoch))
            .unwrap_or_else(|| "-".into());
        lines.push(format!(
            "{prefix}{}  {}  {}  depth={}  node={}  owner={}  age={}",
            r.header.id(),
            shape_of(r),
            r.state.as_str(),
            r.header.delegation_depth().unwrap_or(0),
            node,
            owner,
            age(now.saturating_sub(r.created_at_ms))
        ));
        let child_prefix = format!("{}  ", prefix.replace("└─", "  ").replace("├─", "│ "));
        let kids: Vec<&&SessionRecord> = r.children.iter().filter_map(|c| by_id.get(c)).collect();
        for (i, kid) in kids.iter().enumerate() {
            let branch = if i + 1 == kids.len() {
                "└─ "
            } else {
                "├─ "
            };
            walk(
                kid,
                &format!("{child_prefix}{branch}"),
                by_id,
                owners,
                now,
                lines,
            );
        }
    }
    for root in roots {
        walk(root, "", &by_id, owners, now, &mut lines);
    }
    lines
}

fn short(id: &str) -> String {
    id.chars()
        .rev()
        .take(8)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect()
}

async fn tree(g: &Global, root: &str) -> Result<(), ControlError> {
    let root = parse_session("root", root)?;
    let client = connect(g).await?;
    let registry = RegistryClient::new(client.clone(), cluster(g));
    let records = registry
        .subtree(root.clone(), Consistency::Linearizable)
        .await
        .map_err(registry_error)?;
    if records.is_empty() {
        return Err(ControlError::new(
            ErrorCode::NotFound,
            format!("session {root} is not in the registry; check the id with `lineage status`"),
        ));
    }
    let nodes: std::collections::BTreeSet<NodeId> = records
        .iter()
        .filter_map(|r| r.placement.as_ref().map(|p| p.node.clone()))
        .collect();
    let owners = live_owners(&client, &subjects(g)?, nodes).await;
    if g.json {
        let items: Vec<_> = records
            .iter()
            .map(|r| {
                json!({
                    "session": r.header.id(),
                    "parent": r.header.parent_session(),
                    "shape": shape_of(r),
                    "state": r.state.as_str(),
                    "depth": r.header.delegation_depth().unwrap_or(0),
                    "node": r.placement.as_ref().map(|p| p.node.to_string()),
                    "epoch": r.placement.as_ref().map(|p| p.epoch),
                    "live": owners.contains_key(r.header.id()),
                    "owner": owners.get(r.header.id()).cloned().flatten(),
                    "admission": r.admission,
                    "created_at_ms": r.created_at_ms,
                    "updated_at_ms": r.updated_at_ms,
                })
            })
            .collect();
        print_json(&items);
    } else {
        for line in render_tree(&records, &owners, now_ms()) {
            println!("{line}");
        }
    }
    Ok(())
}

async fn drain(g: &Global, roots: &[String]) -> Result<(), ControlError> {
    let roots: Vec<SessionId> = roots
        .iter()
        .map(|r| parse_session("root", r))
        .collect::<Result<_, _>>()?;
    let client = connect(g).await?;
    let subjects = subjects(g)?;
    let started = std::time::Instant::now();
    let timeout = Duration::from_millis(g.timeout_ms.max(60_000));
    // Live bars only for a person watching: not with --json, not when stderr is a pipe or file.
    let live = !g.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let report: DrainReport = if live {
        drain_live(&client, &subjects, roots, timeout).await?
    } else {
        control::request(
            &client,
            subjects.control(ops::DRAIN),
            &DrainRequest {
                roots,
                progress: None,
            },
            timeout,
        )
        .await?
    };
    if g.json {
        print_json(&report);
    } else {
        // Per-wave counts come from the summary: they are complete even when the per-session
        // lists are capped (`truncated`).
        for (i, wave) in report.summary.iter().enumerate() {
            let total = wave.counts.total();
            let hosted: u64 = wave.by_node.values().sum();
            let mut nodes: Vec<String> = wave
                .by_node
                .iter()
                .map(|(n, c)| format!("{n}:{c}"))
                .collect();
            if total > hosted {
                nodes.push(format!("-:{}", total - hosted));
            }
            let bar = "#".repeat(usize::try_from(total).unwrap_or(usize::MAX).min(40));
            println!(
                "wave {i:>2} [{bar:<40}] {total:>5} disposed  {}",
                nodes.join(" ")
            );
        }
        println!(
            "drained {} sessions in {} waves ({} closed to admission) in {:.1?}",
            report.disposed(),
            report.summary.len(),
            report.closed_count,
            started.elapsed()
        );
        if report.truncated {
            println!(
                "(the report lists the first {} disposals one by one; --json to see them)",
                report.listed()
            );
        }
        for w in &report.warnings {
            println!("warning: {w}");
        }
    }
    Ok(())
}

/// The drain request with live progress: mints a drain id, subscribes to
/// `lineage.<cluster>.drain.<id>.progress` before sending, and draws each message on stderr
/// ([`crate::progress::LiveBars`]) until the reply arrives; then it draws what had already
/// arrived, ends an open line and unsubscribes. When the subscription cannot be made, the drain
/// runs without progress.
async fn drain_live(
    client: &async_nats::Client,
    subjects: &Subjects,
    roots: Vec<SessionId>,
    timeout: Duration,
) -> Result<DrainReport, ControlError> {
    use futures::FutureExt;
    use std::io::Write;
    let id = DrainId::parse(&uuid::Uuid::now_v7().to_string())
        .map_err(|e| ControlError::new(ErrorCode::Internal, format!("drain id: {e}")))?;
    let mut sub = client.subscribe(subjects.drain_progress(&id)).await.ok();
    let request = DrainRequest {
        roots,
        progress: sub.as_ref().map(|_| id),
    };
    let reply =
        control::request::<_, DrainReport>(client, subjects.control(ops::DRAIN), &request, timeout);
    tokio::pin!(reply);
    let mut bars = crate::progress::LiveBars::new();
    let draw = |text: String| {
        if !text.is_empty() {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(text.as_bytes());
            let _ = err.flush();
        }
    };
    let outcome = loop {
        tokio::select! {
            biased;
            msg = async { sub.as_mut()?.next().await }, if sub.is_some() => match msg {
                Some(msg) => draw(bars.apply_raw(&msg.payload)),
                None => sub = None,
            },
            outcome = &mut reply => break outcome,
        }
    };
    // Messages published before the reply may still be queued: draw them, then stop listening.
    if let Some(mut sub) = sub {
        while let Some(Some(msg)) = sub.next().now_or_never() {
            draw(bars.apply_raw(&msg.payload));
        }
        let _ = sub.unsubscribe().await;
    }
    draw(bars.finish());
    outcome
}

async fn watch(g: &Global, parent: &str, count: Option<u64>) -> Result<(), ControlError> {
    let parent = parse_session("parent", parent)?;
    let client = connect(g).await?;
    let subjects = subjects(g)?;
    let subject = format!("lineage.{}.parent.{parent}.*", subjects.cluster());
    let mut sub = client.subscribe(subject.clone()).await.map_err(|e| {
        ControlError::new(
            ErrorCode::Unavailable,
            format!("cannot subscribe to {subject}: {e}"),
        )
    })?;
    if !g.json {
        eprintln!("watching {subject} (Ctrl-C to stop)");
    }
    let mut seen = 0u64;
    loop {
        let msg = tokio::select! {
            m = sub.next() => m,
            _ = wait_for_signal() => None,
        };
        let Some(msg) = msg else { break };
        let kind = msg.subject.rsplit('.').next().unwrap_or("?").to_owned();
        let body: serde_json::Value = serde_json::from_slice(&msg.payload)
            .unwrap_or_else(|_| json!({"raw": String::from_utf8_lossy(&msg.payload)}));
        if g.json {
            println!(
                "{}",
                json!({"subject": msg.subject.as_str(), "event": body})
            );
        } else {
            let (what, who, detail) = describe_event(&kind, &body);
            println!("{what:18} {who}  {detail}");
        }
        seen += 1;
        if count.is_some_and(|c| seen >= c) {
            break;
        }
    }
    Ok(())
}

/// One watched message as (what, who, detail): the event or kind, the child, and its content,
/// summary, stop reason or node. Shared by `watch` and the demo.
pub(crate) fn describe_event(
    subject_kind: &str,
    body: &serde_json::Value,
) -> (String, String, String) {
    let text = |v: &serde_json::Value| {
        v.as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| v.to_string())
    };
    let what = body
        .get("event")
        .or_else(|| body.get("kind"))
        .and_then(|v| v.as_str())
        .unwrap_or(subject_kind)
        .to_owned();
    let who = body
        .get("child_id")
        .or_else(|| body.get("sender_session_id"))
        .map(text)
        .unwrap_or_else(|| "-".to_owned());
    let detail = body
        .get("content")
        .or_else(|| body.get("summary"))
        .or_else(|| body.get("stop_reason"))
        .or_else(|| body.get("node"))
        .map(text)
        .unwrap_or_default();
    (what, who, detail)
}

async fn status(g: &Global) -> Result<(), ControlError> {
    let client = connect(g).await?;
    let registry = RegistryClient::new(client.clone(), cluster(g));
    let raft = registry
        .status(Consistency::Linearizable)
        .await
        .map_err(registry_error)?;
    let nodes = registry
        .nodes(Consistency::Linearizable)
        .await
        .map_err(registry_error)?;
    let counts = registry
        .session_counts(Consistency::Linearizable)
        .await
        .map_err(registry_error)?;
    let now = now_ms();
    let subjects = subjects(g)?;
    let mut live = BTreeMap::new();
    for n in &nodes {
        let reply: Result<StatusReply, _> = control::request(
            &client,
            subjects.node_control(&n.node, ops::STATUS),
            &StatusRequest {},
            Duration::from_millis(1000),
        )
        .await;
        live.insert(n.node.to_string(), reply.map(|r| r.live.len()).ok());
    }
    if g.json {
        print_json(&json!({
            "cluster": subjects.cluster(),
            "registry": raft,
            "nodes": nodes.iter().map(|n| json!({
                "node": n.node,
                "lease_expires_at_ms": n.lease_expires_at_ms,
                "last_heartbeat_age_ms": now.saturating_sub(n.last_heartbeat_ms),
                "lease_live": n.lease_expires_at_ms > now,
                "live_agents": live.get(n.node.as_str()).cloned().flatten(),
            })).collect::<Vec<_>>(),
            "sessions": counts,
        }));
    } else {
        println!("cluster   {}", subjects.cluster());
        println!(
            "leader    {}   term {}   applied {}",
            raft.leader
                .map(|l| l.to_string())
                .unwrap_or_else(|| "none".into()),
            raft.term,
            raft.last_applied
                .map(|a| a.to_string())
                .unwrap_or_else(|| "-".into())
        );
        println!("voters    {:?}", raft.voters);
        println!("learners  {:?}", raft.learners);
        println!("nodes");
        for n in &nodes {
            let lease = if n.lease_expires_at_ms > now {
                "live"
            } else {
                "expired"
            };
            println!(
                "  {:12} lease {:7}  last heartbeat {:>6} ms ago  live agents {}",
                n.node.as_str(),
                lease,
                now.saturating_sub(n.last_heartbeat_ms),
                live.get(n.node.as_str())
                    .cloned()
                    .flatten()
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "?".into())
            );
        }
        let line: Vec<String> = counts.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("sessions  {}", line.join(" "));
    }
    Ok(())
}
