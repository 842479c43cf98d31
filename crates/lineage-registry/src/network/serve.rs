//! The receiver side: serves the Raft RPCs addressed to one member ([`serve_raft`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::Client;
use bytes::Bytes;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::watch;

use super::snapshot::{serve_chunk, Assembly};
use crate::error::RegistryError;
use crate::raft_types::RegistryRaft;
use crate::subjects::{self, RaftRpc};

/// How often the line about a member of an older lineage is repeated while it keeps sending.
const OLD_MEMBER_LINE_EVERY: Duration = Duration::from_secs(30);

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
    let assembly = Arc::new(tokio::sync::Mutex::new(Assembly::default()));
    let mut old_member_said: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            msg = sub.next() => {
                let Some(msg) = msg else { break };
                if subjects::delivered_by_jetstream(&msg) {
                    tracing::warn!(subject = %msg.subject, "dropped a Raft RPC delivered by JetStream (a redirected stored message, not a peer)");
                    continue;
                }
                let token = msg.subject.as_str().rsplit('.').next().unwrap_or_default();
                if subjects::is_openraft_09_rpc(token) {
                    if old_member_said.is_none_or(|at| at.elapsed() >= OLD_MEMBER_LINE_EVERY) {
                        old_member_said = Some(Instant::now());
                        tracing::error!(subject = %msg.subject, "a registry member of an older lineage (openraft 0.9) is sending to this one and is not answered: a registry group does not mix the two; stop every voter, start them all on this version (their stores open unchanged)");
                    }
                    continue;
                }
                let Some(reply) = msg.reply.clone() else { continue };
                let rpc = RaftRpc::from_token(token);
                let (raft, client, assembly) = (raft.clone(), client.clone(), assembly.clone());
                tokio::spawn(async move {
                    let body = match rpc {
                        Some(rpc) => answer(rpc, &msg.payload, &raft, &assembly).await,
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

/// Runs one Raft RPC addressed to this member (from NATS or a direct link): the answer's
/// JSON, or `None` for a request that could not be decoded.
pub(super) async fn answer(
    rpc: RaftRpc,
    payload: &[u8],
    raft: &RegistryRaft,
    assembly: &tokio::sync::Mutex<Assembly>,
) -> Option<Vec<u8>> {
    match rpc {
        RaftRpc::Append => handle(payload, |r| raft.append_entries(r)).await,
        RaftRpc::Vote => handle(payload, |r| raft.vote(r)).await,
        RaftRpc::PreVote => handle(payload, |r| raft.pre_vote(r)).await,
        RaftRpc::TransferLeader => handle(payload, |r| raft.handle_transfer_leader(r)).await,
        RaftRpc::Snapshot => Some(serve_chunk(payload, assembly, raft).await),
    }
}

/// Decodes a request, runs it, encodes its result; `None` (no reply) for an undecodable one.
async fn handle<Req, Resp, E, F, Fut>(payload: &[u8], f: F) -> Option<Vec<u8>>
where
    Req: DeserializeOwned,
    Resp: Serialize,
    E: Serialize,
    F: FnOnce(Req) -> Fut,
    Fut: std::future::Future<Output = Result<Resp, E>>,
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
