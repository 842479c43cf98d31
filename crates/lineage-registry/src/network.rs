//! Raft RPCs over NATS request/reply (openraft's `RaftNetworkV2`), or over direct TCP links
//! between the members where `registry.direct` names them ([`direct`]).
//!
//! The sender side ([`NatsNetworkFactory`], [`NatsNetwork`]) sends each RPC as JSON to
//! `lineage.<cluster>.raft.<target>.<rpc>` ([`subjects::raft_rpc`]) with a deadline (openraft's
//! hard TTL) and maps failures to openraft errors: no responders -> `Unreachable` (the target is
//! down; openraft backs off), a remote that answers with an error (its Raft stopped) ->
//! `Unreachable` too, anything else (timeout, I/O, undecodable reply) -> `Network`.
//!
//! | file | what |
//! |---|---|
//! | `network.rs` | the sender: append-entries, vote, pre-vote, transfer-leader |
//! | `network/snapshot.rs` | a full snapshot in chunks (both sides) |
//! | `network/serve.rs` | the receiver ([`serve_raft`]) |
//! | `network/direct.rs` | direct links: the dialer, the listener ([`serve_direct`]) |
//! | `network/direct/handshake.rs` | their handshake and frames, pure |
//!
//! An append-entries request of more than one entry that would exceed [`APPEND_BYTES_CAP`] (or
//! the server's `max_payload`, if smaller) goes with as many entries as fit and answers
//! `PartialSuccess` up to the last one sent, so openraft sends the rest next. openraft gives an
//! append its heartbeat interval as deadline: a follower that is behind and loaded must decode,
//! write and fsync one within that time, so catch-up sends more, smaller requests (seen in CI:
//! a 10,000-session bench smoke on a debug build, 50 ms heartbeats, both followers timing out
//! on every large append until the writes' 10 s deadline).
//!
//! The RPC tokens are this wire's (`append-v2`, ...): a member still on openraft 0.9 neither
//! hears this one nor is answered by it; [`serve_raft`] says so in one line
//! ([`subjects::is_openraft_09_rpc`]).

use std::time::Duration;

use async_nats::Client;
use bytes::Bytes;
use openraft::error::{
    NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{OptionalSend, RaftNetworkV2};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::check_quorum::StandAside;
use crate::raft_types::{RaftMember, Snapshot, SnapshotData, TypeConfig, Vote};
use crate::subjects::{self, RaftRpc};

pub mod direct;
mod serve;
mod snapshot;

pub use direct::handshake::RaftToken;
pub(crate) use direct::{bind as bind_direct, serve_direct, Listening};
pub use direct::{DirectRaft, LinkTls};

pub(crate) use serve::serve_raft;
pub use snapshot::chunk_size_for;

/// The most bytes of one append-entries request of several entries (see the module docs): at
/// the slowest rates seen here (a debug build on 2 loaded cores) a follower takes it well within
/// a 50 ms heartbeat; catch-up sends more requests instead of ones that never finish.
pub const APPEND_BYTES_CAP: usize = 256 * 1024;

/// Creates one [`NatsNetwork`] per target member.
#[derive(Clone)]
pub struct NatsNetworkFactory {
    client: Client,
    cluster: String,
    max_payload: usize,
    chunk_bytes: usize,
    stand_aside: StandAside,
    /// This member's Raft id and direct links, when `registry.direct` is configured.
    direct: Option<(u64, DirectRaft)>,
}

impl NatsNetworkFactory {
    /// A factory sending over `client` for `cluster`, snapshots in chunks of `chunk_bytes`;
    /// while `stand_aside` is set, no append-entries leave ([`crate::check_quorum`]).
    pub fn new(
        client: Client,
        cluster: String,
        chunk_bytes: usize,
        stand_aside: StandAside,
    ) -> Self {
        let max_payload = client.server_info().max_payload;
        Self {
            client,
            cluster,
            max_payload,
            chunk_bytes,
            stand_aside,
            direct: None,
        }
    }

    /// The same, reaching the members `direct` names over direct links as member `me`.
    pub fn with_direct(mut self, me: u64, direct: DirectRaft) -> Self {
        self.direct = Some((me, direct));
        self
    }
}

impl RaftNetworkFactory<TypeConfig> for NatsNetworkFactory {
    type Network = NatsNetwork;

    async fn new_client(&mut self, target: u64, _node: &RaftMember) -> Self::Network {
        NatsNetwork {
            client: self.client.clone(),
            cluster: self.cluster.clone(),
            target,
            max_payload: self.max_payload,
            chunk_bytes: self.chunk_bytes,
            stand_aside: self.stand_aside.clone(),
            direct: self.direct.as_ref().and_then(|(me, d)| {
                let addr = d.peers.get(&target)?;
                Some(direct::Link::new(
                    &self.cluster,
                    *me,
                    target,
                    addr.clone(),
                    d,
                ))
            }),
        }
    }
}

/// The connection to one target member.
pub struct NatsNetwork {
    client: Client,
    cluster: String,
    target: u64,
    max_payload: usize,
    chunk_bytes: usize,
    stand_aside: StandAside,
    /// The direct link to the target, when it has an address in `registry.direct.peers`.
    direct: Option<direct::Link>,
}

/// An error on the way, as openraft's errors carry it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct WireError(pub(crate) String);

/// A failed RPC: either openraft's error kind, unreachable or network.
#[derive(Debug)]
pub(crate) enum CallError {
    /// Nobody serves the subject (the member is down), or its Raft stopped.
    Unreachable(WireError),
    /// Timed out, undecodable, or the connection failed.
    Network(WireError),
}

impl From<CallError> for RPCError<TypeConfig> {
    fn from(e: CallError) -> Self {
        match e {
            CallError::Unreachable(w) => RPCError::Unreachable(Unreachable::new(&w)),
            CallError::Network(w) => RPCError::Network(NetworkError::new(&w)),
        }
    }
}

impl From<CallError> for StreamingError<TypeConfig> {
    fn from(e: CallError) -> Self {
        match e {
            CallError::Unreachable(w) => StreamingError::Unreachable(Unreachable::new(&w)),
            CallError::Network(w) => StreamingError::Network(NetworkError::new(&w)),
        }
    }
}

impl NatsNetwork {
    /// Sends `body` as `rpc` and decodes the reply as `Result<Resp, E>`; a remote error counts
    /// as unreachable (its Raft has stopped).
    pub(crate) async fn call_body<Resp, E>(
        &self,
        rpc: RaftRpc,
        body: Vec<u8>,
        deadline: Duration,
    ) -> Result<Resp, CallError>
    where
        Resp: DeserializeOwned,
        E: DeserializeOwned + std::fmt::Display,
    {
        let payload: Bytes = match &self.direct {
            Some(link) => link.call(rpc, &body, deadline).await?.into(),
            None => self.over_nats(rpc, body, deadline).await?,
        };
        let decoded = serde_json::from_slice::<Result<Resp, E>>(&payload).map_err(|e| {
            CallError::Network(WireError(format!(
                "undecodable {} reply from raft member {}: {e}",
                rpc.token(),
                self.target
            )))
        })?;
        decoded.map_err(|e| {
            CallError::Unreachable(WireError(format!(
                "raft member {} answered {}: {e}",
                self.target,
                rpc.token()
            )))
        })
    }

    /// Sends `body` as `rpc` through nats-server; the reply's payload.
    async fn over_nats(
        &self,
        rpc: RaftRpc,
        body: Vec<u8>,
        deadline: Duration,
    ) -> Result<Bytes, CallError> {
        if self.max_payload > 0 && body.len() > self.max_payload {
            return Err(CallError::Network(WireError(format!(
                "{} request of {} bytes exceeds the NATS max payload {}",
                rpc.token(),
                body.len(),
                self.max_payload
            ))));
        }
        let subject = subjects::raft_rpc(&self.cluster, self.target, rpc);
        let reply = tokio::time::timeout(deadline, self.client.request(subject, Bytes::from(body)))
            .await
            .map_err(|_| {
                CallError::Network(WireError(format!(
                    "{} to raft member {} timed out after {deadline:?}",
                    rpc.token(),
                    self.target
                )))
            })?;
        let msg = reply.map_err(|e| {
            let err = WireError(format!(
                "{} to raft member {}: {e}",
                rpc.token(),
                self.target
            ));
            match e.kind() {
                async_nats::RequestErrorKind::NoResponders => CallError::Unreachable(err),
                _ => CallError::Network(err),
            }
        })?;
        Ok(msg.payload)
    }

    /// Sends `req` as JSON.
    async fn call<Req, Resp, E>(
        &self,
        rpc: RaftRpc,
        req: &Req,
        deadline: Duration,
    ) -> Result<Resp, CallError>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: DeserializeOwned + std::fmt::Display,
    {
        let body =
            serde_json::to_vec(req).map_err(|e| CallError::Network(WireError(e.to_string())))?;
        self.call_body::<Resp, E>(rpc, body, deadline).await
    }

    /// The most bytes one append-entries request of several entries may take.
    fn append_cap(&self) -> usize {
        match self.max_payload {
            0 => APPEND_BYTES_CAP,
            max => max.min(APPEND_BYTES_CAP),
        }
    }
}

/// `rpc` encoded, with as many of its entries as fit in `cap` bytes (at least one): the body and
/// the log id of the last entry left out of it, if any were.
fn encode_append(
    mut rpc: AppendEntriesRequest<TypeConfig>,
    cap: usize,
) -> Result<(Vec<u8>, Option<crate::raft_types::LogId>), serde_json::Error> {
    let mut cut = None;
    loop {
        let body = serde_json::to_vec(&rpc)?;
        if body.len() <= cap || rpc.entries.len() <= 1 {
            return Ok((body, cut));
        }
        let keep = rpc.entries.len() / 2;
        rpc.entries.truncate(keep);
        cut = rpc.entries.last().map(|e| e.log_id);
    }
}

impl RaftNetworkV2<TypeConfig> for NatsNetwork {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        if self.stand_aside.is_set() {
            // A leader without its quorum withholds its appends so the others elect one.
            return Err(RPCError::Unreachable(Unreachable::new(&WireError(
                "standing aside: no quorum acknowledged this leader (check-quorum)".to_owned(),
            ))));
        }
        // Encoded once: the size check and the request share it.
        let (body, sent_up_to) = encode_append(rpc, self.append_cap())
            .map_err(|e| RPCError::Network(NetworkError::new(&WireError(e.to_string()))))?;
        let resp: AppendEntriesResponse<TypeConfig> = self
            .call_body::<_, RaftError<TypeConfig>>(RaftRpc::Append, body, option.hard_ttl())
            .await?;
        Ok(match (resp, sent_up_to) {
            // Only a prefix went: openraft sends the rest from there.
            (AppendEntriesResponse::Success, Some(last)) => {
                AppendEntriesResponse::PartialSuccess(Some(last))
            }
            (resp, _) => resp,
        })
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        Ok(self
            .call::<_, _, RaftError<TypeConfig>>(RaftRpc::Vote, &rpc, option.hard_ttl())
            .await?)
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        Ok(self
            .call::<_, _, RaftError<TypeConfig>>(RaftRpc::PreVote, &rpc, option.hard_ttl())
            .await?)
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl std::future::Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        snapshot::send(self, vote, snapshot, cancel, option).await
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        Ok(self
            .call::<_, _, openraft::error::Fatal<TypeConfig>>(
                RaftRpc::TransferLeader,
                &req,
                option.hard_ttl(),
            )
            .await?)
    }

    fn backoff(&self) -> Option<openraft::network::Backoff> {
        Some(openraft::network::Backoff::new(std::iter::repeat(
            Duration::from_millis(100),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::CommandBatch;
    use openraft::{Entry, EntryPayload, LogId};

    fn entry(index: u64) -> crate::raft_types::Entry {
        Entry {
            log_id: LogId::new(
                openraft::impls::leader_id_adv::LeaderId {
                    term: 1,
                    node_id: 1,
                },
                index,
            ),
            payload: EntryPayload::Normal(CommandBatch::default()),
        }
    }

    fn append(entries: Vec<crate::raft_types::Entry>) -> AppendEntriesRequest<TypeConfig> {
        AppendEntriesRequest {
            vote: Vote::new_committed(1, 1),
            prev_log_id: None,
            entries,
            leader_commit: None,
        }
    }

    #[test]
    fn an_append_that_fits_goes_whole() {
        let (body, cut) = encode_append(append((1..=4).map(entry).collect()), 1 << 20).unwrap();
        assert_eq!(cut, None);
        let back: AppendEntriesRequest<TypeConfig> = serde_json::from_slice(&body).unwrap();
        assert_eq!(back.entries.len(), 4);
    }

    #[test]
    fn an_append_over_the_cap_goes_with_a_prefix_and_names_its_last_entry() {
        let whole = serde_json::to_vec(&append((1..=8).map(entry).collect())).unwrap();
        let (body, cut) =
            encode_append(append((1..=8).map(entry).collect()), whole.len() / 2).unwrap();
        let back: AppendEntriesRequest<TypeConfig> = serde_json::from_slice(&body).unwrap();
        assert!(body.len() <= whole.len() / 2);
        assert!(back.entries.len() < 8 && !back.entries.is_empty());
        assert_eq!(cut, back.entries.last().map(|e| e.log_id));
    }

    #[test]
    fn one_entry_goes_even_over_the_cap() {
        let (_, cut) = encode_append(append(vec![entry(1)]), 1).unwrap();
        assert_eq!(cut, None);
    }
}
