//! Node configuration (O1): defaults, then a TOML file, then `LINEAGE_` environment variables
//! (`__` separates nesting: `LINEAGE_NODE__ID=node-2`), then command-line flags.
//!
//! Validation happens before anything starts: an unknown key, a wrong type, a max depth that is
//! not a non-negative safe integer, or a voter set that is not 1, 3 or 5 stops start-up with
//! one line naming the key and where its value came from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Serialized, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use lineage_core::depth::MaxDepth;
use lineage_core::ids::NodeId;
use lineage_drivers::profiles::AgentProfiles;
use serde::{Deserialize, Serialize};

use crate::error::NodeError;

/// Whether this node votes in the registry's Raft group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegistryRole {
    /// A voter: stores the registry on disk and takes part in elections.
    Voter,
    /// A client: hosts agents and talks to the voters over NATS.
    Client,
}

/// The effective configuration of one node. `Debug` shows `nats_url` without its password.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// Cluster name: the second token of every subject (`lineage.<cluster>...`).
    pub cluster: String,
    /// NATS server URL.
    pub nats_url: String,
    /// This node.
    pub node: NodeSection,
    /// The registry.
    pub registry: RegistrySection,
    /// Delegation limits.
    pub limits: LimitsSection,
    /// Node leases.
    pub lease: LeaseSection,
    /// NATS credentials, TLS and streams (Z1, Z3).
    pub nats: NatsSection,
    /// Agent profiles (T4): `[agents]` and one `[agents.<name>]` table per profile.
    pub agents: AgentProfiles,
    /// How hosted agents reach lineage's delegation tools (T1).
    pub tools: ToolsSection,
    /// How long disposed sessions are kept (Q5).
    pub retention: RetentionSection,
    /// Graceful shutdown (K1).
    pub shutdown: ShutdownSection,
}

impl std::fmt::Debug for NodeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConfig")
            .field("cluster", &self.cluster)
            .field("nats_url", &lineage_bus::redact_url(&self.nats_url))
            .field("node", &self.node)
            .field("registry", &self.registry)
            .field("limits", &self.limits)
            .field("lease", &self.lease)
            .field("nats", &self.nats)
            .field("agents", &self.agents)
            .field("tools", &self.tools)
            .field("retention", &self.retention)
            .field("shutdown", &self.shutdown)
            .finish()
    }
}

/// `[nats]`: how the node authenticates to NATS, TLS, and the streams it creates.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsSection {
    /// Path of a NATS `.creds` file (user JWT + nkey seed).
    pub creds: String,
    /// Path of a file holding an nkey user seed.
    pub nkey_seed_file: String,
    /// User name (with `password` or `password_file`).
    pub user: String,
    /// Password (prefer `password_file`); never shown.
    pub password: String,
    /// Path of a file holding the password.
    pub password_file: String,
    /// Token (prefer `token_file`); never shown.
    pub token: String,
    /// Path of a file holding the token.
    pub token_file: String,
    /// Refuse to connect without TLS.
    pub tls_required: bool,
    /// PEM CA bundle that verifies the server.
    pub tls_ca: String,
    /// PEM client certificate (with `tls_key`).
    pub tls_cert: String,
    /// PEM client key (with `tls_cert`).
    pub tls_key: String,
    /// Replicas of the events and inbox streams: 1 or 3.
    pub stream_replicas: u8,
    /// An existing stream with fewer replicas is updated (true) or refused (false).
    pub update_streams: bool,
}

impl Default for NatsSection {
    fn default() -> Self {
        NatsSection {
            creds: String::new(),
            nkey_seed_file: String::new(),
            user: String::new(),
            password: String::new(),
            password_file: String::new(),
            token: String::new(),
            token_file: String::new(),
            tls_required: false,
            tls_ca: String::new(),
            tls_cert: String::new(),
            tls_key: String::new(),
            stream_replicas: 1,
            update_streams: false,
        }
    }
}

impl std::fmt::Debug for NatsSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = |s: &str| if s.is_empty() { "" } else { REDACTED };
        f.debug_struct("NatsSection")
            .field("creds", &self.creds)
            .field("nkey_seed_file", &self.nkey_seed_file)
            .field("user", &self.user)
            .field("password", &shown(&self.password))
            .field("password_file", &self.password_file)
            .field("token", &shown(&self.token))
            .field("token_file", &self.token_file)
            .field("tls_required", &self.tls_required)
            .field("tls_ca", &self.tls_ca)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .field("stream_replicas", &self.stream_replicas)
            .field("update_streams", &self.update_streams)
            .finish()
    }
}

/// What `config show` and logs print in place of a secret.
pub const REDACTED: &str = "<redacted>";

/// Keys whose values are secrets: shown as [`REDACTED`] when set.
pub const SECRET_KEYS: [&str; 2] = ["nats.password", "nats.token"];

/// `[node]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSection {
    /// Node id (letters, digits, `-`, `_`).
    pub id: String,
    /// Where the registry (voters) and local state live.
    pub data_dir: PathBuf,
    /// HTTP listen address for `/metrics`, `/healthz`, `/readyz`; empty disables it.
    pub http_addr: String,
}

/// `[registry]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistrySection {
    /// `voter` or `client`.
    pub role: RegistryRole,
    /// This node's Raft id (voters only; 1-based, unique).
    pub raft_id: u64,
    /// The voters: Raft id -> node id. Exactly 1, 3 or 5 entries.
    pub voters: BTreeMap<String, String>,
    /// Initialize the group if this node's data dir is new (set on exactly one voter).
    pub bootstrap: bool,
    /// Raft heartbeat interval.
    pub heartbeat_ms: u64,
    /// Raft election timeout, lower bound.
    pub election_min_ms: u64,
    /// Raft election timeout, upper bound.
    pub election_max_ms: u64,
}

/// `[limits]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    /// Default max delegation depth for trees started on this cluster (D4).
    pub max_depth: MaxDepth,
    /// Live children per parent (Q1); absent: no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_children: Option<u32>,
    /// Live descendants per tree, the root not counted (Q1); absent: no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_descendants: Option<u32>,
}

/// `[tools]`: how hosted agents reach lineage's delegation tools (T1). Every agent can start
/// the stdio bridge (`lineage mcp`, through the node's Unix socket); an agent that declares
/// `mcpCapabilities.http` is given this listener's URL instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsSection {
    /// Loopback address of the tools' streamable HTTP listener (port 0 picks one); empty
    /// disables it (every agent then gets the stdio bridge).
    pub http_addr: String,
}

/// `[retention]` (Q5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSection {
    /// How long a disposed session's registry record, event log and inbox are kept before the
    /// sweeper purges them (its id stays refused for ever); 0: kept for ever. Default: a day.
    pub disposed_after_ms: u64,
    /// How long the registry keeps an accepted command's result, so that a retry with the
    /// same request id gets the first result instead of being applied again (G2). From a
    /// minute to a day (the default, also the longest); older results are forgotten by the
    /// sweeper. A steady churn keeps this much of its results in every voter's memory.
    #[serde(default = "default_request_results_ms")]
    pub request_results_ms: u64,
}

fn default_request_results_ms() -> u64 {
    lineage_registry::state::REQUEST_RETENTION_MS
}

/// `[shutdown]` (K1): what a node does on SIGTERM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownSection {
    /// How long a stopping node lets the turns already running finish (it takes no new work
    /// meanwhile) before it hands its sessions off; a turn still running then is interrupted.
    /// 0: hand off at once. Default 30 s; at most [`MAX_GRACE_MS`]. Kubernetes: keep
    /// `terminationGracePeriodSeconds` above it.
    pub grace_ms: u64,
}

/// The longest `shutdown.grace_ms` (an hour): a longer one holds a rolling upgrade for hours.
pub const MAX_GRACE_MS: u64 = 3_600_000;

/// The default `shutdown.grace_ms`.
pub const DEFAULT_GRACE_MS: u64 = 30_000;

/// `[lease]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseSection {
    /// How long a node's lease lasts without a heartbeat.
    pub lease_ms: u64,
    /// How often a node renews its lease.
    pub heartbeat_ms: u64,
    /// How long after a node's lease expired its `running`/`waiting` sessions are taken over
    /// (resumed elsewhere, without waiting for a followup); 0: never.
    pub takeover_after_ms: u64,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            cluster: "dev".into(),
            nats_url: "nats://127.0.0.1:4222".into(),
            node: NodeSection {
                id: "node-1".into(),
                data_dir: PathBuf::from("./lineage-data/node-1"),
                http_addr: "127.0.0.1:9464".into(),
            },
            registry: RegistrySection {
                role: RegistryRole::Voter,
                raft_id: 1,
                voters: BTreeMap::from([("1".to_owned(), "node-1".to_owned())]),
                bootstrap: true,
                heartbeat_ms: 100,
                election_min_ms: 400,
                election_max_ms: 800,
            },
            limits: LimitsSection {
                max_depth: MaxDepth::from_u32(8),
                max_children: None,
                max_descendants: None,
            },
            lease: LeaseSection {
                lease_ms: 3000,
                heartbeat_ms: 500,
                takeover_after_ms: 30_000,
            },
            nats: NatsSection::default(),
            agents: AgentProfiles::default(),
            tools: ToolsSection {
                http_addr: "127.0.0.1:0".into(),
            },
            retention: RetentionSection {
                disposed_after_ms: lineage_core::retention::DEFAULT_DISPOSED_AFTER_MS,
                request_results_ms: default_request_results_ms(),
            },
            shutdown: ShutdownSection {
                grace_ms: DEFAULT_GRACE_MS,
            },
        }
    }
}

/// Overrides from command-line flags (highest precedence).
#[derive(Debug, Clone, Default)]
pub struct FlagOverrides {
    /// `--nats`.
    pub nats_url: Option<String>,
    /// `--cluster`.
    pub cluster: Option<String>,
    /// `[nats]` keys set by flags (`--creds`, `--user`, ...): (key under `nats.`, value, flag).
    pub nats: Vec<(&'static str, FlagValue, &'static str)>,
    /// Flags whose value came from their environment variable, not the command line: flag
    /// (`--nats`) -> variable (`NATS_URL`), so a value's source is named truly.
    pub from_env: BTreeMap<String, String>,
}

impl FlagOverrides {
    /// How a value set through `flag` is labelled: `NATS_URL environment variable` when it
    /// came from the flag's variable, else `--nats flag`.
    fn label(&self, flag: &str) -> String {
        match self.from_env.get(flag) {
            Some(var) => format!("{var} environment variable"),
            None => format!("{flag} flag"),
        }
    }
}

/// A flag's value.
#[derive(Debug, Clone)]
pub enum FlagValue {
    /// A string.
    Str(String),
    /// A switch.
    Bool(bool),
}

/// The merged sources, kept so `lineage config show` can say where each value came from.
pub struct LoadedConfig {
    /// The validated config.
    pub config: NodeConfig,
    figment: Figment,
}

impl LoadedConfig {
    /// Each leaf key with its value and the source it came from, in key order.
    pub fn with_sources(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        let dict = match Serialized::defaults(&self.config).data() {
            Ok(mut profiles) => profiles
                .remove(&figment::Profile::Default)
                .unwrap_or_default(),
            Err(_) => Dict::new(),
        };
        flatten("", &dict, &mut out);
        out.into_iter()
            .map(|(key, value)| {
                let source = describe(self.figment.find_metadata(&key));
                (key, value, source)
            })
            .collect()
    }
}

fn flatten(prefix: &str, dict: &Dict, out: &mut Vec<(String, String)>) {
    for (k, v) in dict {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Value::Dict(_, inner) if !key.ends_with("voters") && !key.ends_with(".env") => {
                flatten(&key, inner, out)
            }
            Value::String(_, s) if SECRET_KEYS.contains(&key.as_str()) && !s.is_empty() => {
                out.push((key, REDACTED.to_owned()))
            }
            Value::String(_, s) if key == "nats_url" => {
                out.push((key, format!("{:?}", lineage_bus::redact_url(s))))
            }
            other => out.push((key, value_text(other))),
        }
    }
}

fn value_text(v: &Value) -> String {
    match v {
        Value::String(_, s) => format!("{s:?}"),
        Value::Char(_, c) => format!("{c:?}"),
        Value::Bool(_, b) => b.to_string(),
        Value::Num(_, n) => n
            .to_u128()
            .map(|u| u.to_string())
            .or_else(|| n.to_i128().map(|i| i.to_string()))
            .or_else(|| n.to_f64().map(|f| f.to_string()))
            .unwrap_or_else(|| format!("{n:?}")),
        Value::Empty(_, _) => "none".into(),
        Value::Dict(_, d) => {
            let inner: Vec<String> = d
                .iter()
                .map(|(k, v)| format!("{k} = {}", value_text(v)))
                .collect();
            format!("{{ {} }}", inner.join(", "))
        }
        Value::Array(_, items) => {
            let inner: Vec<String> = items.iter().map(value_text).collect();
            format!("[{}]", inner.join(", "))
        }
    }
}

/// One value set by a command-line flag (top level, or under a table), named after the flag
/// for `config show`.
struct Flag {
    table: Option<&'static str>,
    key: &'static str,
    value: Value,
    name: String,
}

impl Flag {
    fn new(key: &'static str, value: &str, name: String) -> Self {
        Flag {
            table: None,
            key,
            value: Value::from(value.to_owned()),
            name,
        }
    }
}

impl Provider for Flag {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.name.clone())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let mut dict = Dict::new();
        dict.insert(self.key.to_owned(), self.value.clone());
        let dict = match self.table {
            None => dict,
            Some(table) => Dict::from([(table.to_owned(), Value::from(dict))]),
        };
        Ok(Profile::Default.collect(dict))
    }
}

/// The top-level config keys; `LINEAGE_*` variables outside them (say `LINEAGE_TEST_THREADS`
/// of the test script) are someone else's and are not read as config.
pub const TOP_LEVEL_KEYS: [&str; 11] = [
    "cluster",
    "nats_url",
    "node",
    "registry",
    "limits",
    "lease",
    "nats",
    "agents",
    "tools",
    "retention",
    "shutdown",
];

/// `LINEAGE_` environment variables, `__` for nesting, restricted to [`TOP_LEVEL_KEYS`].
pub fn lineage_env() -> Env {
    Env::prefixed("LINEAGE_").split("__").filter(|key| {
        let key = key.as_str().to_ascii_lowercase();
        let first = key.split(['.']).next().unwrap_or("");
        let first = first.split("__").next().unwrap_or("");
        TOP_LEVEL_KEYS.contains(&first)
    })
}

/// Loads the config: defaults, then `file` (if given; it must exist), then `LINEAGE_` env, then
/// flags; then validates it.
pub fn load(file: Option<&Path>, flags: &FlagOverrides) -> Result<LoadedConfig, NodeError> {
    load_with_env(file, flags, lineage_env())
}

/// [`load`] with an explicit environment provider (tests use `Env::prefixed` over a jail).
pub fn load_with_env(
    file: Option<&Path>,
    flags: &FlagOverrides,
    env: Env,
) -> Result<LoadedConfig, NodeError> {
    let mut figment = Figment::from(Serialized::defaults(NodeConfig::default()));
    if let Some(path) = file {
        if !path.is_file() {
            return Err(NodeError::Config(format!(
                "config file {} does not exist; pass an existing file to --config",
                path.display()
            )));
        }
        figment = figment.merge(Toml::file(path));
    }
    figment = figment.merge(env);
    if let Some(url) = &flags.nats_url {
        figment = figment.merge(Flag::new("nats_url", url, flags.label("--nats")));
    }
    if let Some(cluster) = &flags.cluster {
        figment = figment.merge(Flag::new("cluster", cluster, flags.label("--cluster")));
    }
    for (key, value, name) in &flags.nats {
        let value = match value {
            FlagValue::Str(s) => Value::from(s.clone()),
            FlagValue::Bool(b) => Value::from(*b),
        };
        figment = figment.merge(Flag {
            table: Some("nats"),
            key,
            value,
            name: flags.label(name),
        });
    }
    let config: NodeConfig = figment.extract().map_err(|e| config_error(&figment, e))?;
    validate(&config, &figment)?;
    Ok(LoadedConfig { config, figment })
}

fn config_error(figment: &Figment, e: figment::Error) -> NodeError {
    let mut lines = Vec::new();
    for err in e {
        let key = if err.path.is_empty() {
            String::new()
        } else {
            err.path.join(".")
        };
        let source = describe(
            err.metadata
                .as_ref()
                .or_else(|| figment.find_metadata(&key)),
        );
        let what = err.kind.to_string();
        if key.is_empty() {
            lines.push(format!("invalid config: {what} (from {source})"));
        } else {
            lines.push(format!("invalid config key {key}: {what} (from {source})"));
        }
    }
    NodeError::Config(lines.join("; "))
}

fn source_of(figment: &Figment, key: &str) -> String {
    describe(figment.find_metadata(key))
}

/// Names a value's source for humans: `default`, `TOML file (path)`, `` `LINEAGE_` environment
/// variable(s) ``, `--nats flag`.
fn describe(metadata: Option<&Metadata>) -> String {
    match metadata {
        None => "default".into(),
        Some(m) if m.name.contains("NodeConfig") => "default".into(),
        Some(m) => match &m.source {
            Some(src) => format!("{} ({src})", m.name),
            None => m.name.to_string(),
        },
    }
}

fn validate(config: &NodeConfig, figment: &Figment) -> Result<(), NodeError> {
    let fail = |key: &str, what: String| {
        Err(NodeError::Config(format!(
            "invalid config key {key}: {what} (from {})",
            source_of(figment, key)
        )))
    };
    if let Err(e) = lineage_bus::Subjects::new(&config.cluster) {
        return fail("cluster", e.to_string());
    }
    if let Err(e) = NodeId::parse(&config.node.id) {
        return fail("node.id", e.to_string());
    }
    let voters = config.registry.voters.len();
    if ![1, 3, 5].contains(&voters) {
        return fail(
            "registry.voters",
            format!("{voters} voters given; a registry needs 1, 3 or 5 voters"),
        );
    }
    for (raft_id, node) in &config.registry.voters {
        match raft_id.parse::<u64>() {
            Ok(id) if id >= 1 => {}
            _ => {
                return fail(
                    "registry.voters",
                    format!("raft id {raft_id:?} is not a positive integer"),
                )
            }
        }
        if let Err(e) = NodeId::parse(node) {
            return fail("registry.voters", e.to_string());
        }
    }
    if config.registry.role == RegistryRole::Voter
        && !config
            .registry
            .voters
            .contains_key(&config.registry.raft_id.to_string())
    {
        return fail(
            "registry.raft_id",
            format!(
                "this node is a voter with raft id {} but registry.voters does not list it",
                config.registry.raft_id
            ),
        );
    }
    if config.registry.election_min_ms >= config.registry.election_max_ms
        || config.registry.heartbeat_ms >= config.registry.election_min_ms
    {
        return fail(
            "registry.election_min_ms",
            "need heartbeat_ms < election_min_ms < election_max_ms".into(),
        );
    }
    if config.lease.heartbeat_ms == 0 || config.lease.heartbeat_ms >= config.lease.lease_ms {
        return fail(
            "lease.heartbeat_ms",
            "need 0 < lease.heartbeat_ms < lease.lease_ms".into(),
        );
    }
    // Shape only here (`config show` runs where the secret files may not be mounted); the
    // files are read when the node connects.
    if let Err((key, what)) = config.nats.connect_parts(false) {
        return fail(&key, what);
    }
    if ![1, 3].contains(&config.nats.stream_replicas) {
        return fail(
            "nats.stream_replicas",
            format!(
                "{} replicas; the streams take 1 (one server) or 3 (a NATS cluster)",
                config.nats.stream_replicas
            ),
        );
    }
    if let Err((key, what)) = config.agents.validate() {
        return fail(&key, what);
    }
    let results = config.retention.request_results_ms;
    let (shortest, longest) = (
        lineage_registry::state::MIN_RESULTS_KEPT_MS,
        lineage_registry::state::REQUEST_RETENTION_MS,
    );
    if !(shortest..=longest).contains(&results) {
        return fail(
            "retention.request_results_ms",
            format!(
                "{results} ms is outside {shortest}..={longest} (a minute to a day): a client retries a write with its request id within its deadline, and the registry keeps results a day at most"
            ),
        );
    }
    if config.shutdown.grace_ms > MAX_GRACE_MS {
        return fail(
            "shutdown.grace_ms",
            format!(
                "{} ms is more than an hour; give at most {MAX_GRACE_MS} (0 hands sessions off at once)",
                config.shutdown.grace_ms
            ),
        );
    }
    if let Some(addr) = config.tools.listen() {
        match addr {
            Ok(addr) if addr.ip().is_loopback() => {}
            Ok(addr) => {
                return fail(
                    "tools.http_addr",
                    format!("{addr} is not a loopback address; the tools' secrets travel in clear text, so use 127.0.0.1:PORT (0 picks one) or \"\" to disable"),
                )
            }
            Err(e) => {
                return fail(
                    "tools.http_addr",
                    format!("{e}; give an address like 127.0.0.1:0 or \"\" to disable"),
                )
            }
        }
    }
    Ok(())
}

impl ToolsSection {
    /// The HTTP listener's address: `None` when disabled (empty), else parsed.
    pub fn listen(&self) -> Option<Result<std::net::SocketAddr, String>> {
        let addr = self.http_addr.trim();
        (!addr.is_empty()).then(|| {
            addr.parse::<std::net::SocketAddr>()
                .map_err(|e| format!("{addr:?} is not an address (ip:port): {e}"))
        })
    }
}

impl NatsSection {
    /// The authentication and TLS these keys describe, or the key that is half-configured
    /// (user without a password, a password without a user, two kinds of credentials, a client
    /// certificate without its key, with `read`: a file that cannot be read) and why. With
    /// `read`, secret files are read (their contents never appear in an error); without, only
    /// the shape is checked and file-based secrets come back empty.
    pub fn connect_parts(
        &self,
        read_files: bool,
    ) -> Result<(lineage_bus::NatsAuth, lineage_bus::NatsTls), (String, String)> {
        use lineage_bus::{NatsAuth, NatsTls};
        let key = |k: &str| format!("nats.{k}");
        let read = |k: &str, path: &str| -> Result<String, (String, String)> {
            if !read_files {
                return Ok(String::new());
            }
            std::fs::read_to_string(path)
                .map(|s| s.trim().to_owned())
                .map_err(|e| {
                    (
                        key(k),
                        format!("cannot read {path}: {e}; give a readable file"),
                    )
                })
        };
        let exists = |k: &str, path: &str| -> Result<PathBuf, (String, String)> {
            let p = PathBuf::from(path);
            if !read_files || p.is_file() {
                Ok(p)
            } else {
                Err((
                    key(k),
                    format!("{path} is not a readable file; give the path of an existing file"),
                ))
            }
        };
        let kinds: Vec<&str> = [
            ("creds", !self.creds.is_empty()),
            ("nkey_seed_file", !self.nkey_seed_file.is_empty()),
            ("user", !self.user.is_empty()),
            (
                "token",
                !self.token.is_empty() || !self.token_file.is_empty(),
            ),
        ]
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(k, _)| k)
        .collect();
        if kinds.len() > 1 {
            return Err((
                key(kinds[1]),
                format!(
                    "both {} and {} are set; give one kind of NATS credentials",
                    key(kinds[0]),
                    key(kinds[1])
                ),
            ));
        }
        let has_password = !self.password.is_empty() || !self.password_file.is_empty();
        if !self.password.is_empty() && !self.password_file.is_empty() {
            return Err((
                key("password_file"),
                "both nats.password and nats.password_file are set; give one".into(),
            ));
        }
        if !self.token.is_empty() && !self.token_file.is_empty() {
            return Err((
                key("token_file"),
                "both nats.token and nats.token_file are set; give one".into(),
            ));
        }
        if has_password && self.user.is_empty() {
            return Err((
                key("user"),
                "a password is set but no user; set nats.user too".into(),
            ));
        }
        let auth = if !self.creds.is_empty() {
            NatsAuth::Creds(exists("creds", &self.creds)?)
        } else if !self.nkey_seed_file.is_empty() {
            NatsAuth::Nkey {
                seed: read("nkey_seed_file", &self.nkey_seed_file)?,
            }
        } else if !self.user.is_empty() {
            let password = if !self.password_file.is_empty() {
                read("password_file", &self.password_file)?
            } else if !self.password.is_empty() {
                self.password.clone()
            } else {
                return Err((
                    key("password"),
                    format!(
                        "user {:?} has no password; set nats.password_file (or nats.password)",
                        self.user
                    ),
                ));
            };
            NatsAuth::UserPassword {
                user: self.user.clone(),
                password,
            }
        } else if !self.token_file.is_empty() {
            NatsAuth::Token(read("token_file", &self.token_file)?)
        } else if !self.token.is_empty() {
            NatsAuth::Token(self.token.clone())
        } else {
            NatsAuth::None
        };
        let client = match (self.tls_cert.is_empty(), self.tls_key.is_empty()) {
            (true, true) => None,
            (false, false) => Some((
                exists("tls_cert", &self.tls_cert)?,
                exists("tls_key", &self.tls_key)?,
            )),
            (false, true) => {
                return Err((
                    key("tls_key"),
                    "nats.tls_cert is set without its key; set nats.tls_key too".into(),
                ))
            }
            (true, false) => {
                return Err((
                    key("tls_cert"),
                    "nats.tls_key is set without its certificate; set nats.tls_cert too".into(),
                ))
            }
        };
        let ca = if self.tls_ca.is_empty() {
            None
        } else {
            Some(exists("tls_ca", &self.tls_ca)?)
        };
        let tls = NatsTls {
            required: self.tls_required || ca.is_some() || client.is_some(),
            ca,
            client,
        };
        Ok((auth, tls))
    }
}

impl NodeConfig {
    /// How this node connects to NATS (validated at load, so a failure here names the key).
    pub fn nats_connect(&self, name: &str) -> Result<lineage_bus::NatsConnect, NodeError> {
        let (auth, tls) = self.nats.connect_parts(true).map_err(|(key, what)| {
            NodeError::Config(format!("invalid config key {key}: {what}"))
        })?;
        Ok(lineage_bus::NatsConnect {
            url: self.nats_url.clone(),
            name: name.to_owned(),
            auth,
            tls,
        })
    }

    /// The validated node id.
    pub fn node_id(&self) -> Result<NodeId, NodeError> {
        NodeId::parse(&self.node.id).map_err(|e| NodeError::Config(e.to_string()))
    }

    /// The voters as (raft id, node id), validated.
    pub fn voter_map(&self) -> Result<BTreeMap<u64, NodeId>, NodeError> {
        self.registry
            .voters
            .iter()
            .map(|(k, v)| {
                let id = k.parse::<u64>().map_err(|_| {
                    NodeError::Config(format!("invalid config key registry.voters: raft id {k:?}"))
                })?;
                Ok((
                    id,
                    NodeId::parse(v).map_err(|e| NodeError::Config(e.to_string()))?,
                ))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_toml(text: &str) -> Result<LoadedConfig, NodeError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lineage.toml");
        std::fs::write(&path, text).unwrap();
        load_with_env(
            Some(&path),
            &FlagOverrides::default(),
            Env::prefixed("LINEAGE_TEST_NEVER_SET_").split("__"),
        )
    }

    #[test]
    fn o1_defaults_are_valid() {
        let c = load_toml("").unwrap().config;
        assert_eq!(c, NodeConfig::default());
        assert_eq!(c.limits.max_depth.get(), 8);
    }

    #[test]
    fn o1_file_overrides_defaults_and_flags_override_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.toml");
        std::fs::write(
            &path,
            "cluster = \"prod\"\nnats_url = \"nats://a:1\"\n[limits]\nmax_depth = 3\n",
        )
        .unwrap();
        let flags = FlagOverrides {
            nats_url: Some("nats://b:2".into()),
            cluster: None,
            nats: vec![],
            from_env: Default::default(),
        };
        let loaded = load_with_env(
            Some(&path),
            &flags,
            Env::prefixed("LINEAGE_TEST_NEVER_SET_"),
        )
        .unwrap();
        assert_eq!(loaded.config.cluster, "prod");
        assert_eq!(loaded.config.nats_url, "nats://b:2");
        assert_eq!(loaded.config.limits.max_depth.get(), 3);
        let sources = loaded.with_sources();
        let src = |k: &str| {
            sources
                .iter()
                .find(|(key, _, _)| key == k)
                .map(|(_, _, s)| s.clone())
                .unwrap()
        };
        assert!(src("cluster").contains("TOML"), "{}", src("cluster"));
        assert!(src("nats_url").contains("--nats"), "{}", src("nats_url"));
        assert!(
            src("lease.lease_ms").contains("default")
                || src("lease.lease_ms").contains("Serialized"),
            "{}",
            src("lease.lease_ms")
        );
    }

    #[test]
    fn d4_o1_invalid_config_names_key_and_source() {
        let cases = [
            ("[limits]\nmax_depth = -1\n", "limits.max_depth"),
            ("[tools]\nhttp_addr = \"0.0.0.0:0\"\n", "tools.http_addr"),
            ("[limits]\nmax_children = -1\n", "limits.max_children"),
            (
                "[limits]\nmax_descendants = \"many\"\n",
                "limits.max_descendants",
            ),
            ("[tools]\nhttp_addr = \"localhost\"\n", "tools.http_addr"),
            ("[limits]\nmax_depth = 1.5\n", "limits.max_depth"),
            ("[limits]\nmax_depth = \"3\"\n", "limits.max_depth"),
            ("bogus = 1\n", "bogus"),
            ("[lease]\nlease_ms = \"soon\"\n", "lease.lease_ms"),
            (
                "[retention]\ndisposed_after_ms = -1\n",
                "retention.disposed_after_ms",
            ),
            ("[retention]\nkeep = 1\n", "retention.keep"),
            (
                "[retention]\nrequest_results_ms = 59999\n",
                "retention.request_results_ms",
            ),
            (
                "[retention]\nrequest_results_ms = 86400001\n",
                "retention.request_results_ms",
            ),
            ("[shutdown]\ngrace_ms = -5\n", "shutdown.grace_ms"),
            ("[shutdown]\ngrace_ms = \"30s\"\n", "shutdown.grace_ms"),
            ("[shutdown]\ngrace_ms = 3600001\n", "shutdown.grace_ms"),
            ("[shutdown]\ngrace = 1\n", "shutdown.grace"),
            (
                "[registry]\nvoters = { 1 = \"node-1\", 2 = \"node-2\" }\n",
                "registry.voters",
            ),
            ("cluster = \"a.b\"\n", "cluster"),
            ("[node]\nid = \"bad id\"\n", "node.id"),
        ];
        for (text, key) in cases {
            let err = match load_toml(text) {
                Ok(_) => panic!("accepted {text:?}"),
                Err(e) => e.to_string(),
            };
            assert!(err.contains(key), "{text:?}: {err}");
            assert!(
                err.contains("TOML") || err.contains("lineage.toml"),
                "{text:?}: {err}"
            );
            assert!(!err.contains('\n'), "one line: {err}");
        }
    }

    #[test]
    fn o1_env_overrides_file_and_names_itself_in_errors() {
        std::env::set_var("LINEAGE_T1_LEASE__LEASE_MS", "9000");
        std::env::set_var("LINEAGE_T1_NODE__ID", "node-7");
        let loaded = load_with_env(
            None,
            &FlagOverrides::default(),
            Env::prefixed("LINEAGE_T1_").split("__"),
        )
        .unwrap();
        assert_eq!(loaded.config.lease.lease_ms, 9000);
        assert_eq!(loaded.config.node.id, "node-7");
        let sources = loaded.with_sources();
        let (_, _, src) = sources.iter().find(|(k, _, _)| k == "node.id").unwrap();
        assert!(src.contains("environment"), "{src}");

        std::env::set_var("LINEAGE_T2_LIMITS__MAX_DEPTH", "-1");
        let err = load_with_env(
            None,
            &FlagOverrides::default(),
            Env::prefixed("LINEAGE_T2_").split("__"),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(
            err.contains("limits.max_depth") && err.contains("environment"),
            "{err}"
        );
    }

    #[test]
    fn z1_secrets_are_redacted_and_half_configured_auth_is_refused() {
        let loaded = load_toml(
            "nats_url = \"nats://u:urlpass@h:4222\"\n[nats]\nuser = \"voter\"\npassword = \"hunter22\"\n",
        )
        .unwrap();
        let shown = format!("{:?} {:?}", loaded.with_sources(), loaded.config);
        assert!(
            !shown.contains("hunter22") && !shown.contains("urlpass"),
            "{shown}"
        );
        assert!(shown.contains("<redacted>"), "{shown}");
        let cases = [
            ("[nats]\nuser = \"voter\"\n", "nats.password"),
            ("[nats]\npassword = \"p\"\n", "nats.user"),
            ("[nats]\ntls_cert = \"/c.pem\"\n", "nats.tls_key"),
            ("[nats]\ntls_key = \"/k.pem\"\n", "nats.tls_cert"),
            (
                "[nats]\ncreds = \"/a.creds\"\ntoken = \"t\"\n",
                "nats.token",
            ),
            ("[nats]\nstream_replicas = 2\n", "nats.stream_replicas"),
            (
                "[agents.claude]\ndriver = \"acp\"\n",
                "agents.claude.command",
            ),
            ("[agents.x]\ndriver = \"ssh\"\n", "agents"),
        ];
        for (text, key) in cases {
            let err = match load_toml(text) {
                Ok(_) => panic!("accepted {text:?}"),
                Err(e) => e.to_string(),
            };
            assert!(err.contains(key), "{text:?}: {err}");
            assert!(!err.contains('\n'), "one line: {err}");
        }
        // Files are read when the node connects: a missing one names its key.
        let loaded =
            load_toml("[nats]\nuser = \"u\"\npassword_file = \"/nonexistent/pw\"\n").unwrap();
        let err = loaded.config.nats_connect("t").unwrap_err().to_string();
        assert!(
            err.contains("nats.password_file") && err.contains("/nonexistent/pw"),
            "{err}"
        );
    }

    #[test]
    fn k1_shutdown_grace_defaults_and_comes_from_the_environment() {
        assert_eq!(
            load_toml("").unwrap().config.shutdown.grace_ms,
            DEFAULT_GRACE_MS
        );
        std::env::set_var("LINEAGE_T2_SHUTDOWN__GRACE_MS", "4500");
        let loaded = load_with_env(
            None,
            &FlagOverrides::default(),
            Env::prefixed("LINEAGE_T2_").split("__"),
        )
        .unwrap();
        assert_eq!(loaded.config.shutdown.grace_ms, 4500);
        // The node's own filter lets `LINEAGE_SHUTDOWN__GRACE_MS` through.
        assert!(TOP_LEVEL_KEYS.contains(&"shutdown"));
        std::env::set_var("LINEAGE_T3_SHUTDOWN__GRACE_MS", "soon");
        let err = load_with_env(
            None,
            &FlagOverrides::default(),
            Env::prefixed("LINEAGE_T3_").split("__"),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(err.contains("shutdown.grace_ms"), "{err}");
        assert!(!err.contains('\n'), "one line: {err}");
    }

    #[test]
    fn o1_foreign_lineage_env_vars_are_not_config() {
        std::env::set_var("LINEAGE_TEST_THREADS", "2");
        assert!(load(None, &FlagOverrides::default()).is_ok());
    }

    #[test]
    fn o1_missing_config_file_is_a_clear_error() {
        let err = load(
            Some(Path::new("/nonexistent/lineage.toml")),
            &FlagOverrides::default(),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(err.contains("does not exist"), "{err}");
    }
}
