//! `lineage spawn`: a top-level session, or a child of `--parent` (S1, S3, D4, T4).

use clap::ValueEnum;
use lineage_bus::control::{ControlError, ErrorCode};
use lineage_core::descriptor::SubagentShape;
use lineage_core::ids::{NodeId, RequestId};
use lineage_core::messages::StopReason;
use lineage_protocol::control::SpawnRequest;
use lineage_protocol::workspace::SpawnWorkspace;
use lineage_protocol::AgentSpec;
use lineage_registry::{Consistency, RegistryClient};

use super::script::read_script;
use crate::client::{connect, control, parse_session, print_json, remove_upload, upload_workspace};
use crate::global::{cluster, subjects, Global};
use crate::output::usage;

/// The shape of a child (S1, S3).
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum ShapeArg {
    /// One turn; the run settles with its result.
    OneShot,
    /// Multi-turn; settles with a notice to the parent.
    Continuable,
}

/// `spawn` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Parent session (omit for a top-level session).
    #[arg(long)]
    pub parent: Option<String>,
    /// Child shape.
    #[arg(long, value_enum, default_value_t = ShapeArg::Continuable)]
    pub shape: ShapeArg,
    /// Script JSON, or @FILE.
    #[arg(long, conflicts_with = "acp")]
    pub script: Option<String>,
    /// Run an agent profile of the hosting node's config (`lineage agents` lists them).
    #[arg(long, conflicts_with_all = ["script", "acp"])]
    pub profile: Option<String>,
    /// Run a raw ACP command line (program and arguments), e.g. --acp 'my-agent --stdio'.
    /// Refused unless the hosting node sets agents.allow_raw_commands (development only).
    #[arg(long)]
    pub acp: Option<String>,
    /// The first user message.
    #[arg(long, default_value = "")]
    pub prompt: String,
    /// Preferred node.
    #[arg(long)]
    pub node: Option<String>,
    /// Max delegation depth for this tree: a non-negative integer.
    #[arg(long, allow_hyphen_values = true)]
    pub max_depth: Option<String>,
    /// A label.
    #[arg(long)]
    pub label: Option<String>,
    /// Idempotency key: a retried spawn with the same id returns the first result.
    #[arg(long)]
    pub request_id: Option<String>,
    /// Deadline, in ms from now: the new session and everything it spawns are drained (stop
    /// reason `deadline`) then; a child never outlives its parent's deadline.
    #[arg(long, value_name = "MS")]
    pub deadline_ms: Option<u64>,
    /// A top-level session's idle TTL, e.g. 10m or 90s: once it has had no turn, no message
    /// and no working child that long, its tree is drained (stop reason `idle`). Default: the
    /// node's limits.idle_root_ms (none: it stays until `lineage drain`).
    #[arg(long, value_name = "DURATION")]
    pub idle_ttl: Option<String>,
    /// Budget: tokens the new session's subtree may report in all; once reached, no child is
    /// born under it and it is drained (stop reason `budget`).
    #[arg(long, value_name = "TOKENS")]
    pub budget_tokens: Option<u64>,
    /// Budget: cost the subtree may report in all (in the agents' currency, e.g. 0.50).
    #[arg(long, value_name = "AMOUNT", allow_hyphen_values = true)]
    pub budget_cost: Option<f64>,
    /// The files the session starts in. A top-level session: a directory, packed here
    /// (honouring .gitignore, without .git) and uploaded to the cluster. A child
    /// (--parent): `inherit` (a copy of its parent's files; the default when the parent has
    /// a workspace) or `empty`.
    #[arg(long, value_name = "DIR|inherit|empty", conflicts_with = "git")]
    pub workspace: Option<String>,
    /// A top-level session's files cloned by the hosting node from this git repository (the
    /// node's agents.git_protocols decide which URLs), at --ref.
    #[arg(
        long,
        value_name = "URL",
        requires = "reference",
        conflicts_with = "parent"
    )]
    pub git: Option<String>,
    /// Wait for the first turn to end, then print its reply; the exit code says how it ended
    /// (0 completed, 1 anything else, with the reason).
    #[arg(long)]
    pub wait: bool,
    /// The branch or tag --git clones.
    #[arg(
        long = "ref",
        id = "reference",
        value_name = "REF",
        requires = "git",
        allow_hyphen_values = true
    )]
    pub reference: Option<String>,
}

/// `e` for a spawn on `node` nobody served, or, when the registry lists no such node, the
/// same error in one line that names the nodes there are.
async fn unknown_node(g: &Global, node: &NodeId, e: ControlError) -> ControlError {
    let Ok(nats) = connect(g).await else { return e };
    let registry = RegistryClient::new(nats, cluster(g));
    let Ok(nodes) = registry.nodes(Consistency::Linearizable).await else {
        return e;
    };
    if nodes.iter().any(|n| &n.node == node) {
        return e;
    }
    let names: Vec<String> = nodes.iter().map(|n| n.node.to_string()).collect();
    // Still unavailable (5), as the start was: the birth was registered, and the sweep
    // disposes it (S1).
    ControlError::new(
        e.code,
        format!(
            "--node {node}: no such node in cluster {}; its nodes are {} (lineage status)",
            cluster(g),
            if names.is_empty() {
                "none yet".to_owned()
            } else {
                names.join(", ")
            }
        ),
    )
}

/// Builds the spawn request from the flags, sends it and prints the new session; with
/// `--wait`, then the first turn's reply. Returns the exit code (not 0: `--wait` saw the first
/// turn end other than completed).
pub(crate) async fn run(g: &Global, args: Args) -> Result<i32, ControlError> {
    let wait = args.wait;
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
            Some(
                lineage_core::depth::validate_max_depth(&value)
                    .map_err(|e| usage(format!("--max-depth: {e}")))?,
            )
        }
    };
    // Always a request id: a spawn the serving node did not answer (stopped, hung) is sent
    // again to another node, which recognises it by the id (one birth).
    let request_id = match args.request_id.as_deref() {
        Some(r) => RequestId::parse(r).map_err(|e| usage(format!("--request-id: {e}")))?,
        None => RequestId::parse(&uuid::Uuid::now_v7().to_string())
            .map_err(|e| usage(format!("cannot mint a request id: {e}")))?,
    };
    let timeout = match args.deadline_ms {
        None => None,
        Some(ms) => Some(
            lineage_core::deadline::Timeout::named("--deadline-ms", ms).map_err(|e| match e {
                lineage_core::error::CoreError::InvalidPayload { reason, .. } => usage(reason),
                other => usage(other.to_string()),
            })?,
        ),
    };
    let idle_ttl_ms = match args.idle_ttl.as_deref() {
        None => None,
        Some(text) => {
            let ms = humantime::parse_duration(text)
                .map_err(|e| {
                    usage(format!(
                        "--idle-ttl {text:?} is not a duration ({e}); give e.g. --idle-ttl 10m or 90s"
                    ))
                })?
                .as_millis();
            let ms = u64::try_from(ms).unwrap_or(u64::MAX);
            Some(
                lineage_core::idle::IdleTtl::named("--idle-ttl", ms).map_err(|e| match e {
                    lineage_core::error::CoreError::InvalidPayload { reason, .. } => usage(reason),
                    other => usage(other.to_string()),
                })?,
            )
        }
    };
    let budget = match args.budget_cost {
        Some(c) if !c.is_finite() || c <= 0.0 => {
            return Err(usage(format!(
                "--budget-cost {c} is not a positive amount; give e.g. --budget-cost 0.50"
            )))
        }
        cost => lineage_core::budget::Budget {
            max_tokens: args.budget_tokens,
            max_cost_micros: cost.map(lineage_core::usage::SessionUsage::micros),
        },
    };
    if budget.max_tokens == Some(0) {
        return Err(usage(
            "--budget-tokens 0 would be spent at birth; give a positive number of tokens",
        ));
    }
    let budget = (!budget.is_unlimited()).then_some(budget);
    let (workspace, uploaded) = match (&args.workspace, &parent) {
        (None, _) => (
            args.git.clone().map(|url| SpawnWorkspace::Git {
                url,
                reference: args.reference.clone().unwrap_or_default(),
            }),
            None,
        ),
        (Some(word), Some(_)) => (
            Some(
                SpawnWorkspace::parse_choice(word)
                    .map_err(|e| usage(format!("--workspace: {e}")))?,
            ),
            None,
        ),
        (Some(dir), None) => {
            let (digest, store) = upload_workspace(
                connect(g).await?,
                &subjects(g)?,
                std::path::Path::new(dir),
                &request_id,
            )
            .await
            .map_err(|e| ControlError::new(e.code, format!("--workspace: {}", e.message)))?;
            (Some(SpawnWorkspace::Uploaded { digest }), Some(store))
        }
    };
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
        request_id: Some(request_id.clone()),
        cwd: None,
        preset: None,
        policy: None,
        timeout_ms: timeout,
        budget,
        idle_ttl_ms,
        wake_on: None,
        workspace,
        mcp_servers: Vec::new(),
    };
    let wanted = request.node.clone();
    let reply = control(g).await?.spawn(&request).await;
    // Nobody serves the node asked for: say whether it is a node of this cluster at all.
    let reply = match (reply, wanted) {
        (Err(e), Some(node)) if e.code == ErrorCode::Unavailable => {
            Err(unknown_node(g, &node, e).await)
        }
        (reply, _) => reply,
    };
    // The hosting node copied the upload to the session's base (or the spawn failed): the
    // upload is this client's to remove.
    if let Some(store) = uploaded {
        remove_upload(&store, &request_id).await;
    }
    let reply = reply?;
    if wait {
        let turn = super::logs::first_turn(g, &reply.session).await?;
        let code = i32::from(turn.stop_reason != StopReason::Completed);
        if g.json {
            print_json(&serde_json::json!({"spawn": reply, "turn": turn}));
        } else {
            println!("spawned {} on {}", reply.session, reply.node);
            match &turn.error {
                Some(error) => println!("turn 0 {}: {error}", turn.stop_reason.as_str()),
                None => println!("turn 0 {}", turn.stop_reason.as_str()),
            }
            println!("{}", turn.reply.as_deref().unwrap_or("(no reply)"));
        }
        return Ok(code);
    }
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
    Ok(0)
}
