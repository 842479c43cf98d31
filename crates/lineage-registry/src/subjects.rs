//! NATS subjects of the registry (all under `lineage.<cluster>.`).
//!
//! | subject | who serves | what |
//! |---|---|---|
//! | `lineage.<cluster>.raft.<raft_id>.append-v2` | member `<raft_id>` | Raft append-entries (and heartbeats) |
//! | `lineage.<cluster>.raft.<raft_id>.vote-v2` / `.prevote-v2` | member `<raft_id>` | Raft vote, pre-vote |
//! | `lineage.<cluster>.raft.<raft_id>.snapshot-v2` | member `<raft_id>` | one chunk of a full snapshot |
//! | `lineage.<cluster>.raft.<raft_id>.transfer-v2` | member `<raft_id>` | leadership handed to it |
//! | `lineage.<cluster>.registry.write` | every member, queue group `registry` | a [`crate::Command`] from any process |
//! | `lineage.<cluster>.registry.read` | every member, queue group `registry` | a query from any process |
//! | `lineage.<cluster>.registry.<raft_id>.write` | member `<raft_id>` | a write sent straight to the known leader |
//! | `lineage.<cluster>.registry.write.<node>` | every member, queue group `registry` | a write by node `<node>`: heartbeats and claims only as itself (Z2) |
//! | `lineage.<cluster>.registry.<raft_id>.write.<node>` | member `<raft_id>` | the same, straight to the known leader |
//! | `lineage.<cluster>.registry.<raft_id>.read` | member `<raft_id>` | a read sent straight to the known leader |
//! | `lineage.<cluster>.registry.<raft_id>.errors` | nobody | the micro library's copy of a read's error reply ([`errors`]) |
//!
//! The two read subjects are the endpoints `read` and `read-direct` of the micro service
//! [`SERVICE_NAME`] (one instance per member); the write and Raft subjects are plain
//! subscriptions, internal to lineage.

/// The queue group every member uses for the shared write and read subjects.
pub const QUEUE_GROUP: &str = "registry";

/// The NATS micro service every member registers for its read side (`nats micro ls`,
/// `nats micro info lineage-registry`): endpoints `read` ([`read`]) and `read-direct`
/// ([`read_direct`]). Writes and Raft RPC are not part of it.
pub const SERVICE_NAME: &str = "lineage-registry";

/// `lineage.<cluster>.registry.<raft_id>.errors`: where the micro library's own copy of each
/// error reply of member `<raft_id>`'s read service goes (headers only, empty body; nobody
/// needs to subscribe): sending it is how `$SRV.STATS` counts the error
/// (`lineage_bus::service`).
pub fn errors(cluster: &str, raft_id: u64) -> String {
    format!("lineage.{cluster}.registry.{raft_id}.errors")
}

/// The Raft RPCs of this build's wire (openraft 0.10). Their tokens end in `-v2`: a member of
/// an older lineage (openraft 0.9, tokens `append`, `vote`, `snapshot`) neither hears them nor
/// is heard (see [`is_openraft_09_rpc`]), so a group never mixes the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RaftRpc {
    /// Append entries (and heartbeats).
    Append,
    /// Vote.
    Vote,
    /// Pre-vote: would the member vote for this candidate (no term is spent asking)?
    PreVote,
    /// One chunk of a full snapshot.
    Snapshot,
    /// A leader hands leadership to this member.
    TransferLeader,
}

impl RaftRpc {
    /// Every RPC, for tests and docs.
    pub const ALL: [RaftRpc; 5] = [
        RaftRpc::Append,
        RaftRpc::Vote,
        RaftRpc::PreVote,
        RaftRpc::Snapshot,
        RaftRpc::TransferLeader,
    ];

    /// The last subject token.
    pub fn token(self) -> &'static str {
        match self {
            RaftRpc::Append => "append-v2",
            RaftRpc::Vote => "vote-v2",
            RaftRpc::PreVote => "prevote-v2",
            RaftRpc::Snapshot => "snapshot-v2",
            RaftRpc::TransferLeader => "transfer-v2",
        }
    }

    /// Parses the last subject token.
    pub fn from_token(token: &str) -> Option<Self> {
        RaftRpc::ALL.into_iter().find(|rpc| rpc.token() == token)
    }
}

/// Whether `token` is a Raft RPC token of lineage builds on openraft 0.9 (`append`, `vote`,
/// `snapshot`): a request on one comes from a member that was not upgraded.
pub fn is_openraft_09_rpc(token: &str) -> bool {
    matches!(token, "append" | "vote" | "snapshot")
}

/// `lineage.<cluster>.raft.<raft_id>.<rpc>`
pub fn raft_rpc(cluster: &str, raft_id: u64, rpc: RaftRpc) -> String {
    format!("lineage.{cluster}.raft.{raft_id}.{}", rpc.token())
}

/// `lineage.<cluster>.raft.<raft_id>.*`: everything member `<raft_id>` serves for Raft.
pub fn raft_rpc_wildcard(cluster: &str, raft_id: u64) -> String {
    format!("lineage.{cluster}.raft.{raft_id}.*")
}

/// `lineage.<cluster>.registry.write`
pub fn write(cluster: &str) -> String {
    format!("lineage.{cluster}.registry.write")
}

/// `lineage.<cluster>.registry.write.<node>`: a write by node `<node>` (its identity, Z2).
pub fn write_as(cluster: &str, node: &str) -> String {
    format!("lineage.{cluster}.registry.write.{node}")
}

/// `lineage.<cluster>.registry.write.*`: every member serves identified writes (queue group).
pub fn write_as_any(cluster: &str) -> String {
    format!("lineage.{cluster}.registry.write.*")
}

/// `lineage.<cluster>.registry.<raft_id>.write.<node>`: an identified write straight to the
/// known leader.
pub fn write_direct_as(cluster: &str, raft_id: u64, node: &str) -> String {
    format!("lineage.{cluster}.registry.{raft_id}.write.{node}")
}

/// `lineage.<cluster>.registry.<raft_id>.write.*`
pub fn write_direct_as_any(cluster: &str, raft_id: u64) -> String {
    format!("lineage.{cluster}.registry.{raft_id}.write.*")
}

/// The writer's identity of an identified write subject (`....write.<node>`), if it is one.
pub fn sender_of(subject: &str) -> Option<&str> {
    let (head, last) = subject.rsplit_once('.')?;
    head.ends_with(".write").then_some(last)
}

/// True when a message was delivered by JetStream (a push consumer's delivery: its reply is a
/// `$JS.ACK.` subject; a republished message: a `Nats-Stream` header) rather than sent by a
/// client. Members never serve such a message: JetStream publishes on the consumer creator's
/// behalf, past the subject permissions that keep non-voters off the registry and Raft
/// subjects (Z2), so a stored message redirected there would otherwise be a forged command.
pub fn delivered_by_jetstream(message: &async_nats::Message) -> bool {
    message
        .reply
        .as_ref()
        .is_some_and(|r| r.as_str().starts_with("$JS."))
        || message
            .headers
            .as_ref()
            .is_some_and(|h| h.get("Nats-Stream").is_some())
}

/// `lineage.<cluster>.registry.read`
pub fn read(cluster: &str) -> String {
    format!("lineage.{cluster}.registry.read")
}

/// `lineage.<cluster>.registry.<raft_id>.write`
pub fn write_direct(cluster: &str, raft_id: u64) -> String {
    format!("lineage.{cluster}.registry.{raft_id}.write")
}

/// `lineage.<cluster>.registry.<raft_id>.read`
pub fn read_direct(cluster: &str, raft_id: u64) -> String {
    format!("lineage.{cluster}.registry.{raft_id}.read")
}

/// True when `cluster` is one safe NATS subject token.
pub fn valid_cluster(cluster: &str) -> bool {
    !cluster.is_empty()
        && cluster.len() <= 64
        && cluster
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}
