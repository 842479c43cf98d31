//! The flags every verb understands ([`Global`]) and what follows from them alone: the
//! cluster's name and subjects. The lowest room of the CLI: everything may use it, it uses
//! nothing of the CLI but [`crate::output`].

use clap::Args;
use lineage_bus::control::ControlError;
use lineage_bus::Subjects;

use crate::output::usage;

/// The default NATS URL when neither `--nats` nor `NATS_URL` is given.
pub const DEFAULT_NATS: &str = "nats://127.0.0.1:4222";
/// The default cluster name.
pub const DEFAULT_CLUSTER: &str = "dev";

/// Flags every verb understands.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Cluster and connection (every verb)")]
pub struct Global {
    /// NATS server URL [default: nats://127.0.0.1:4222, or the config's nats_url for `node`].
    #[arg(long = "nats", env = "NATS_URL", global = true)]
    pub nats: Option<String>,
    /// Cluster name, the second token of every subject [default: dev].
    #[arg(long, env = "LINEAGE_CLUSTER", global = true)]
    pub cluster: Option<String>,
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Flags whose value came from their environment variable (`--nats` -> `NATS_URL`), filled
    /// in by `main` from clap's matches ([`flags_from_env`]), so `config show` names a value's
    /// source truly.
    #[arg(skip)]
    pub from_env: std::collections::BTreeMap<String, String>,
    /// A connection to use instead of a new one per call ([`crate::client::connect`]): set by
    /// a long-running verb (`lineage ui`) once it has connected.
    #[arg(skip)]
    pub shared_nats: Option<async_nats::Client>,
    /// How long to wait for a reply, in milliseconds.
    #[arg(long, global = true, default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// natscli context to read the URL and credentials from (client verbs).
    #[arg(long, env = "NATS_CONTEXT", global = true)]
    pub context: Option<String>,
    /// NATS credentials file (user JWT + nkey seed).
    #[arg(long, env = "NATS_CREDS", global = true)]
    pub creds: Option<String>,
    /// File holding an nkey user seed.
    #[arg(long, env = "NATS_NKEY", global = true)]
    pub nkey: Option<String>,
    /// NATS user (with --password).
    #[arg(long, env = "NATS_USER", global = true)]
    pub user: Option<String>,
    /// NATS password (never printed; prefer NATS_PASSWORD or a context over the flag).
    #[arg(long, env = "NATS_PASSWORD", hide_env_values = true, global = true)]
    pub password: Option<String>,
    /// NATS token (never printed).
    #[arg(long, env = "NATS_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// PEM CA bundle that verifies the NATS server (implies TLS).
    #[arg(long, env = "NATS_CA", global = true)]
    pub tlsca: Option<String>,
    /// PEM client certificate (with --tlskey; implies TLS).
    #[arg(long, env = "NATS_CERT", global = true)]
    pub tlscert: Option<String>,
    /// PEM client key (with --tlscert).
    #[arg(long, env = "NATS_KEY", global = true)]
    pub tlskey: Option<String>,
    /// Refuse to connect without TLS.
    #[arg(long, global = true)]
    pub tls_required: bool,
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
