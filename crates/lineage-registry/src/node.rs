//! [`RegistryNode`]: one member (voter or learner) of the registry group.
//!
//! Starting opens the store (refusing a foreign or corrupt one), builds the openraft
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
//! Writes are group-committed: the member queues the commands it receives and proposes them
//! as one entry (a [`CommandBatch`](crate::types::CommandBatch)) whenever fewer than
//! [`MAX_BATCHES_IN_FLIGHT`] entries of its own are still on their way to being applied: under
//! load, everything that arrived meanwhile goes into the next entry (one fsync on the leader,
//! one on each follower, for all of it); alone, a command goes at once. Each command is
//! answered only after its entry is committed (fsync'd on a quorum) and applied.
//!
//! Stopping ([`RegistryNode::shutdown`]) hands leadership over first when this member leads
//! ([`crate::leader_transfer`], G4).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_nats::Client;
use lineage_core::ids::NodeId;
use openraft::error::{InitializeError, RaftError};
use openraft::{ChangeMembers, Config, SnapshotPolicy};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::check_quorum::{watch_quorum, QuorumTimes, StandAside};
use crate::client::RegistryClient;
use crate::error::RegistryError;
use crate::leader_transfer::HandOver;
use crate::network::{
    bind_direct, chunk_size_for, serve_direct, serve_raft, DirectRaft, Listening,
    NatsNetworkFactory,
};
use crate::raft_types::{Metrics, RaftMember, RegistryRaft};
use crate::service::{start_read_service, Server};
use crate::state::RegistryState;
use crate::storage::{open_store, SharedState};
use crate::subjects;
use crate::write_batch::{batch_writes, trigger_snapshots, WriteLimits};

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
    /// Where `registry.redb` and the Raft log (`raft-log/`) live.
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
    /// Whether a leader hands leadership over before it stops (G4; on by default: off only to
    /// measure what a stop costs without it).
    pub hand_over_on_shutdown: bool,
    /// Direct TCP links to the other members for the Raft RPCs (issue 35); `None`: every RPC
    /// goes through NATS.
    pub direct: Option<DirectRaft>,
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
            hand_over_on_shutdown: true,
            direct: None,
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
    /// The Raft log, released with the database at shutdown (its directory is locked).
    wal: Option<crate::storage::Wal>,
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
        let wal = Some(log_store.wal_handle());
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
            // A candidate first asks whether it would win (no term spent): a member cut off
            // for a while rejoins without unseating a working leader.
            enable_pre_vote: Some(true),
            // Entries go to the followers as soon as the leader's append is queued, while its
            // own fsync runs (the leader counts itself once the flush is done).
            broadcast_submitted_on_append: Some(true),
            // A restarted leader goes through an election like everyone: the state machine
            // is in memory and the committed id on disk may lag (storage.rs), so a leader
            // restored at once could serve a state older than what it had acknowledged.
            enable_leader_restore: Some(false),
            ..Default::default()
        }
        .validate()
        .map_err(raft_err)?;
        let stand_aside = StandAside::default();
        let mut network = NatsNetworkFactory::new(
            nats.clone(),
            config.cluster.clone(),
            chunk,
            stand_aside.clone(),
        );
        // Bound before the member starts: a taken address fails the start in one line.
        let direct_listener = match &config.direct {
            Some(direct) => {
                network = network.with_direct(config.raft_id, direct.clone());
                Some(bind_direct(direct.listen).await?)
            }
            None => None,
        };
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
        if let (Some(listener), Some(direct)) = (direct_listener, config.direct.as_ref()) {
            let listening = Listening {
                cluster: config.cluster.clone(),
                me: config.raft_id,
                token: direct.token.clone(),
                tls: direct.tls.clone(),
            };
            tasks.push(tokio::spawn(serve_direct(
                listener,
                listening,
                raft.clone(),
                stop_rx.clone(),
            )));
        }
        tasks.push(tokio::spawn(watch_quorum(
            raft.clone(),
            stand_aside,
            QuorumTimes::for_election_timeout(config.election_timeout_max),
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
            wal,
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
        crate::raft_types::current_metrics(&self.raft)
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

    /// Hands leadership to an up-to-date voter if this member leads ([`crate::leader_transfer`]),
    /// waiting up to twice the longest election timeout for another leader.
    pub async fn hand_over_leadership(&self) -> Result<HandOver, RegistryError> {
        let within = self.config.election_timeout_max * 2;
        let outcome = crate::leader_transfer::hand_over(&self.raft, within).await?;
        let raft_id = self.config.raft_id;
        match outcome {
            HandOver::HandedTo(to) => {
                tracing::info!(raft_id, to, "registry leadership handed over before stopping")
            }
            HandOver::NotTakenWithin(to) => tracing::warn!(
                raft_id,
                to,
                within_ms = within.as_millis() as u64,
                "registry leadership not taken over in time; stopping anyway (the others elect a leader)"
            ),
            HandOver::NotLeader | HandOver::NoOtherVoter => {}
        }
        Ok(outcome)
    }

    /// Stops serving, shuts Raft down and closes the store (the directory can be reopened).
    /// A leader first hands leadership over, unless
    /// [`RegistryNodeConfig::hand_over_on_shutdown`] is off.
    pub async fn shutdown(mut self) -> Result<(), RegistryError> {
        if self.config.hand_over_on_shutdown {
            if let Err(e) = self.hand_over_leadership().await {
                tracing::warn!(error = %e, "registry leadership hand-over failed; stopping anyway");
            }
        }
        self.stop_service();
        let _ = self.stop.send(true);
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
        self.raft.shutdown().await.map_err(raft_err)?;
        // Raft's replication and storage tasks drop their store handles shortly after the core
        // stops; wait for the file lock to be released so the directory can be reopened.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while self.db.as_ref().is_some_and(|db| Arc::strong_count(db) > 1)
            || self
                .wal
                .as_ref()
                .is_some_and(|wal| Arc::strong_count(wal) > 1)
        {
            if tokio::time::Instant::now() >= deadline {
                return Err(RegistryError::Storage(
                    "the store is still in use 10 s after shutdown".into(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The last handle: dropping it closes the file here, before shutdown returns.
        let (db, wal) = (self.db.take(), self.wal.take());
        if db.is_some() || wal.is_some() {
            tokio::task::spawn_blocking(move || drop((wal, db)))
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
