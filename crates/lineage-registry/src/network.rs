//! Raft RPCs over NATS request/reply.
//!
//! The sender side ([`NatsNetworkFactory`], [`NatsNetwork`]) sends each RPC as JSON to
//! `lineage.<cluster>.raft.<target>.<rpc>` with a deadline (openraft's hard TTL) and maps
//! failures to openraft errors: no responders -> `Unreachable` (the target is down; openraft
//! backs off), anything else (timeout, I/O, undecodable reply) -> `Network`. Snapshots use
//! openraft's chunked transport; the chunk size is chosen below the server's `max_payload`.
//! A snapshot chunk is framed, not JSON all through: the magic `LNCHNK1\n`, the length of the
//! request's JSON without its data (u32, little endian), that JSON, then the chunk's bytes raw.
//! (As JSON the bytes were an array of numbers, up to 4 characters each: a 1 MiB message carried
//! 258 KB of snapshot, and 0.7 GB took about 3,000 chunks.) A receiver still takes a plain JSON
//! request, so a member of the previous version can send to this one; the reverse needs the
//! receivers upgraded first.
//! An append-entries request of more than one entry that would exceed [`APPEND_BYTES_CAP`] (or
//! the server's `max_payload`, if smaller) is answered with `PayloadTooLarge`, so openraft
//! retries with fewer entries. openraft 0.9 gives an append only its heartbeat interval (the
//! RPC's deadline is `heartbeat_interval`, fixed in its replication loop): a follower that is
//! behind and loaded must decode, write and fsync one within that time, or the leader's
//! retries of the same large batch time out one after another and the follower never catches
//! up (seen in CI: a 10,000-session bench smoke on a debug build, 50 ms heartbeats, both
//! followers timing out on every append until the writes' 10 s deadline).
//!
//! The receiver side (`serve_raft`) answers those subjects for one member.

use std::time::Duration;

use async_nats::Client;

/// The most bytes of one append-entries request of several entries (see the module docs): at
/// the slowest rates seen here (a debug build on 2 loaded cores) a follower takes it well within
/// a 50 ms heartbeat; catch-up sends more requests instead of ones that never finish.
pub const APPEND_BYTES_CAP: usize = 256 * 1024;
use bytes::Bytes;
use futures::StreamExt;
use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError,
    Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::watch;

use crate::check_quorum::StandAside;
use crate::error::RegistryError;
use crate::raft_types::{RaftMember, RegistryRaft, TypeConfig};
use crate::subjects::{self, RaftRpc};

type RpcResult<T, E = openraft::error::Infallible> =
    Result<T, RPCError<u64, RaftMember, RaftError<u64, E>>>;

/// Creates one [`NatsNetwork`] per target member.
#[derive(Clone)]
pub struct NatsNetworkFactory {
    client: Client,
    cluster: String,
    max_payload: usize,
    stand_aside: StandAside,
}

impl NatsNetworkFactory {
    /// A factory sending over `client` for `cluster`; while `stand_aside` is set, no
    /// append-entries leave ([`crate::check_quorum`]).
    pub fn new(client: Client, cluster: String, stand_aside: StandAside) -> Self {
        let max_payload = client.server_info().max_payload;
        Self {
            client,
            cluster,
            max_payload,
            stand_aside,
        }
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
            stand_aside: self.stand_aside.clone(),
        }
    }
}

/// The connection to one target member.
pub struct NatsNetwork {
    client: Client,
    cluster: String,
    target: u64,
    max_payload: usize,
    stand_aside: StandAside,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct WireError(String);

impl NatsNetwork {
    async fn call<Req, Resp, E>(
        &self,
        rpc: RaftRpc,
        req: &Req,
        deadline: Duration,
    ) -> Result<Result<Resp, RaftError<u64, E>>, RPCError<u64, RaftMember, RaftError<u64, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let body = serde_json::to_vec(req)
            .map_err(|e| RPCError::Network(NetworkError::new(&WireError(e.to_string()))))?;
        self.call_body(rpc, body, deadline).await
    }

    async fn call_body<Resp, E>(
        &self,
        rpc: RaftRpc,
        body: Vec<u8>,
        deadline: Duration,
    ) -> Result<Result<Resp, RaftError<u64, E>>, RPCError<u64, RaftMember, RaftError<u64, E>>>
    where
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        if self.max_payload > 0 && body.len() > self.max_payload {
            return Err(RPCError::Network(NetworkError::new(&WireError(format!(
                "{} request of {} bytes exceeds the NATS max payload {}",
                rpc.token(),
                body.len(),
                self.max_payload
            )))));
        }
        let subject = subjects::raft_rpc(&self.cluster, self.target, rpc);
        let reply = tokio::time::timeout(deadline, self.client.request(subject, Bytes::from(body)))
            .await
            .map_err(|_| {
                RPCError::Network(NetworkError::new(&WireError(format!(
                    "{} to raft member {} timed out after {deadline:?}",
                    rpc.token(),
                    self.target
                ))))
            })?;
        let msg = match reply {
            Ok(msg) => msg,
            Err(e) => {
                let err = WireError(format!(
                    "{} to raft member {}: {e}",
                    rpc.token(),
                    self.target
                ));
                return Err(match e.kind() {
                    async_nats::RequestErrorKind::NoResponders => {
                        RPCError::Unreachable(Unreachable::new(&err))
                    }
                    _ => RPCError::Network(NetworkError::new(&err)),
                });
            }
        };
        serde_json::from_slice::<Result<Resp, RaftError<u64, E>>>(&msg.payload).map_err(|e| {
            RPCError::Network(NetworkError::new(&WireError(format!(
                "undecodable {} reply from raft member {}: {e}",
                rpc.token(),
                self.target
            ))))
        })
    }

    fn remote<E: std::error::Error>(
        &self,
        e: RaftError<u64, E>,
    ) -> RPCError<u64, RaftMember, RaftError<u64, E>> {
        RPCError::RemoteError(RemoteError::new(self.target, e))
    }
}

impl RaftNetwork<TypeConfig> for NatsNetwork {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<u64>> {
        if self.stand_aside.is_set() {
            // A leader without its quorum withholds its appends so the others elect one.
            return Err(RPCError::Unreachable(Unreachable::new(&WireError(
                "standing aside: no quorum acknowledged this leader (check-quorum)".to_owned(),
            ))));
        }
        let n = rpc.entries.len() as u64;
        // Encoded once: the size check and the request share it.
        let body = serde_json::to_vec(&rpc)
            .map_err(|e| RPCError::Network(NetworkError::new(&WireError(e.to_string()))))?;
        let cap = match self.max_payload {
            0 => APPEND_BYTES_CAP,
            max => max.min(APPEND_BYTES_CAP),
        };
        if n > 1 && body.len() > cap {
            return Err(RPCError::PayloadTooLarge(
                PayloadTooLarge::new_entries_hint((n / 2).max(1)),
            ));
        }
        match self
            .call_body(RaftRpc::Append, body, option.hard_ttl())
            .await?
        {
            Ok(resp) => Ok(resp),
            Err(e) => Err(self.remote(e)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<u64>, InstallSnapshotError> {
        let body = encode_chunk(rpc)
            .map_err(|e| RPCError::Network(NetworkError::new(&WireError(e.to_string()))))?;
        match self
            .call_body(RaftRpc::Snapshot, body, option.hard_ttl())
            .await?
        {
            Ok(resp) => Ok(resp),
            Err(e) => Err(self.remote(e)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<u64>> {
        match self.call(RaftRpc::Vote, &rpc, option.hard_ttl()).await? {
            Ok(resp) => Ok(resp),
            Err(e) => Err(self.remote(e)),
        }
    }

    fn backoff(&self) -> openraft::network::Backoff {
        openraft::network::Backoff::new(std::iter::repeat(Duration::from_millis(100)))
    }
}

/// The snapshot chunk size that fits in one NATS message of `max_payload` bytes with room for
/// the request's JSON (vote, snapshot meta, offset: far below 16 KiB).
pub fn chunk_size_for(max_payload: usize) -> usize {
    max_payload.saturating_sub(16 * 1024).max(1024)
}

const CHUNK_MAGIC: &[u8; 8] = b"LNCHNK1\n";

/// A snapshot chunk as one message: magic, JSON length, the request's JSON without its data,
/// the data.
fn encode_chunk(mut rpc: InstallSnapshotRequest<TypeConfig>) -> Result<Vec<u8>, String> {
    let data = std::mem::take(&mut rpc.data);
    let head = serde_json::to_vec(&rpc).map_err(|e| e.to_string())?;
    let len = u32::try_from(head.len()).map_err(|_| "snapshot request head too large")?;
    let mut body = Vec::with_capacity(12 + head.len() + data.len());
    body.extend_from_slice(CHUNK_MAGIC);
    body.extend_from_slice(&len.to_le_bytes());
    body.extend_from_slice(&head);
    body.extend_from_slice(&data);
    Ok(body)
}

/// The request a snapshot message carries: framed ([`encode_chunk`]) or plain JSON.
fn decode_chunk(payload: &[u8]) -> Result<InstallSnapshotRequest<TypeConfig>, String> {
    let Some(framed) = payload.strip_prefix(CHUNK_MAGIC.as_slice()) else {
        return serde_json::from_slice(payload).map_err(|e| e.to_string());
    };
    let (len, rest) = framed
        .split_first_chunk::<4>()
        .ok_or("snapshot chunk cut short (no length)")?;
    let len = u32::from_le_bytes(*len) as usize;
    if rest.len() < len {
        return Err("snapshot chunk cut short (head)".into());
    }
    let (head, data) = rest.split_at(len);
    let mut rpc: InstallSnapshotRequest<TypeConfig> =
        serde_json::from_slice(head).map_err(|e| e.to_string())?;
    rpc.data = data.to_vec();
    Ok(rpc)
}

/// Serves one snapshot chunk.
async fn handle_chunk(payload: &[u8], raft: &RegistryRaft) -> Option<Vec<u8>> {
    match decode_chunk(payload) {
        Ok(rpc) => serde_json::to_vec(&raft.install_snapshot(rpc).await).ok(),
        Err(e) => {
            // No reply: the sender times out and maps it to a network error.
            tracing::warn!(error = %e, "undecodable raft snapshot chunk");
            None
        }
    }
}

/// Serves Raft RPCs addressed to member `raft_id` until `stop` fires.
pub(crate) async fn serve_raft(
    client: Client,
    cluster: String,
    raft_id: u64,
    raft: RegistryRaft,
    mut stop: watch::Receiver<bool>,
) -> Result<(), RegistryError> {
    let mut sub = client
        .subscribe(subjects::raft_rpc_wildcard(&cluster, raft_id))
        .await
        .map_err(|e| RegistryError::Nats(e.to_string()))?;
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            msg = sub.next() => {
                let Some(msg) = msg else { break };
                if subjects::delivered_by_jetstream(&msg) {
                    tracing::warn!(subject = %msg.subject, "dropped a Raft RPC delivered by JetStream (a redirected stored message, not a peer)");
                    continue;
                }
                let Some(reply) = msg.reply.clone() else { continue };
                let rpc = msg.subject.as_str().rsplit('.').next().and_then(RaftRpc::from_token);
                let raft = raft.clone();
                let client = client.clone();
                tokio::spawn(async move {
                    let body = match rpc {
                        Some(RaftRpc::Append) => handle(&msg.payload, |r| async move { raft.append_entries(r).await }).await,
                        Some(RaftRpc::Vote) => handle(&msg.payload, |r| async move { raft.vote(r).await }).await,
                        Some(RaftRpc::Snapshot) => handle_chunk(&msg.payload, &raft).await,
                        None => None,
                    };
                    if let Some(body) = body {
                        if let Err(e) = client.publish(reply, Bytes::from(body)).await {
                            tracing::debug!(error = %e, "raft rpc reply failed");
                        }
                    }
                });
            }
        }
    }
    let _ = sub.unsubscribe().await;
    Ok(())
}

async fn handle<Req, Resp, E, F, Fut>(payload: &[u8], f: F) -> Option<Vec<u8>>
where
    Req: DeserializeOwned,
    Resp: Serialize,
    E: std::error::Error + Serialize,
    F: FnOnce(Req) -> Fut,
    Fut: std::future::Future<Output = Result<Resp, RaftError<u64, E>>>,
{
    let req: Req = match serde_json::from_slice(payload) {
        Ok(r) => r,
        Err(e) => {
            // No reply: the sender times out and maps it to a network error.
            tracing::warn!(error = %e, "undecodable raft rpc");
            return None;
        }
    };
    let result = f(req).await;
    serde_json::to_vec(&result).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(data: Vec<u8>) -> InstallSnapshotRequest<TypeConfig> {
        InstallSnapshotRequest {
            vote: openraft::Vote::new_committed(3, 1),
            meta: openraft::SnapshotMeta::default(),
            offset: 4096,
            data,
            done: false,
        }
    }

    #[test]
    fn a_framed_chunk_carries_its_bytes_raw_and_decodes_back() {
        let data: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let body = encode_chunk(chunk(data.clone())).unwrap();
        assert!(
            body.len() < data.len() + 1024,
            "raw bytes, not JSON numbers: {} for {}",
            body.len(),
            data.len()
        );
        let back = decode_chunk(&body).unwrap();
        assert_eq!((back.offset, back.done, back.data), (4096, false, data));
    }

    #[test]
    fn a_plain_json_chunk_of_the_previous_version_is_still_taken() {
        let json = serde_json::to_vec(&chunk(vec![1, 2, 3])).unwrap();
        assert_eq!(decode_chunk(&json).unwrap().data, vec![1, 2, 3]);
    }

    #[test]
    fn a_cut_chunk_is_refused() {
        let body = encode_chunk(chunk(vec![9; 100])).unwrap();
        assert!(decode_chunk(&body[..10]).unwrap_err().contains("cut short"));
        assert!(decode_chunk(&body[..20]).unwrap_err().contains("cut short"));
    }

    #[test]
    fn chunks_fill_the_message_but_stay_under_max_payload() {
        assert_eq!(chunk_size_for(1024 * 1024), 1024 * 1024 - 16 * 1024);
        assert_eq!(chunk_size_for(0), 1024);
    }
}
