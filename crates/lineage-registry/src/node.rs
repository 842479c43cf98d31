//! [`RegistryNode`]: one member (voter or learner) of the registry group.
//!
//! Starting opens the redb store (refusing a foreign or corrupt one), builds the openraft
//! instance and serves three kinds of NATS requests until [`RegistryNode::shutdown`]: Raft RPCs
//! from peers, writes and reads from [`crate::RegistryClient`]s anywhere. The reads are the
//! endpoints of this member's instance of the `lineage-registry` NATS micro service
//! ([`subjects::SERVICE_NAME`]: `nats micro info lineage-registry` lists them; a malformed or
//! unavailable read is counted as an error in `$SRV.STATS`); writes and Raft stay plain
//! subscriptions.
//!
//! Bootstrap happens exactly once: [`RegistryNode::initialize`] is a no-op on a member that
//! already has a vote or a log (a restarted member never re-initializes).
//!
//! Writes are group-committed: openraft 0.9 appends and fsyncs every `client_write` on its own,
//! one after the other, so one command per entry caps the leader at one fsync per command. The
//! member instead queues the commands it receives and proposes them as one entry (a
//! [`CommandBatch`]) whenever fewer than [`MAX_BATCHES_IN_FLIGHT`] entries of its own are still
//! on their way to being applied: under load, everything that arrived meanwhile goes into the
//! next entry (one fsync on the leader, one on each follower, for all of it); alone, a command
//! goes at once. Each command is answered only after its entry is committed (fsync'd on a
//! quorum) and applied, exactly as before.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_nats::Client;
use bytes::Bytes;
use futures::StreamExt;
use lineage_core::ids::NodeId;
use openraft::error::{CheckIsLeaderError, ClientWriteError, InitializeError, RaftError};
use openraft::{ChangeMembers, Config, SnapshotPolicy};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::check_quorum::{quorum_lost_after, watch_quorum, StandAside};
use crate::client::RegistryClient;
use crate::error::RegistryError;
use crate::network::{chunk_size_for, serve_raft, NatsNetworkFactory};
use crate::raft_types::{Metrics, RaftMember, RegistryRaft};
use crate::state::RegistryState;
use crate::storage::{open_store, SharedState};
use crate::subjects;
use crate::types::{Command, CommandBatch, CommandResponse, RegistryRefusal};
use crate::wire::{
    decode_command, Consistency, Query, QueryResult, ReadReply, ReadRequest, RegistryStatus,
    WriteReply, SUBTREE_PAGE_BYTES, SUBTREE_PAGE_MAX,
};

/// Most commands in one log entry.
pub const MAX_BATCH_COMMANDS: usize = 256;

/// Entries a member proposes at once (appended, replicating or being applied). While they are
/// all in flight, new commands queue up and go together into the next entry.
pub const MAX_BATCHES_IN_FLIGHT: usize = 2;

/// Commands waiting for a batch slot, per member (then the serving tasks wait).
const WRITE_QUEUE: usize = 4096;

/// How to run one registry member.
#[derive(Debug, Clone)]
pub struct RegistryNodeConfig {
    /// The cluster name: one NATS subject token, e.g. `prod`.
    pub cluster: String,
    /// This member's Raft id (unique in the group, stable across restarts).
    pub raft_id: u64,
    /// The lineage node that hosts this member.
    pub node: NodeId,
    /// Where `registry.redb` lives.
    pub data_dir: PathBuf,
    /// Leader heartbeat interval.
    pub heartbeat_interval: Duration,
    /// Lower bound of the randomized election timeout.
    pub election_timeout_min: Duration,
    /// Upper bound of the randomized election timeout.
    pub election_timeout_max: Duration,
    /// Build a snapshot after at least this many applied commands since the last one (more
    /// for a large state: see [`crate::snapshot_policy`]).
    pub snapshot_commands_since_last: u64,
    /// Log entries kept behind the last snapshot (older ones are purged).
    pub max_in_snapshot_log_to_keep: u64,
    /// Snapshot chunk size in bytes; `None` derives it from the server's `max_payload`.
    pub snapshot_chunk_bytes: Option<usize>,
}

impl RegistryNodeConfig {
    /// Sane defaults for a LAN: heartbeat 250 ms, election 1000–2000 ms, snapshot after 20,000
    /// commands (a quarter of the records for a large state), keep 1000 entries behind it. (openraft uses the heartbeat interval as the
    /// append-entries deadline, so a short one times out replication under load.)
    pub fn new(cluster: impl Into<String>, raft_id: u64, node: NodeId, data_dir: PathBuf) -> Self {
        Self {
            cluster: cluster.into(),
            raft_id,
            node,
            data_dir,
            heartbeat_interval: Duration::from_millis(250),
            election_timeout_min: Duration::from_millis(1000),
            election_timeout_max: Duration::from_millis(2000),
            snapshot_commands_since_last: 20_000,
            max_in_snapshot_log_to_keep: 1000,
            snapshot_chunk_bytes: None,
        }
    }

    /// Fast timings for tests on one machine: heartbeat 50 ms, election 150–300 ms.
    pub fn fast(mut self) -> Self {
        self.heartbeat_interval = Duration::from_millis(50);
        self.election_timeout_min = Duration::from_millis(150);
        self.election_timeout_max = Duration::from_millis(300);
        self
    }
}

/// One running registry member.
pub struct RegistryNode {
    config: RegistryNodeConfig,
    raft: RegistryRaft,
    state: SharedState,
    nats: Client,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    db: Option<Arc<redb::Database>>,
    store_stats: Arc<crate::store_stats::StoreStats>,
    /// The `lineage-registry` micro service instance of this member (its read side).
    service: Option<async_nats::service::Service>,
}

fn raft_err<E: std::fmt::Display>(e: E) -> RegistryError {
    RegistryError::Raft(e.to_string())
}

impl RegistryNode {
    /// Opens the store in `config.data_dir` (refusing a foreign or corrupt one), starts Raft and
    /// serves the member's NATS subjects.
    pub async fn start(config: RegistryNodeConfig, nats: Client) -> Result<Self, RegistryError> {
        if !subjects::valid_cluster(&config.cluster) {
            return Err(RegistryError::Raft(format!(
                "cluster name {:?} is not one NATS subject token (letters, digits, '-', '_')",
                config.cluster
            )));
        }
        // Loading a large snapshot takes seconds of CPU: on a blocking thread.
        let (dir, cluster, raft_id) = (
            config.data_dir.clone(),
            config.cluster.clone(),
            config.raft_id,
        );
        let (log_store, sm_store) =
            tokio::task::spawn_blocking(move || open_store(&dir, &cluster, raft_id))
                .await
                .map_err(|e| RegistryError::Storage(format!("opening the store failed: {e}")))??;
        let state = sm_store.shared();
        let db = Some(sm_store.db_handle());
        let store_stats = sm_store.stats();
        let max_payload = nats.server_info().max_payload;
        let chunk = config
            .snapshot_chunk_bytes
            .unwrap_or_else(|| chunk_size_for(max_payload));
        let raft_config = Config {
            cluster_name: config.cluster.clone(),
            heartbeat_interval: config.heartbeat_interval.as_millis() as u64,
            election_timeout_min: config.election_timeout_min.as_millis() as u64,
            election_timeout_max: config.election_timeout_max.as_millis() as u64,
            install_snapshot_timeout: 2000,
            // Triggered by `trigger_snapshots` instead (crate::snapshot_policy).
            snapshot_policy: SnapshotPolicy::Never,
            max_in_snapshot_log_to_keep: config.max_in_snapshot_log_to_keep,
            snapshot_max_chunk_size: chunk as u64,
            ..Default::default()
        }
        .validate()
        .map_err(raft_err)?;
        let stand_aside = StandAside::default();
        let network =
            NatsNetworkFactory::new(nats.clone(), config.cluster.clone(), stand_aside.clone());
        let raft = RegistryRaft::new(
            config.raft_id,
            Arc::new(raft_config),
            network,
            log_store,
            sm_store,
        )
        .await
        .map_err(raft_err)?;

        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        // Subscribe before returning, so the member is reachable as soon as start() is done.
        let raft_task = {
            let (client, cluster, raft, rx) = (
                nats.clone(),
                config.cluster.clone(),
                raft.clone(),
                stop_rx.clone(),
            );
            let id = config.raft_id;
            tokio::spawn(async move {
                if let Err(e) = serve_raft(client, cluster, id, raft, rx).await {
                    tracing::error!(error = %e, "raft rpc service stopped");
                }
            })
        };
        tasks.push(raft_task);
        tasks.push(tokio::spawn(watch_quorum(
            raft.clone(),
            stand_aside,
            quorum_lost_after(config.election_timeout_max),
            stop_rx.clone(),
        )));
        tasks.push(tokio::spawn(trigger_snapshots(
            raft.clone(),
            state.clone(),
            store_stats.clone(),
            config.snapshot_commands_since_last,
            stop_rx.clone(),
        )));
        let limits = WriteLimits::for_max_payload(max_payload);
        let (writes, write_rx) = mpsc::channel(WRITE_QUEUE);
        tasks.push(tokio::spawn(batch_writes(
            raft.clone(),
            config.raft_id,
            write_rx,
            limits.batch_bytes,
            stop_rx.clone(),
        )));
        let server = Server {
            raft: raft.clone(),
            state: state.clone(),
            nats: nats.clone(),
            raft_id: config.raft_id,
            writes,
            max_command_bytes: limits.command_bytes,
        };
        for (subject, queue) in [
            (subjects::write(&config.cluster), true),
            (
                subjects::write_direct(&config.cluster, config.raft_id),
                false,
            ),
            (subjects::write_as_any(&config.cluster), true),
            (
                subjects::write_direct_as_any(&config.cluster, config.raft_id),
                false,
            ),
        ] {
            let sub = if queue {
                nats.queue_subscribe(subject.clone(), subjects::QUEUE_GROUP.to_owned())
                    .await
            } else {
                nats.subscribe(subject.clone()).await
            }
            .map_err(|e| RegistryError::Nats(e.to_string()))?;
            tasks.push(tokio::spawn(
                server.clone().serve_writes(sub, stop_rx.clone()),
            ));
        }
        let (service, endpoints) = start_read_service(&nats, &config).await?;
        let sink = lineage_bus::service::Sink(subjects::errors(&config.cluster, config.raft_id));
        for endpoint in endpoints {
            tasks.push(tokio::spawn(server.clone().serve_reads(
                endpoint,
                sink.clone(),
                stop_rx.clone(),
            )));
        }
        // Make sure the subscriptions reached the server before peers or clients call us.
        nats.flush()
            .await
            .map_err(|e| RegistryError::Nats(e.to_string()))?;
        Ok(Self {
            config,
            raft,
            state,
            nats,
            stop,
            tasks,
            db,
            store_stats,
            service: Some(service),
        })
    }

    /// This member's Raft id.
    pub fn raft_id(&self) -> u64 {
        self.config.raft_id
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &RegistryNodeConfig {
        &self.config
    }

    /// Bootstraps a new group with `members` (Raft id -> hosting node) as voters. Returns
    /// `Ok(false)` without doing anything when this member already has a vote or a log: a
    /// restarted or already-joined member never re-initializes.
    pub async fn initialize(&self, members: BTreeMap<u64, NodeId>) -> Result<bool, RegistryError> {
        if self.raft.is_initialized().await.map_err(raft_err)? {
            return Ok(false);
        }
        let nodes: BTreeMap<u64, RaftMember> = members
            .into_iter()
            .map(|(id, node)| (id, RaftMember::new(node)))
            .collect();
        match self.raft.initialize(nodes).await {
            Ok(()) => Ok(true),
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(false),
            Err(e) => Err(raft_err(e)),
        }
    }

    /// Adds a non-voting learner (must be called on the leader). With `blocking`, waits until the
    /// learner has caught up with the log.
    pub async fn add_learner(
        &self,
        raft_id: u64,
        node: NodeId,
        blocking: bool,
    ) -> Result<(), RegistryError> {
        self.raft
            .add_learner(raft_id, RaftMember::new(node), blocking)
            .await
            .map_err(raft_err)?;
        Ok(())
    }

    /// Sets the voter set (promotes learners, demotes voters; must be called on the leader).
    /// With `retain`, removed voters stay as learners.
    pub async fn change_membership(
        &self,
        voters: BTreeSet<u64>,
        retain: bool,
    ) -> Result<(), RegistryError> {
        self.raft
            .change_membership(voters, retain)
            .await
            .map_err(raft_err)?;
        Ok(())
    }

    /// Removes a member entirely (voter or learner; must be called on the leader).
    pub async fn remove_member(&self, raft_id: u64) -> Result<(), RegistryError> {
        let metrics = self.raft_metrics();
        let membership = metrics.membership_config.membership();
        if membership.voter_ids().any(|id| id == raft_id) {
            self.raft
                .change_membership(
                    ChangeMembers::RemoveVoters(BTreeSet::from([raft_id])),
                    false,
                )
                .await
                .map_err(raft_err)?;
        }
        let metrics = self.raft_metrics();
        if metrics
            .membership_config
            .membership()
            .get_node(&raft_id)
            .is_some()
        {
            self.raft
                .change_membership(ChangeMembers::RemoveNodes(BTreeSet::from([raft_id])), false)
                .await
                .map_err(raft_err)?;
        }
        Ok(())
    }

    /// A client over this member's NATS connection.
    pub fn client(&self) -> RegistryClient {
        RegistryClient::new(self.nats.clone(), self.config.cluster.clone())
    }

    /// A copy of the current Raft metrics.
    pub fn raft_metrics(&self) -> Metrics {
        self.raft.metrics().borrow().clone()
    }

    /// The openraft handle, for advanced operations (trigger a snapshot, wait for metrics).
    pub fn raft(&self) -> &RegistryRaft {
        &self.raft
    }

    /// What this member's store has spent on its load at open, snapshot builds and installs
    /// (shared: the figures move as the member works).
    pub fn store_stats(&self) -> Arc<crate::store_stats::StoreStats> {
        self.store_stats.clone()
    }

    /// A copy of this member's applied state (stale: no Raft round trip).
    pub fn local_state(&self) -> Result<RegistryState, RegistryError> {
        self.state
            .read()
            .map(|d| d.state.clone())
            .map_err(|_| RegistryError::Storage("state machine lock poisoned".into()))
    }

    /// The digest of this member's applied state (see [`RegistryState::digest`]).
    pub fn state_digest(&self) -> Result<u64, RegistryError> {
        self.local_state().map(|s| s.digest())
    }

    /// Stops serving, shuts Raft down and closes the store (the directory can be reopened).
    pub async fn shutdown(mut self) -> Result<(), RegistryError> {
        self.stop_service();
        let _ = self.stop.send(true);
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
        self.raft.shutdown().await.map_err(raft_err)?;
        // Raft's replication and storage tasks drop their store handles shortly after the core
        // stops; wait for the file lock to be released so the directory can be reopened.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while self.db.as_ref().is_some_and(|db| Arc::strong_count(db) > 1) {
            if tokio::time::Instant::now() >= deadline {
                return Err(RegistryError::Storage(
                    "the store is still in use 10 s after shutdown".into(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The last handle: dropping it closes the file here, before shutdown returns.
        if let Some(db) = self.db.take() {
            tokio::task::spawn_blocking(move || drop(db))
                .await
                .map_err(|e| RegistryError::Storage(e.to_string()))?;
        }
        Ok(())
    }
}

impl RegistryNode {
    /// Leaves the `lineage-registry` service: its discovery task (`$SRV.PING`, `INFO`, `STATS`)
    /// ends and its endpoints unsubscribe. Before the read tasks end: async-nats' `stop` ends
    /// the discovery task only while an endpoint is still there to be told.
    fn stop_service(&mut self) {
        if let Some(service) = self.service.take() {
            // `stop` awaits nothing: it signals the endpoints and aborts the discovery task.
            let _ = futures::FutureExt::now_or_never(service.stop());
        }
    }
}

impl Drop for RegistryNode {
    fn drop(&mut self) {
        self.stop_service();
        let _ = self.stop.send(true);
    }
}

/// The query kinds a registry read takes (the `query` tag of [`Query`]), as the endpoints'
/// `queries` metadata lists them.
const QUERY_KINDS: [&str; 16] = [
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
fn read_endpoints(
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
async fn start_read_service(
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
fn read_failure(reply: &ReadReply) -> Option<lineage_bus::service::ServiceFailure> {
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
    }
}

/// Size limits derived from the NATS server's `max_payload`, so that an entry always fits in
/// one append-entries request.
struct WriteLimits {
    /// The largest command accepted (its JSON).
    command_bytes: usize,
    /// A batch stops growing past this many bytes of command JSON.
    batch_bytes: usize,
}

impl WriteLimits {
    fn for_max_payload(max_payload: usize) -> Self {
        // 0 means unknown: assume the NATS default of 1 MiB.
        let max_payload = if max_payload == 0 {
            1024 * 1024
        } else {
            max_payload
        };
        Self {
            command_bytes: max_payload / 2,
            batch_bytes: max_payload / 4,
        }
    }
}

/// A decoded command waiting for its batch.
struct PendingWrite {
    cmd: Command,
    /// Its JSON size as received.
    bytes: usize,
    reply: oneshot::Sender<WriteReply>,
}

/// How often [`trigger_snapshots`] looks.
const SNAPSHOT_CHECK: Duration = Duration::from_millis(500);

/// Asks Raft for a snapshot whenever [`crate::snapshot_policy::snapshot_due`] says so, until
/// `stop` fires. (openraft skips the request while a build is under way.)
async fn trigger_snapshots(
    raft: RegistryRaft,
    state: SharedState,
    stats: Arc<crate::store_stats::StoreStats>,
    min_commands: u64,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(SNAPSHOT_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = tick.tick() => {}
        }
        let Ok(records) = state.read().map(|d| d.state.session_count() as u64) else {
            break;
        };
        let since = stats.figures().commands_since_snapshot;
        if crate::snapshot_policy::snapshot_due(since, records, min_commands) {
            if let Err(e) = raft.trigger().snapshot().await {
                tracing::debug!(error = %e, "snapshot trigger refused");
                break;
            }
        }
    }
}

/// Proposes queued commands in batches, at most [`MAX_BATCHES_IN_FLIGHT`] at once, until `stop`
/// fires or every sender is gone.
async fn batch_writes(
    raft: RegistryRaft,
    raft_id: u64,
    mut queue: mpsc::Receiver<PendingWrite>,
    batch_bytes: usize,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(MAX_BATCHES_IN_FLIGHT));
    let mut carried: Option<PendingWrite> = None;
    loop {
        let slot = tokio::select! {
            _ = stop.changed() => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let first = match carried.take() {
            Some(first) => first,
            None => tokio::select! {
                _ = stop.changed() => break,
                first = queue.recv() => match first {
                    Some(first) => first,
                    None => break,
                },
            },
        };
        let mut bytes = first.bytes;
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH_COMMANDS {
            match queue.try_recv() {
                Ok(next) if bytes.saturating_add(next.bytes) > batch_bytes => {
                    carried = Some(next);
                    break;
                }
                Ok(next) => {
                    bytes = bytes.saturating_add(next.bytes);
                    batch.push(next);
                }
                Err(_) => break,
            }
        }
        let raft = raft.clone();
        tokio::spawn(async move {
            let (commands, replies): (Vec<Command>, Vec<oneshot::Sender<WriteReply>>) =
                batch.into_iter().map(|p| (p.cmd, p.reply)).unzip();
            let result = raft.client_write(CommandBatch { commands }).await;
            drop(slot);
            match result {
                Ok(resp) => {
                    let mut responses = resp.data.responses.into_iter();
                    for reply in replies {
                        let answer = match responses.next() {
                            Some(response) => WriteReply::Done { response },
                            None => WriteReply::Unavailable {
                                reason: "the entry was applied without a response for this command"
                                    .into(),
                            },
                        };
                        let _ = reply.send(answer);
                    }
                }
                Err(e) => {
                    let answer = match e {
                        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
                            WriteReply::NotLeader {
                                leader: f.leader_id.filter(|l| *l != raft_id),
                            }
                        }
                        other => WriteReply::Unavailable {
                            reason: other.to_string(),
                        },
                    };
                    for reply in replies {
                        let _ = reply.send(answer.clone());
                    }
                }
            }
        });
    }
    // Whatever is still queued is dropped: those callers answer `Unavailable` and the clients
    // retry elsewhere.
}

/// Serves client writes and reads for one member.
/// The span of one client request served here, when the request carries a `traceparent`: a
/// child of the caller's context, named `registry.write` or `registry.read`, with the
/// `trace_id`, `span_id` and `parent_span_id` fields an exporter gives it its identity from.
/// (Raft replication serves many writes at once and is not traced.) Untraced requests, such as
/// lease heartbeats, get no span.
fn request_span(
    is_write: bool,
    raft_id: u64,
    parent: Option<lineage_bus::trace::TraceContext>,
) -> tracing::Span {
    let Some(parent) = parent else {
        return tracing::Span::none();
    };
    let ctx = parent.child();
    let (trace_id, span_id, parent_span_id) =
        (ctx.trace_id_hex(), ctx.span_id_hex(), parent.span_id_hex());
    if is_write {
        tracing::info_span!("registry.write", raft_id, %trace_id, %span_id, %parent_span_id)
    } else {
        tracing::info_span!("registry.read", raft_id, %trace_id, %span_id, %parent_span_id)
    }
}

#[derive(Clone)]
struct Server {
    raft: RegistryRaft,
    state: SharedState,
    nats: Client,
    raft_id: u64,
    /// Commands for [`batch_writes`].
    writes: mpsc::Sender<PendingWrite>,
    max_command_bytes: usize,
}

impl Server {
    /// Serves the writes of one subscription until `stop` (plain core NATS: writes are not
    /// part of the `lineage-registry` service).
    async fn serve_writes(self, mut sub: async_nats::Subscriber, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                msg = sub.next() => {
                    let Some(msg) = msg else { break };
                    // A push consumer's delivery keeps the stored message's own subject: anything
                    // not on a registry subject is not a request to this member.
                    if subjects::delivered_by_jetstream(&msg)
                        || !msg.subject.as_str().contains(".registry.")
                    {
                        tracing::warn!(subject = %msg.subject, "dropped a registry request delivered by JetStream (a redirected stored message, not a client)");
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
    async fn serve_reads(
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
                    if subjects::delivered_by_jetstream(msg)
                        || !msg.subject.as_str().contains(".registry.")
                    {
                        tracing::warn!(subject = %msg.subject, "dropped a registry request delivered by JetStream (a redirected stored message, not a client)");
                        continue;
                    }
                    if msg.reply.is_none() {
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
                        let failure = read_failure(&reply);
                        match serde_json::to_vec(&reply) {
                            Ok(body) => {
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

    /// Serves one write; `sender` is the writer's identity from an identified subject.
    async fn write(&self, payload: &[u8], sender: Option<&str>) -> WriteReply {
        if payload.len() > self.max_command_bytes {
            // A larger entry might not fit in one append-entries request, which would stall
            // replication for good.
            return WriteReply::Done {
                response: CommandResponse::Refused(RegistryRefusal::Malformed {
                    reason: format!(
                        "the command is {} bytes, more than the {} bytes a command may take",
                        payload.len(),
                        self.max_command_bytes
                    ),
                }),
            };
        }
        let cmd = match decode_command(payload) {
            Ok(cmd) => cmd,
            Err(refusal) => {
                return WriteReply::Done {
                    response: CommandResponse::Refused(refusal),
                }
            }
        };
        if let Some(sender) = sender {
            if let Err(refusal) = crate::identity::check_sender(&cmd, sender) {
                return WriteReply::Done {
                    response: CommandResponse::Refused(refusal),
                };
            }
        }
        let (reply, answer) = oneshot::channel();
        let pending = PendingWrite {
            cmd,
            bytes: payload.len(),
            reply,
        };
        if self.writes.send(pending).await.is_err() {
            return WriteReply::Unavailable {
                reason: "the member is shutting down".into(),
            };
        }
        answer.await.unwrap_or_else(|_| WriteReply::Unavailable {
            reason: "the member is shutting down".into(),
        })
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
            match self.raft.ensure_linearizable().await {
                Ok(_) => {}
                Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
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
        let m = self.raft.metrics().borrow().clone();
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
fn quorum_index(m: &Metrics) -> Option<u64> {
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

#[cfg(test)]
mod service_tests {
    use super::*;

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
