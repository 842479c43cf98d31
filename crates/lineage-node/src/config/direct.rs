//! `[registry.direct]`: the voters' direct Raft links (issue 35). The Raft RPCs go voter to
//! voter over TCP instead of through nats-server; each link proves a shared token (HMAC over
//! nonces, never the token itself). Everything else (clients' writes, reads, lifecycle) stays
//! on NATS.
//!
//! ```toml
//! [registry.direct]
//! listen = "0.0.0.0:7101"
//! peers = { 1 = "lineage-0.lineage-raft:7101", 2 = "lineage-1.lineage-raft:7101", 3 = "lineage-2.lineage-raft:7101" }
//! token_file = "/etc/lineage/raft-token"
//! # optional, all three or none: mutual TLS on the links
//! tls_ca = "/etc/lineage/raft/ca.pem"
//! tls_cert = "/etc/lineage/raft/voter.pem"
//! tls_key = "/etc/lineage/raft/voter-key.pem"
//! ```
//!
//! With `tls_ca`, `tls_cert` and `tls_key` the links are mutual TLS as well (etcd's peer TLS);
//! without, they authenticate but do not encrypt, and a node that uses TLS for NATS refuses
//! them (its Raft traffic would otherwise leave TLS).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use lineage_registry::{DirectRaft, LinkTls, RaftToken};
use serde::{Deserialize, Serialize};

use super::{NodeConfig, RegistryRole, REDACTED};
use crate::error::NodeError;

/// `[registry.direct]`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectSection {
    /// Where this voter listens for the other voters' links (`ip:port`).
    pub listen: String,
    /// Where each voter listens (`host:port`), by raft id; every other voter must be named.
    pub peers: BTreeMap<String, String>,
    /// The group's shared secret (prefer `token_file`); never shown.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
    /// A file holding the group's shared secret (one line).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token_file: String,
    /// PEM CA that signs every voter's link certificate (mutual TLS, with `tls_cert` and
    /// `tls_key`; all three or none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tls_ca: String,
    /// PEM certificate of this voter for its links: presented when dialed and when dialing
    /// (`serverAuth` and `clientAuth`; its host name or IP as the others dial it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tls_cert: String,
    /// PEM key of `tls_cert`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tls_key: String,
}

impl std::fmt::Debug for DirectSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectSection")
            .field("listen", &self.listen)
            .field("peers", &self.peers)
            .field("token", &if self.token.is_empty() { "" } else { REDACTED })
            .field("token_file", &self.token_file)
            .field("tls_ca", &self.tls_ca)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .finish()
    }
}

/// The rules of `[registry.direct]` (shape only: the token file is read at start): the key at
/// fault and why, in one line.
pub(super) fn check(config: &NodeConfig) -> Result<(), (&'static str, String)> {
    let Some(d) = &config.registry.direct else {
        return Ok(());
    };
    if config.registry.role != RegistryRole::Voter {
        return Err((
            "registry.direct",
            "direct Raft links are for voters and this node is a client; remove [registry.direct]"
                .into(),
        ));
    }
    let tls_url = config
        .nats_url
        .split(',')
        .any(|u| u.trim().starts_with("tls://"));
    let tls = [&d.tls_ca, &d.tls_cert, &d.tls_key].map(|f| !f.is_empty());
    if tls.contains(&true) && tls.contains(&false) {
        let missing = [
            "registry.direct.tls_ca",
            "registry.direct.tls_cert",
            "registry.direct.tls_key",
        ]
        .into_iter()
        .zip(tls)
        .find(|(_, set)| !set)
        .map_or("registry.direct.tls_ca", |(k, _)| k);
        return Err((
            missing,
            format!("mutual TLS on the links needs registry.direct.tls_ca, tls_cert and tls_key; {missing} is not set"),
        ));
    }
    let nats_tls = tls_url
        || config.nats.tls_required
        || !config.nats.tls_ca.is_empty()
        || !config.nats.tls_cert.is_empty();
    if nats_tls && !tls.contains(&true) {
        return Err((
            "registry.direct",
            "this node uses TLS for NATS and its direct Raft links would not be encrypted; set registry.direct.tls_ca, tls_cert and tls_key (mutual TLS), or remove [registry.direct] so Raft stays on NATS, under TLS".into(),
        ));
    }
    if let Err(e) = d.listen.parse::<SocketAddr>() {
        return Err((
            "registry.direct.listen",
            format!("{:?} is not an address (ip:port): {e}", d.listen),
        ));
    }
    match (d.token.is_empty(), d.token_file.is_empty()) {
        (true, true) => {
            return Err((
                "registry.direct.token_file",
                "direct Raft links need the group's shared token; set registry.direct.token_file (or token) on every voter".into(),
            ))
        }
        (false, false) => {
            return Err((
                "registry.direct.token_file",
                "both registry.direct.token and registry.direct.token_file are set; give one".into(),
            ))
        }
        (false, true) => {
            if let Err(e) = RaftToken::new(d.token.as_bytes()) {
                return Err(("registry.direct.token", e.to_string()));
            }
        }
        (true, false) => {}
    }
    for (id, addr) in &d.peers {
        if !config.registry.voters.contains_key(id) {
            return Err((
                "registry.direct.peers",
                format!("raft id {id:?} is not in registry.voters; name the voters only"),
            ));
        }
        let port = addr
            .rsplit_once(':')
            .map(|(host, port)| (host, port.parse::<u16>()));
        if !matches!(port, Some((host, Ok(p))) if !host.is_empty() && p != 0) {
            return Err((
                "registry.direct.peers",
                format!("voter {id}'s address {addr:?} is not host:port"),
            ));
        }
    }
    let me = config.registry.raft_id.to_string();
    if let Some(missing) = config
        .registry
        .voters
        .keys()
        .find(|id| **id != me && !d.peers.contains_key(*id))
    {
        return Err((
            "registry.direct.peers",
            format!("voter {missing} has no address; name every other voter's host:port"),
        ));
    }
    Ok(())
}

impl DirectSection {
    /// The registry member's direct links, the token file read now (its contents never appear
    /// in an error).
    pub fn links(&self) -> Result<DirectRaft, NodeError> {
        let bad = |key: &str, what: String| {
            NodeError::Config(format!("invalid config key {key}: {what}"))
        };
        let listen = self
            .listen
            .parse::<SocketAddr>()
            .map_err(|e| bad("registry.direct.listen", e.to_string()))?;
        let secret = if self.token_file.is_empty() {
            self.token.clone().into_bytes()
        } else {
            std::fs::read(&self.token_file).map_err(|e| {
                bad(
                    "registry.direct.token_file",
                    format!("cannot read {}: {e}; give a readable file", self.token_file),
                )
            })?
        };
        let key = if self.token_file.is_empty() {
            "registry.direct.token"
        } else {
            "registry.direct.token_file"
        };
        let token = RaftToken::new(&secret).map_err(|e| bad(key, e.to_string()))?;
        let peers = self
            .peers
            .iter()
            .map(|(id, addr)| {
                id.parse::<u64>().map(|id| (id, addr.clone())).map_err(|_| {
                    bad(
                        "registry.direct.peers",
                        format!("raft id {id:?} is not a number"),
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        let tls = if self.tls_ca.is_empty() {
            None
        } else {
            Some(
                LinkTls::from_pem(
                    Path::new(&self.tls_ca),
                    Path::new(&self.tls_cert),
                    Path::new(&self.tls_key),
                )
                .map_err(|e| match e {
                    lineage_registry::RegistryError::Config(what) => {
                        NodeError::Config(format!("invalid config key {what}"))
                    }
                    other => NodeError::Config(other.to_string()),
                })?,
            )
        };
        Ok(DirectRaft {
            listen,
            peers,
            token,
            tls,
        })
    }
}
