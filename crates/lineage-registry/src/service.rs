//! The registry member's service side: the read endpoints of the `lineage-registry` NATS micro
//! service ([`start_read_service`]), and [`Server`], which answers writes (queued for
//! [`crate::write_batch`]) and reads (stale, or linearizable through the leader) on the subjects
//! [`crate::node::RegistryNode`] subscribes.

use std::collections::HashMap;

use async_nats::Client;
use bytes::Bytes;
use futures::StreamExt;
use openraft::error::{LinearizableReadError, RaftError};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::Instrument;

use crate::error::RegistryError;
use crate::node::RegistryNodeConfig;
use crate::raft_types::{Metrics, RegistryRaft};
use crate::storage::SharedState;
use crate::subjects;
use crate::types::{CommandResponse, RegistryRefusal};
use crate::wire::{
    decode_command, Consistency, Query, QueryResult, ReadReply, ReadRequest, RegistryStatus,
    WriteReply, SUBTREE_PAGE_BYTES, SUBTREE_PAGE_MAX,
};
use crate::write_batch::{request_span, PendingWrite};

mod write_many;

/// The query kinds a registry read takes (the `query` tag of [`Query`]), as the endpoints'
/// `queries` metadata lists them.
pub(crate) const QUERY_KINDS: [&str; 16] = [
    "session",
    "subtree",
    "subtree_page",
    "list_sessions",
    "children",
    "is_ancestor",
    "sessions_on_node",
    "nodes",
    "session_counts",
    "status",
    "digest",
    "overdue_births",
    "overdue_deadlines",
    "spent_budgets",
    "spent_budget_over",
    "purge_candidates",
];

/// The read endpoints of the `lineage-registry` service: (name, subject, metadata). The
/// `description` stays short enough for `nats micro info`'s table (it cuts values past ~60
/// characters); `request`, `queries` and `reply` say the JSON (whole in `--json`).
pub(crate) fn read_endpoints(
    config: &RegistryNodeConfig,
) -> [(&'static str, String, HashMap<String, String>); 2] {
    let metadata = |description: String| {
        HashMap::from([
            ("description".to_owned(), description),
            (
                "request".to_owned(),
                r#"{"consistency":"stale"|"linearizable","query":{"query":KIND,...}}"#.to_owned(),
            ),
            ("queries".to_owned(), QUERY_KINDS.join(", ")),
            (
                "reply".to_owned(),
                r#"{"reply":"done","result":{"result":...,"value":...}}, or "reply": "not_leader" (with "leader"), "unavailable" or "malformed" (with "reason")"#
                    .to_owned(),
            ),
        ])
    };
    [
        (
            "read",
            subjects::read(&config.cluster),
            metadata("a registry query; any member answers".to_owned()),
        ),
        (
            "read-direct",
            subjects::read_direct(&config.cluster, config.raft_id),
            metadata(format!(
                "a registry query to member {} only",
                config.raft_id
            )),
        ),
    ]
}

/// Registers this member's instance of the `lineage-registry` micro service (metadata: cluster,
/// raft_id, node) with its read endpoints, in the queue group the read subjects always used
/// ([`subjects::QUEUE_GROUP`], so members of older versions share the load).
pub(crate) async fn start_read_service(
    nats: &Client,
    config: &RegistryNodeConfig,
) -> Result<
    (
        async_nats::service::Service,
        Vec<async_nats::service::endpoint::Endpoint>,
    ),
    RegistryError,
> {
    use async_nats::service::ServiceExt;
    let failed = |what: &str, e: async_nats::Error| {
        RegistryError::Nats(format!(
            "cannot {what} of the {} service: {e}",
            subjects::SERVICE_NAME
        ))
    };
    let service = nats
        .service_builder()
        .description(format!(
            "lineage registry reads, cluster {}, member {} on node {}",
            config.cluster, config.raft_id, config.node
        ))
        .metadata(HashMap::from([
            ("cluster".to_owned(), config.cluster.clone()),
            ("raft_id".to_owned(), config.raft_id.to_string()),
            ("node".to_owned(), config.node.to_string()),
        ]))
        .start(subjects::SERVICE_NAME, env!("CARGO_PKG_VERSION"))
        .await
        .map_err(|e| failed("start the instance", e))?;
    let mut endpoints = Vec::new();
    for (name, subject, metadata) in read_endpoints(config) {
        let endpoint = service
            .endpoint_builder()
            .name(name)
            .metadata(metadata)
            .queue_group(subjects::QUEUE_GROUP)
            .add(subject)
            .await
            .map_err(|e| failed("add an endpoint", e))?;
        endpoints.push(endpoint);
    }
    Ok((service, endpoints))
}

/// The headers a read reply fails with: `malformed` 400, `unavailable` 503. A `not_leader`
/// reply is a redirect the client follows, not an error.
pub(crate) fn read_failure(reply: &ReadReply) -> Option<lineage_bus::service::ServiceFailure> {
    use lineage_bus::service::ServiceFailure;
    match reply {
        ReadReply::Done { .. } | ReadReply::NotLeader { .. } => None,
        ReadReply::Malformed { reason } => Some(ServiceFailure::new(
            400,
            &format!("malformed registry read: {reason}"),
        )),
        ReadReply::Unavailable { reason } => Some(ServiceFailure::new(
            503,
            &format!("registry unavailable: {reason}"),
        )),
        ReadReply::TooLarge { reason } => Some(ServiceFailure::new(
            413,
            &format!("registry answer too large: {reason}"),
        )),
    }
}

/// Room left in a message for its headers (the service error headers, a trace context).
const REPLY_HEADROOM: usize = 4096;

/// `reply` encoded, or a `too_large` reply when it would not fit in one message of at most
/// `max_payload` bytes (NATS drops such a publish and the caller would wait out its deadline).
pub(crate) fn encode_read_reply(
    reply: ReadReply,
    max_payload: usize,
) -> Result<(Vec<u8>, ReadReply), serde_json::Error> {
    let body = serde_json::to_vec(&reply)?;
    if body.len() + REPLY_HEADROOM <= max_payload {
        return Ok((body, reply));
    }
    let too_large = ReadReply::TooLarge {
        reason: format!(
            "the answer is {} bytes, more than this server's max_payload of {max_payload} bytes allows; read it in pages (list_sessions with a filter, subtree_page)",
            body.len()
        ),
    };
    Ok((serde_json::to_vec(&too_large)?, too_large))
}

#[derive(Clone)]
pub(crate) struct Server {
    pub(crate) raft: RegistryRaft,
    pub(crate) state: SharedState,
    pub(crate) nats: Client,
    pub(crate) raft_id: u64,
    /// Commands for [`batch_writes`].
    pub(crate) writes: mpsc::Sender<PendingWrite>,
    pub(crate) max_command_bytes: usize,
}

impl Server {
    /// Serves the writes of one subscription until `stop` (plain core NATS: writes are not
    /// part of the `lineage-registry` service).
    pub(crate) async fn serve_writes(
        self,
        mut sub: async_nats::Subscriber,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                msg = sub.next() => {
                    let Some(msg) = msg else { break };
                    if !from_a_client(&msg) {
                        continue;
                    }
                    let Some(reply) = msg.reply.clone() else { continue };
                    let this = self.clone();
                    let span = request_span(
                        true,
                        this.raft_id,
                        lineage_bus::trace::TraceContext::from_headers(msg.headers.as_ref()),
                    );
                    tokio::spawn(async move {
                        let sender = subjects::sender_of(msg.subject.as_str());
                        let body =
                            serde_json::to_vec(&this.write(&msg.payload, sender).instrument(span).await);
                        match body {
                            Ok(body) => {
                                if let Err(e) = this.nats.publish(reply, Bytes::from(body)).await {
                                    tracing::debug!(error = %e, "registry reply failed");
                                }
                            }
                            Err(e) => tracing::error!(error = %e, "registry reply encode failed"),
                        }
                    });
                }
            }
        }
        let _ = sub.unsubscribe().await;
    }

    /// Serves the reads of one endpoint of the `lineage-registry` service until `stop`.
    pub(crate) async fn serve_reads(
        self,
        mut endpoint: async_nats::service::endpoint::Endpoint,
        sink: lineage_bus::service::Sink,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                request = endpoint.next() => {
                    let Some(request) = request else { break };
                    let msg = &request.message;
                    if !from_a_client(msg) || msg.reply.is_none() {
                        continue;
                    }
                    let this = self.clone();
                    let sink = sink.clone();
                    let span = request_span(
                        false,
                        this.raft_id,
                        lineage_bus::trace::TraceContext::from_headers(msg.headers.as_ref()),
                    );
                    tokio::spawn(async move {
                        let reply = this.read(&request.message.payload).instrument(span).await;
                        let max_payload = this.nats.server_info().max_payload;
                        match encode_read_reply(reply, max_payload) {
                            Ok((body, reply)) => {
                                let failure = read_failure(&reply);
                                if let Err(e) = lineage_bus::service::respond(
                                    &this.nats, request, body, failure, &sink,
                                )
                                .await
                                {
                                    tracing::debug!(error = %e, "registry reply failed");
                                }
                            }
                            Err(e) => tracing::error!(error = %e, "registry reply encode failed"),
                        }
                    });
                }
            }
        }
        let _ = endpoint.stop().await;
    }

    /// Serves one write (a command, or a JSON array of them: [`Server::write_many`]); `sender`
    /// is the writer's identity from an identified subject.
    async fn write(&self, payload: &[u8], sender: Option<&str>) -> WriteReply {
        if write_many::is_many(payload) {
            return self.write_many(payload, sender).await;
        }
        match self.enqueue(payload, sender).await {
            Ok(answer) => answer.await.unwrap_or_else(|_| shutting_down()),
            Err(reply) => reply,
        }
    }

    /// Decodes and checks one command and queues it for its batch: where its reply will come,
    /// or the reply at once (refused, or the member is shutting down).
    async fn enqueue(
        &self,
        payload: &[u8],
        sender: Option<&str>,
    ) -> Result<oneshot::Receiver<WriteReply>, WriteReply> {
        let refused = |refusal| WriteReply::Done {
            response: CommandResponse::Refused(refusal),
        };
        if payload.len() > self.max_command_bytes {
            // A larger entry might not fit in one append-entries request, which would stall
            // replication for good.
            return Err(refused(RegistryRefusal::Malformed {
                reason: format!(
                    "the command is {} bytes, more than the {} bytes a command may take",
                    payload.len(),
                    self.max_command_bytes
                ),
            }));
        }
        let cmd = decode_command(payload).map_err(refused)?;
        if let Some(sender) = sender {
            crate::identity::check_sender(&cmd, sender).map_err(refused)?;
        }
        let (reply, answer) = oneshot::channel();
        let pending = PendingWrite {
            cmd,
            bytes: payload.len(),
            reply,
        };
        if self.writes.send(pending).await.is_err() {
            return Err(shutting_down());
        }
        Ok(answer)
    }

    async fn read(&self, payload: &[u8]) -> ReadReply {
        let req: ReadRequest = match serde_json::from_slice(payload) {
            Ok(r) => r,
            Err(e) => {
                return ReadReply::Malformed {
                    reason: e.to_string(),
                }
            }
        };
        if req.consistency == Consistency::Linearizable {
            match self
                .raft
                .ensure_linearizable(openraft::ReadPolicy::ReadIndex)
                .await
            {
                Ok(_) => {}
                Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(f))) => {
                    return ReadReply::NotLeader {
                        leader: f.leader_id.filter(|l| *l != self.raft_id),
                    }
                }
                Err(e) => {
                    return ReadReply::Unavailable {
                        reason: e.to_string(),
                    }
                }
            }
        }
        let data = match self.state.read() {
            Ok(d) => d,
            Err(_) => {
                return ReadReply::Unavailable {
                    reason: "state machine lock poisoned".into(),
                }
            }
        };
        let s = &data.state;
        let result = match req.query {
            Query::Session { session } => {
                QueryResult::Session(s.session(&session).cloned().map(Box::new))
            }
            Query::Subtree { root } => QueryResult::Sessions(s.subtree(&root)),
            Query::SubtreePage { root, after, limit } => {
                let limit = limit.clamp(1, SUBTREE_PAGE_MAX) as usize;
                let (mut sessions, mut more) = s.subtree_page(&root, after.as_ref(), limit);
                // Keep the reply well under max_payload, whatever the records weigh.
                let mut bytes = 0usize;
                let mut keep = sessions.len();
                for (i, record) in sessions.iter().enumerate() {
                    bytes += serde_json::to_vec(record).map_or(0, |v| v.len() + 1);
                    if i > 0 && bytes > SUBTREE_PAGE_BYTES {
                        keep = i;
                        break;
                    }
                }
                if keep < sessions.len() {
                    sessions.truncate(keep);
                    more = true;
                }
                let next = if more {
                    sessions.last().map(|r| r.id().clone())
                } else {
                    None
                };
                QueryResult::Page { sessions, next }
            }
            Query::PurgeCandidates {
                now_ms,
                disposed_after_ms,
                limit,
            } => QueryResult::SessionIds(s.purge_candidates(
                now_ms,
                disposed_after_ms,
                usize::try_from(limit).unwrap_or(usize::MAX),
            )),
            Query::ListSessions {
                filter,
                after,
                limit,
            } => {
                let (mut sessions, mut next) = s.list_page(&filter, after.as_ref(), limit);
                // Keep the reply well under max_payload: cut after the last record that fits
                // and go on from it.
                let mut bytes = 0usize;
                for (i, record) in sessions.iter().enumerate() {
                    bytes += serde_json::to_vec(record).map_or(0, |v| v.len() + 1);
                    if i > 0 && bytes > SUBTREE_PAGE_BYTES {
                        sessions.truncate(i);
                        next = sessions.last().map(|r| crate::listing::ListCursor {
                            created_at_ms: r.created_at_ms,
                            id: r.id().clone(),
                        });
                        break;
                    }
                }
                QueryResult::Listed { sessions, next }
            }
            Query::IsAncestor {
                ancestor,
                descendant,
            } => QueryResult::Bool(s.is_ancestor(&ancestor, &descendant)),
            Query::SessionsOnNode { node } => QueryResult::Sessions(s.sessions_on_node(&node)),
            Query::OverdueBirths { now_ms, limit } => QueryResult::Sessions(
                s.overdue_births(now_ms, usize::try_from(limit).unwrap_or(usize::MAX)),
            ),
            Query::SpentBudgetOver { session } => {
                QueryResult::BudgetSpent(s.spent_budget_over(&session))
            }
            Query::SpentBudgets { limit } => {
                QueryResult::Sessions(s.spent_budgets(usize::try_from(limit).unwrap_or(usize::MAX)))
            }
            Query::OverdueDeadlines { now_ms, limit } => QueryResult::Sessions(
                s.overdue_deadlines(now_ms, usize::try_from(limit).unwrap_or(usize::MAX)),
            ),
            Query::Children { session } => QueryResult::Children(s.children(&session)),
            Query::Nodes => QueryResult::Nodes(s.nodes()),
            Query::Digest => QueryResult::Digest(s.digest()),
            Query::SessionCounts => QueryResult::Counts(s.session_counts()),
            Query::Status => QueryResult::Status(self.status()),
        };
        ReadReply::Done { result }
    }

    fn status(&self) -> RegistryStatus {
        let m = crate::raft_types::current_metrics(&self.raft);
        let membership = m.membership_config.membership();
        RegistryStatus {
            responder: self.raft_id,
            leader: m.current_leader,
            voters: membership.voter_ids().collect(),
            learners: membership.learner_ids().collect(),
            term: m.current_term,
            last_applied: m.last_applied.map(|l| l.index),
            commit_index: quorum_index(&m).or(m.last_applied.map(|l| l.index)),
            last_log_index: m.last_log_index,
        }
    }
}

/// On the leader: the highest log index stored on a majority of voters (the commit index).
pub(crate) fn quorum_index(m: &Metrics) -> Option<u64> {
    let replication = m.replication.as_ref()?;
    let membership = m.membership_config.membership();
    let mut matched: Vec<u64> = membership
        .voter_ids()
        .map(|id| {
            replication
                .get(&id)
                .and_then(|l| l.as_ref().map(|l| l.index))
                .unwrap_or(0)
        })
        .collect();
    if matched.is_empty() {
        return None;
    }
    matched.sort_unstable_by(|a, b| b.cmp(a));
    matched.get(matched.len() / 2).copied()
}

/// Whether `msg` is a client's request on a registry subject. A push consumer's delivery keeps
/// the stored message's own subject: a message JetStream delivered, or one not on a registry
/// subject, is not a request to this member (dropped, with a warning).
fn from_a_client(msg: &async_nats::Message) -> bool {
    if subjects::delivered_by_jetstream(msg) || !msg.subject.as_str().contains(".registry.") {
        tracing::warn!(subject = %msg.subject, "dropped a registry request delivered by JetStream (a redirected stored message, not a client)");
        return false;
    }
    true
}

/// The reply of a member that stops while a write waits.
fn shutting_down() -> WriteReply {
    WriteReply::Unavailable {
        reason: "the member is shutting down".into(),
    }
}

#[cfg(test)]
mod service_tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The `queries` metadata names exactly the kinds a read takes: serde's refusal of an unknown
    /// kind lists them all.
    #[test]
    fn o3_the_read_endpoints_list_every_query_kind() {
        let e = serde_json::from_value::<Query>(serde_json::json!({"query": "?"}))
            .unwrap_err()
            .to_string();
        let listed: BTreeSet<&str> = e.split('`').skip(3).step_by(2).collect();
        assert_eq!(listed, QUERY_KINDS.into_iter().collect(), "{e}");
    }
}
