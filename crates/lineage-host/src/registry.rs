//! [`RegistryPort`]: exactly what the host needs from the registry, behind a narrow object-safe
//! trait (async methods return [`BoxFuture`]).
//!
//! Writes are [`Command`]s (each carries its idempotency key and the caller's clock); a refusal
//! comes back as [`HostError::Refused`], so callers match on outcomes, not on responses. Reads
//! are the handful of queries the flows use. Two implementations:
//!
//! - `lineage_registry::RegistryClient` (the real, Raft-replicated registry);
//! - [`MemoryRegistry`], the registry's own pure state machine behind a mutex, for unit tests of
//!   host logic (same rules, no Raft).

use std::sync::{Arc, Mutex};

use lineage_core::ids::{NodeId, SessionId};
use lineage_registry::types::{Command, CommandResponse, NodeRecord, SessionRecord};
use lineage_registry::{Consistency, RegistryClient, RegistryError, RegistryState};

use crate::error::HostError;
use lineage_drivers::driver::BoxFuture;

/// What the host needs from the registry. Object safe: the host keeps `Arc<dyn RegistryPort>`.
pub trait RegistryPort: Send + Sync + 'static {
    /// Applies one command (linearizable). `Refused` becomes [`HostError::Refused`].
    fn write(&self, command: Command) -> BoxFuture<'_, Result<CommandResponse, HostError>>;
    /// Applies several commands in order, each on its own (not a transaction), in one round
    /// trip where the registry allows: one outcome per command, a refusal as
    /// [`HostError::Refused`]; `Err` when the registry could not be reached (some may have
    /// been applied: send them again, their request ids make that safe). By default one
    /// [`RegistryPort::write`] after the other.
    fn write_many(
        &self,
        commands: Vec<Command>,
    ) -> BoxFuture<'_, Result<Vec<Result<CommandResponse, HostError>>, HostError>> {
        Box::pin(async move {
            let mut outcomes = Vec::with_capacity(commands.len());
            for command in commands {
                match self.write(command).await {
                    Err(HostError::Refused(refusal)) => {
                        outcomes.push(Err(HostError::Refused(refusal)))
                    }
                    Err(e) => return Err(e),
                    Ok(response) => outcomes.push(Ok(response)),
                }
            }
            Ok(outcomes)
        })
    }
    /// One session's record (linearizable read), `None` when not registered.
    fn session(&self, id: SessionId) -> BoxFuture<'_, Result<Option<SessionRecord>, HostError>>;
    /// One session's record as a member last applied it (any member): it may lag the latest
    /// writes by a few milliseconds (a follower learns of a commit with the next append or
    /// heartbeat), never shows them out of order, and costs no round to a quorum. For
    /// decisions a later write fences, such as a cold resume's claim (CAS on the epoch).
    /// By default the linearizable [`RegistryPort::session`].
    fn session_recent(
        &self,
        id: SessionId,
    ) -> BoxFuture<'_, Result<Option<SessionRecord>, HostError>> {
        self.session(id)
    }
    /// The subtree under `root`, root included, parents before children.
    fn subtree(&self, root: SessionId) -> BoxFuture<'_, Result<Vec<SessionRecord>, HostError>>;
    /// True when `ancestor` is a strict ancestor of `descendant` (R3, across nodes).
    fn is_ancestor(
        &self,
        ancestor: SessionId,
        descendant: SessionId,
    ) -> BoxFuture<'_, Result<bool, HostError>>;
    /// Undisposed sessions placed on `node`.
    fn sessions_on_node(
        &self,
        node: NodeId,
    ) -> BoxFuture<'_, Result<Vec<SessionRecord>, HostError>>;
    /// Every node's lease record.
    fn nodes(&self) -> BoxFuture<'_, Result<Vec<NodeRecord>, HostError>>;
    /// One page (at most `limit`) of the `starting` sessions whose start is overdue at
    /// `now_ms`, oldest deadline first (the birth sweeper's read).
    fn overdue_births(
        &self,
        now_ms: u64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<SessionRecord>, HostError>>;
    /// One page (at most `limit`) of the undisposed sessions whose deadline (Q2) is at or
    /// before `now_ms`, earliest first (the deadline sweeper's read).
    fn overdue_deadlines(
        &self,
        now_ms: u64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<SessionRecord>, HostError>>;
    /// One page (at most `limit`) of the undisposed sessions whose budget (Q3) is spent (the
    /// budget sweeper's read).
    fn spent_budgets(&self, limit: u32) -> BoxFuture<'_, Result<Vec<SessionRecord>, HostError>>;
    /// The nearest spent budget (Q3) at or above `session`, if any.
    fn spent_budget_over(
        &self,
        session: SessionId,
    ) -> BoxFuture<'_, Result<Option<lineage_core::budget::BudgetSpent>, HostError>>;
    /// Q5: at most `limit` disposed sessions due to be purged at `now_ms` under a retention of
    /// `disposed_after_ms`, oldest disposal first (the retention sweeper's read).
    fn purge_candidates(
        &self,
        now_ms: u64,
        disposed_after_ms: u64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<SessionId>, HostError>>;
}

/// Maps a registry error to the host's error.
pub fn registry_error(e: RegistryError) -> HostError {
    match e {
        RegistryError::Refused(refusal) => HostError::Refused(refusal),
        RegistryError::Unavailable { .. }
        | RegistryError::Timeout { .. }
        | RegistryError::Shutdown
        | RegistryError::Nats(_) => HostError::RegistryUnavailable(e.to_string()),
        RegistryError::Storage(_)
        | RegistryError::CorruptDataDir { .. }
        | RegistryError::Codec(_)
        | RegistryError::Raft(_)
        | RegistryError::Config(_)
        | RegistryError::Unexpected(_) => HostError::Internal(e.to_string()),
    }
}

/// Turns a `Refused` response into an error.
fn refused_to_err(response: CommandResponse) -> Result<CommandResponse, HostError> {
    match response {
        CommandResponse::Refused(refusal) => Err(HostError::Refused(refusal)),
        other => Ok(other),
    }
}

/// The registry's pure state machine behind a mutex: the same rules as the real registry,
/// without Raft. For tests and single-process demos.
#[derive(Debug, Default, Clone)]
pub struct MemoryRegistry {
    state: Arc<Mutex<RegistryState>>,
}

impl MemoryRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut RegistryState) -> T) -> Result<T, HostError> {
        let mut guard = self
            .state
            .lock()
            .map_err(|_| HostError::Internal("memory registry mutex poisoned".to_owned()))?;
        Ok(f(&mut guard))
    }
}

impl RegistryPort for MemoryRegistry {
    fn write(&self, command: Command) -> BoxFuture<'_, Result<CommandResponse, HostError>> {
        let out = self.with(|s| s.apply(&command)).and_then(refused_to_err);
        Box::pin(async move { out })
    }

    fn session(&self, id: SessionId) -> BoxFuture<'_, Result<Option<SessionRecord>, HostError>> {
        let out = self.with(|s| s.session(&id).cloned());
        Box::pin(async move { out })
    }

    fn subtree(&self, root: SessionId) -> BoxFuture<'_, Result<Vec<SessionRecord>, HostError>> {
        let out = self.with(|s| s.subtree(&root));
        Box::pin(async move { out })
    }

    fn is_ancestor(
        &self,
        ancestor: SessionId,
        descendant: SessionId,
    ) -> BoxFuture<'_, Result<bool, HostError>> {
        let out = self.with(|s| s.is_ancestor(&ancestor, &descendant));
        Box::pin(async move { out })
    }

    fn sessions_on_node(
        &self,
        node: NodeId,
    ) -> BoxFuture<'_, Result<Vec<SessionRecord>, HostError>> {
        let out = self.with(|s| s.sessions_on_node(&node));
        Box::pin(async move { out })
    }

    fn nodes(&self) -> BoxFuture<'_, Result<Vec<NodeRecord>, HostError>> {
        let out = self.with(|s| s.nodes());
        Box::pin(async move { out })
    }

    fn overdue_births(
        &self,
        now_ms: u64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<SessionRecord>, HostError>> {
        let out =
            self.with(|s| s.overdue_births(now_ms, usize::try_from(limit).unwrap_or(usize::MAX)));
        Box::pin(async move { out })
    }

    fn overdue_deadlines(
        &self,
        now_ms: u64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<SessionRecord>, HostError>> {
        let out = self
            .with(|s| s.overdue_deadlines(now_ms, usize::try_from(limit).unwrap_or(usize::MAX)));
        Box::pin(async move { out })
    }

    fn spent_budgets(&self, limit: u32) -> BoxFuture<'_, Result<Vec<SessionRecord>, HostError>> {
        let out = self.with(|s| s.spent_budgets(usize::try_from(limit).unwrap_or(usize::MAX)));
        Box::pin(async move { out })
    }

    fn spent_budget_over(
        &self,
        session: SessionId,
    ) -> BoxFuture<'_, Result<Option<lineage_core::budget::BudgetSpent>, HostError>> {
        let out = self.with(|s| s.spent_budget_over(&session));
        Box::pin(async move { out })
    }

    fn purge_candidates(
        &self,
        now_ms: u64,
        disposed_after_ms: u64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<SessionId>, HostError>> {
        let out = self.with(|s| {
            s.purge_candidates(
                now_ms,
                disposed_after_ms,
                usize::try_from(limit).unwrap_or(usize::MAX),
            )
        });
        Box::pin(async move { out })
    }
}

/// The real registry. Writes go to the leader (retried with the same request id); reads are
/// linearizable, except [`RegistryPort::session_recent`] (any member's applied state).
impl RegistryPort for RegistryClient {
    fn write(&self, command: Command) -> BoxFuture<'_, Result<CommandResponse, HostError>> {
        Box::pin(async move {
            let response = RegistryClient::write(self, &command)
                .await
                .map_err(registry_error)?;
            refused_to_err(response)
        })
    }

    fn session(&self, id: SessionId) -> BoxFuture<'_, Result<Option<SessionRecord>, HostError>> {
        Box::pin(async move {
            RegistryClient::session(self, id, Consistency::Linearizable)
                .await
                .map_err(registry_error)
        })
    }

    fn write_many(
        &self,
        commands: Vec<Command>,
    ) -> BoxFuture<'_, Result<Vec<Result<CommandResponse, HostError>>, HostError>> {
        Box::pin(async move {
            let responses = RegistryClient::write_many(self, &commands)
                .await
                .map_err(registry_error)?;
            Ok(responses.into_iter().map(refused_to_err).collect())
        })
    }

    fn session_recent(
        &self,
        id: SessionId,
    ) -> BoxFuture<'_, Result<Option<SessionRecord>, HostError>> {
        Box::pin(async move {
            RegistryClient::session(self, id, Consistency::Stale)
                .await
                .map_err(registry_error)
        })
    }

    fn subtree(&self, root: SessionId) -> BoxFuture<'_, Result<Vec<SessionRecord>, HostError>> {
        Box::pin(async move {
            RegistryClient::subtree(self, root, Consistency::Linearizable)
                .await
                .map_err(registry_error)
        })
    }

    fn is_ancestor(
        &self,
        ancestor: SessionId,
        descendant: SessionId,
    ) -> BoxFuture<'_, Result<bool, HostError>> {
        Box::pin(async move {
            RegistryClient::is_ancestor(self, ancestor, descendant, Consistency::Linearizable)
                .await
                .map_err(registry_error)
        })
    }

    fn sessions_on_node(
        &self,
        node: NodeId,
    ) -> BoxFuture<'_, Result<Vec<SessionRecord>, HostError>> {
        Box::pin(async move {
            RegistryClient::sessions_on_node(self, node, Consistency::Linearizable)
                .await
                .map_err(registry_error)
        })
    }

    fn nodes(&self) -> BoxFuture<'_, Result<Vec<NodeRecord>, HostError>> {
        Box::pin(async move {
            RegistryClient::nodes(self, Consistency::Linearizable)
                .await
                .map_err(registry_error)
        })
    }

    fn overdue_births(
        &self,
        now_ms: u64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<SessionRecord>, HostError>> {
        Box::pin(async move {
            RegistryClient::overdue_births(self, now_ms, limit, Consistency::Linearizable)
                .await
                .map_err(registry_error)
        })
    }

    fn overdue_deadlines(
        &self,
        now_ms: u64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<SessionRecord>, HostError>> {
        Box::pin(async move {
            RegistryClient::overdue_deadlines(self, now_ms, limit, Consistency::Linearizable)
                .await
                .map_err(registry_error)
        })
    }

    fn spent_budgets(&self, limit: u32) -> BoxFuture<'_, Result<Vec<SessionRecord>, HostError>> {
        Box::pin(async move {
            RegistryClient::spent_budgets(self, limit, Consistency::Linearizable)
                .await
                .map_err(registry_error)
        })
    }

    fn spent_budget_over(
        &self,
        session: SessionId,
    ) -> BoxFuture<'_, Result<Option<lineage_core::budget::BudgetSpent>, HostError>> {
        Box::pin(async move {
            RegistryClient::spent_budget_over(self, session, Consistency::Linearizable)
                .await
                .map_err(registry_error)
        })
    }

    fn purge_candidates(
        &self,
        now_ms: u64,
        disposed_after_ms: u64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<SessionId>, HostError>> {
        Box::pin(async move {
            RegistryClient::purge_candidates(
                self,
                now_ms,
                disposed_after_ms,
                limit,
                Consistency::Linearizable,
            )
            .await
            .map_err(registry_error)
        })
    }
}
