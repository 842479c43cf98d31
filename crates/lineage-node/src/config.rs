//! Node configuration (O1): defaults, then a TOML file, then `LINEAGE_` environment variables
//! (`__` separates nesting: `LINEAGE_NODE__ID=node-2`), then command-line flags.
//!
//! Validation happens before anything starts: an unknown key, a wrong type, a max depth that is
//! not a non-negative safe integer, or a voter set that is not 1, 3 or 5 stops start-up with
//! one line naming the key and where its value came from.
//!
//! | file | what |
//! |---|---|
//! | `config.rs` | the sections and their defaults, what a loaded config answers (node id, voters, NATS connect) |
//! | `config/load.rs` | the sources merged with figment (file, `LINEAGE_` variables, flags), each value's source |
//! | `config/validate.rs` | the rules checked before anything starts; the NATS keys' auth and TLS |
//! | `config/direct.rs` | `[registry.direct]`: the voters' direct Raft links, their rules and token |
//! | `config/explain.rs` | errors in the operator's words: the variable's name, the TOML line, values without Rust types |
//! | `config/tests.rs` | every source, every bad key |

use std::collections::BTreeMap;
use std::path::PathBuf;

use lineage_core::depth::MaxDepth;
use lineage_core::ids::NodeId;
use lineage_drivers::profiles::AgentProfiles;
use serde::{Deserialize, Serialize};

use crate::error::NodeError;

mod direct;
pub use direct::DirectSection;
mod explain;
pub use explain::plain as plain_expectation;
mod load;
#[cfg(test)]
mod tests;
mod validate;

pub use load::{
    lineage_env, load, load_with_env, FlagOverrides, FlagValue, LoadedConfig, TOP_LEVEL_KEYS,
};

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
pub const SECRET_KEYS: [&str; 3] = ["nats.password", "nats.token", "registry.direct.token"];

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
    /// A voter builds a snapshot after at least this many applied commands since its last one
    /// (more for a large state: a quarter of its records); absent: 20,000. Fewer means faster
    /// restarts and catch-ups, more means less snapshot work (G3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_after_commands: Option<u64>,
    /// Log entries a voter keeps behind its last snapshot, so a follower that lags a little
    /// catches up from the log instead of a whole snapshot; absent: 1,000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_kept_behind_snapshot: Option<u64>,
    /// Direct Raft links between the voters (`[registry.direct]`); absent: Raft goes over NATS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direct: Option<DirectSection>,
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
    /// How long a top-level session may stay idle (no turn, nothing arriving, no descendant
    /// starting or running) before its tree is drained with stop reason `idle`, in ms, when its
    /// spawn gives no `--idle-ttl`; absent: roots stay until drained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_root_ms: Option<u64>,
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
                snapshot_after_commands: None,
                log_kept_behind_snapshot: None,
                direct: None,
            },
            limits: LimitsSection {
                max_depth: MaxDepth::from_u32(8),
                max_children: None,
                max_descendants: None,
                idle_root_ms: None,
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
