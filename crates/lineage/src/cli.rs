//! clap definitions: the command line and its verbs (the global flags are
//! [`crate::global::Global`]). Every verb's `--help` ends with an example; each verb's own
//! arguments live with its `run` in [`crate::cmd`]. Nothing below imports this module but the
//! dispatch ([`crate::run`]).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::global::Global;

/// lineage: a distributed coordinator for agents that spawn child agents.
#[derive(Debug, Parser)]
#[command(name = "lineage", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub verb: Verb,
}

/// The verbs.
#[derive(Debug, Subcommand)]
pub enum Verb {
    /// Run one node (registry voter or client, plus agent host).
    #[command(after_help = "Example:\n  lineage node --config config/local-3node/node-1.toml")]
    Node {
        /// Config file (TOML); defaults, LINEAGE_ env and flags apply on top.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Start a local cluster (nats-server + 3 nodes) and run the demo workload.
    #[command(
        after_help = "Example:\n  lineage dev            # cluster + demo, Ctrl-C to stop\n  lineage dev --no-demo  # just the cluster"
    )]
    Dev {
        /// Number of nodes (all registry voters when 1, 3 or 5).
        #[arg(long, default_value_t = 3)]
        nodes: u8,
        /// Skip the demo workload.
        #[arg(long)]
        no_demo: bool,
        /// Exit after the demo instead of leaving the cluster up.
        #[arg(long)]
        exit_after_demo: bool,
        /// Working directory for data and logs (default: a new temp dir).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// NATS port for the local server (default: 4222 when it is free, else a free port).
        #[arg(long)]
        nats_port: Option<u16>,
        /// Send the voters' Raft RPCs through nats-server (to watch them with `nats sub
        /// 'lineage.dev.raft.>'`) instead of over their direct links.
        #[arg(long)]
        raft_over_nats: bool,
    },
    /// Spawn a session: top level, or a child of --parent.
    #[command(
        after_help = "Example:\n  lineage spawn --shape continuable --prompt start --script '{\"turns\":[[{\"do\":\"reply\",\"content\":\"hi\"}]]}'\n  lineage spawn --parent 0193... --shape one-shot --script @child.json --node node-2"
    )]
    Spawn(crate::cmd::spawn::Args),
    /// Send the next user message to a session (followup; cold-resumes a cold child).
    #[command(after_help = "Example:\n  lineage send 0193...child 'continue with part 2'")]
    Send(crate::cmd::send::Args),
    /// Cancel a live child's current turn.
    #[command(
        after_help = "Example:\n  lineage interrupt 0193...child --as-user 0193...parent\n  lineage interrupt 0193...grandchild --as-ancestor 0193...root"
    )]
    Interrupt(crate::cmd::interrupt::Args),
    /// Show a subtree: session, shape, state, depth, node, owner, label, age.
    #[command(
        after_help = "Example:\n  lineage tree 0193...root\n  lineage tree 0193...root --json | jq ."
    )]
    Tree(crate::cmd::tree::Args),
    /// Show one session: state (in a turn or idle), shape, label, node, turns and how the last
    /// ended, usage, its last reply and reports.
    #[command(
        after_help = "Example:\n  lineage show 0193...\n  lineage show 0193... --json | jq .glance.last_reply"
    )]
    Show(crate::cmd::show::Args),
    /// Print a session's transcript from its event log: turns, replies, reports, settlement,
    /// children; -f follows it until the session is disposed.
    #[command(
        after_help = "Example:\n  lineage logs 0193...\n  lineage logs -f 0193...\n  lineage logs 0193... --json | jq -c 'select(.kind == \"turn/end\")'"
    )]
    Logs(crate::cmd::logs::Args),
    /// List and search sessions: by root, parent, state, node, label and age, paged, oldest
    /// first.
    #[command(
        after_help = "Example:\n  lineage ls --state running --node node-2\n  lineage ls --root 0193...root --label reviewer --older-than 10m\n  lineage ls --state disposed --limit 100 --after 1733000000123.0193...\n  lineage ls --all --json | jq '.sessions | length'"
    )]
    Ls(crate::cmd::ls::Args),
    /// Drain subtrees: close admission, stop descendants, dispose leaves first.
    ///
    /// While the drain runs, and when stderr is a terminal, a live bar per wave is drawn on
    /// stderr (`wave  3 [#########.......]  412/1000`; the current wave redrawn in place,
    /// finished waves kept), from the progress the serving node publishes on
    /// `lineage.<cluster>.drain.<id>.progress`. With `--json`, or when stderr is not a terminal,
    /// there are no live bars. When the drain returns, stdout gets one line per wave with its
    /// disposals per node and a summary (or, with `--json`, the whole report).
    #[command(after_help = "Example:\n  lineage drain 0193...root")]
    Drain(crate::cmd::drain::Args),
    /// Stream start/end/report/settled events of a parent's children.
    #[command(after_help = "Example:\n  lineage watch 0193...parent")]
    Watch(crate::cmd::watch::Args),
    /// The agent profiles each node offers: name, driver, tools, description.
    #[command(after_help = "Example:\n  lineage agents\n  lineage agents --json | jq .")]
    Agents,
    /// The stdio MCP server of a hosted agent: lineage's delegation tools, as its session.
    ///
    /// Started by an agent from the `mcpServers` of its ACP `session/new`, with the environment
    /// its hosting node gives it (LINEAGE_MCP_SOCKET, LINEAGE_MCP_SECRET); not for people.
    #[command(after_help = "Example (what a hosted agent's MCP entry runs):\n  lineage mcp")]
    Mcp,
    /// An ACP agent on stdio for an editor: each ACP session is a top-level lineage session of
    /// the profile, hosted in the cluster; descendants show as subagent sessions.
    ///
    /// Put it in an editor's agent settings as the command, e.g. Zed's `agent_servers`:
    /// `{"lineage": {"command": "lineage", "args": ["acp", "--profile", "claude"]}}`.
    #[command(
        after_help = "Example:\n  lineage acp --profile delegator --nats nats://127.0.0.1:4222"
    )]
    Acp(crate::acp::Args),
    /// An A2A gateway: each profile marked `a2a = true` is an A2A agent with its card; a task
    /// is a lineage session, its context the root (JSON-RPC, streaming over SSE).
    #[command(
        after_help = "Example:\n  LINEAGE_A2A_TOKEN=$(openssl rand -hex 16) lineage a2a --listen 127.0.0.1:8484\n  curl http://127.0.0.1:8484/agents/echo/.well-known/agent-card.json"
    )]
    A2a(crate::a2a::Args),
    /// The cluster in a browser: sessions, live trees, transcripts, nodes (serves on
    /// 127.0.0.1:7474 by default).
    #[command(
        after_help = "Example:\n  lineage ui                      # then open http://127.0.0.1:7474/\n  LINEAGE_UI_TOKEN=... lineage ui --listen 0.0.0.0:7474"
    )]
    Ui(crate::cmd::ui::Args),
    /// Cluster status: leader, voters, nodes with lease age, sessions by state.
    #[command(after_help = "Example:\n  lineage status --nats nats://127.0.0.1:4222")]
    Status,
    /// Configuration.
    #[command(subcommand)]
    Config(ConfigVerb),
    /// The scripted agent's language: its JSON Schema, or check a script.
    #[command(subcommand)]
    Script(crate::cmd::script::ScriptVerb),
    /// A session's files: its changes as a diff, its latest files, its changes applied.
    #[command(subcommand)]
    Workspace(crate::cmd::workspace::WorkspaceVerb),
    /// Documentation generated from the CLI: `lineage docs cli-reference > docs/cli.md`.
    #[command(subcommand, hide = true)]
    Docs(crate::cmd::docs::DocsVerb),
    /// Benchmarks (percentiles, throughput, and a raw NATS round-trip baseline): runs the lab
    /// program, `lineage-lab bench` (built with `cargo build --release -p lineage-lab`).
    #[command(
        disable_help_flag = true,
        after_help = "Example:\n  lineage bench registry\n  lineage bench --help   (the lab's own help)"
    )]
    Bench {
        /// The scenario and its flags, as `lineage-lab bench` takes them.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Fault harness: a cluster of its own under a seeded workload and fault schedule,
    /// checked (Porcupine and invariants); exits non-zero on a violation. Runs the lab
    /// program, `lineage-lab chaos`.
    #[command(
        disable_help_flag = true,
        after_help = "Example:\n  lineage chaos --seed 12 --duration 30m\n  lineage chaos --help   (the lab's own help)"
    )]
    Chaos {
        /// The harness's flags, as `lineage-lab chaos` takes them.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

/// `config` subcommands.
#[derive(Debug, Subcommand)]
pub enum ConfigVerb {
    /// Print the effective config with each value's source.
    #[command(
        after_help = "Example:\n  LINEAGE_LIMITS__MAX_DEPTH=4 lineage config show --config config/lineage.toml"
    )]
    Show {
        /// Config file.
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

/// The flags (`--nats`) whose value clap took from their environment variable (`NATS_URL`),
/// at any level of `matches`.
pub fn flags_from_env(matches: &clap::ArgMatches) -> std::collections::BTreeMap<String, String> {
    use clap::CommandFactory;
    let cmd = Cli::command();
    let mut out = std::collections::BTreeMap::new();
    let mut level = Some(matches);
    while let Some(current) = level {
        for id in current.ids() {
            if current.value_source(id.as_str()) != Some(clap::parser::ValueSource::EnvVariable) {
                continue;
            }
            let arg = cmd.get_arguments().find(|a| a.get_id() == id);
            if let Some((long, env)) = arg.and_then(|a| Some((a.get_long()?, a.get_env()?))) {
                out.insert(format!("--{long}"), env.to_string_lossy().into_owned());
            }
        }
        level = current.subcommand().map(|(_, sub)| sub);
    }
    out
}
