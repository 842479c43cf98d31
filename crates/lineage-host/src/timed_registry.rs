//! [`TimedRegistry`]: the host's [`RegistryPort`] with every write timed into
//! `lineage_registry_write_duration_seconds` ([`HostMetrics`]; a write of several commands is
//! one write); reads pass through untouched.

use std::sync::Arc;

use lineage_core::ids::{NodeId, SessionId};
use lineage_drivers::driver::BoxFuture;
use lineage_registry::types::{Command, CommandResponse, NodeRecord, SessionRecord};

use crate::clock::Clock;
use crate::error::HostError;
use crate::registry::RegistryPort;
use crate::telemetry::HostMetrics;

/// A registry port whose writes are timed on the host's clock.
pub(crate) struct TimedRegistry {
    /// The port it times.
    pub(crate) inner: Arc<dyn RegistryPort>,
    /// Where the durations go.
    pub(crate) metrics: Arc<HostMetrics>,
    /// The host's clock.
    pub(crate) clock: Arc<dyn Clock>,
}

impl RegistryPort for TimedRegistry {
    fn write(&self, command: Command) -> BoxFuture<'_, Result<CommandResponse, HostError>> {
        Box::pin(async move {
            let began = self.clock.now_ms();
            let out = self.inner.write(command).await;
            self.metrics
                .registry_wrote(self.clock.now_ms().saturating_sub(began));
            out
        })
    }

    fn session(&self, id: SessionId) -> BoxFuture<'_, Result<Option<SessionRecord>, HostError>> {
        self.inner.session(id)
    }

    fn write_many(
        &self,
        commands: Vec<Command>,
    ) -> BoxFuture<'_, Result<Vec<Result<CommandResponse, HostError>>, HostError>> {
        Box::pin(async move {
            let began = self.clock.now_ms();
            let out = self.inner.write_many(commands).await;
            self.metrics
                .registry_wrote(self.clock.now_ms().saturating_sub(began));
            out
        })
    }

    fn session_recent(
        &self,
        id: SessionId,
    ) -> BoxFuture<'_, Result<Option<SessionRecord>, HostError>> {
        self.inner.session_recent(id)
    }

    fn subtree(&self, root: SessionId) -> BoxFuture<'_, Result<Vec<SessionRecord>, HostError>> {
        self.inner.subtree(root)
    }

    fn is_ancestor(
        &self,
        ancestor: SessionId,
        descendant: SessionId,
    ) -> BoxFuture<'_, Result<bool, HostError>> {
        self.inner.is_ancestor(ancestor, descendant)
    }

    fn sessions_on_node(
        &self,
        node: NodeId,
    ) -> BoxFuture<'_, Result<Vec<SessionRecord>, HostError>> {
        self.inner.sessions_on_node(node)
    }

    fn nodes(&self) -> BoxFuture<'_, Result<Vec<NodeRecord>, HostError>> {
        self.inner.nodes()
    }

    fn overdue_births(
        &self,
        now_ms: u64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<SessionRecord>, HostError>> {
        self.inner.overdue_births(now_ms, limit)
    }

    fn overdue_deadlines(
        &self,
        now_ms: u64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<SessionRecord>, HostError>> {
        self.inner.overdue_deadlines(now_ms, limit)
    }

    fn spent_budgets(&self, limit: u32) -> BoxFuture<'_, Result<Vec<SessionRecord>, HostError>> {
        self.inner.spent_budgets(limit)
    }

    fn spent_budget_over(
        &self,
        session: SessionId,
    ) -> BoxFuture<'_, Result<Option<lineage_core::budget::BudgetSpent>, HostError>> {
        self.inner.spent_budget_over(session)
    }

    fn purge_candidates(
        &self,
        now_ms: u64,
        disposed_after_ms: u64,
        limit: u32,
    ) -> BoxFuture<'_, Result<Vec<SessionId>, HostError>> {
        self.inner
            .purge_candidates(now_ms, disposed_after_ms, limit)
    }
}
