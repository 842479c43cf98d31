//! Raft RPCs over NATS request/reply.
//!
//! The sender side ([`NatsNetworkFactory`], [`NatsNetwork`]) sends each RPC as JSON to
//! `lineage.<cluster>.raft.<target>.<rpc>` with a deadline (openraft's hard TTL) and maps
//! failures to openraft errors: no responders -> `Unreachable` (the target is down; openraft
//! backs off), anything else (timeout, I/O, undecodable reply) -> `Network`. Snapshots use
//! openraft's chunked transport; the chunk size is chosen below the server's `max_payload`.
//! An append-entries request that would exceed `max_payload` is answered with
//! `PayloadTooLarge`, so openraft retries with fewer entries.
//!
//! The receiver side (`serve_raft`) answers those subjects for one member.

use std::time::Duration;

use async_nats::Client;
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
}

impl NatsNetworkFactory {
    /// A factory sending over `client` for `cluster`.
    pub fn new(client: Client, cluster: String) -> Self {
        let max_payload = client.server_info().max_payload;
        Self {
            client,
            cluster,
            max_payload,
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
        }
    }
}

/// The connection to one target member.
pub struct NatsNetwork {
    client: Client,
    cluster: String,
    target: u64,
    max_payload: usize,
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
        let n = rpc.entries.len() as u64;
        // Encoded once: the size check and the request share it.
        let body = serde_json::to_vec(&rpc)
            .map_err(|e| RPCError::Network(NetworkError::new(&WireError(e.to_string()))))?;
        if n > 1 && self.max_payload > 0 && body.len() > self.max_payload {
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
        match self
            .call(RaftRpc::Snapshot, &rpc, option.hard_ttl())
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

/// The snapshot chunk size that fits in one NATS message of `max_payload` bytes once encoded
/// as JSON (a byte costs at most 4 characters, "255,"), with room for the request envelope.
pub fn chunk_size_for(max_payload: usize) -> usize {
    (max_payload.saturating_sub(16 * 1024) / 4).max(1024)
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
                        Some(RaftRpc::Snapshot) => handle(&msg.payload, |r| async move { raft.install_snapshot(r).await }).await,
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
