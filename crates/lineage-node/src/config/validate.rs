//! Validation before anything starts: each rule a one-line error naming the key and where
//! its value came from; the NATS keys' auth and TLS ([`NatsSection::connect_parts`]).

use std::path::PathBuf;

use figment::Figment;
use lineage_core::ids::NodeId;

use crate::error::NodeError;

use super::load::source_of;
use super::{NatsSection, NodeConfig, RegistryRole, MAX_GRACE_MS};

pub(super) fn validate(config: &NodeConfig, figment: &Figment) -> Result<(), NodeError> {
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
    if let Some(ms) = config.limits.idle_root_ms {
        if let Err(e) = lineage_core::idle::IdleTtl::named("limits.idle_root_ms", ms) {
            let reason = match e {
                lineage_core::CoreError::InvalidPayload { reason, .. } => reason,
                other => other.to_string(),
            };
            let reason = reason.replace(
                ", or leave it out to use the node's limits.idle_root_ms",
                ", or leave it out: roots stay until drained",
            );
            return fail("limits.idle_root_ms", reason);
        }
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
    if config.registry.snapshot_after_commands == Some(0) {
        return fail(
            "registry.snapshot_after_commands",
            "must be at least 1 (leave it out for the default, 20000)".into(),
        );
    }
    if let Err((key, what)) = super::direct::check(config) {
        return fail(key, what);
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
