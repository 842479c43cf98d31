//! [`ObservedRegistry`]: the memory registry with some of its reads counted or answered by the
//! test, for tests of what the host reads and when.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use lineage_core::ids::{NodeId, SessionId};
use lineage_drivers::driver::BoxFuture;
use lineage_host::{HostError, MemoryRegistry, RegistryPort};
use lineage_registry::types::{Command, CommandResponse, NodeRecord, SessionRecord};

/// Every write and read goes to `inner` (the registry's own rules), and: `session_reads`
/// counts the linearizable reads of a session, `node_walks` the walks of a node's placements;
/// `recent`, when it holds a record of the session asked for, answers `session_recent` (a
/// member that lags).
#[derive(Clone, Default)]
pub struct ObservedRegistry {
    pub inner: MemoryRegistry,
    pub session_reads: Arc<AtomicUsize>,
    pub node_walks: Arc<AtomicUsize>,
    pub recent: Arc<Mutex<Option<SessionRecord>>>,
}

impl ObservedRegistry {
    /// A registry over `inner`, nothing counted yet, no lagging member.
    pub fn over(inner: MemoryRegistry) -> Self {
        ObservedRegistry {
            inner,
            ..Default::default()
        }
    }

    /// From now on `session_recent` of `record`'s session answers `record`.
    pub fn lag_at(&self, record: SessionRecord) {
        *self.recent.lock().unwrap() = Some(record);
    }

    /// The linearizable session reads so far.
    pub fn session_reads(&self) -> usize {
        self.session_reads.load(Ordering::SeqCst)
    }

    /// The placement walks so far.
    pub fn node_walks(&self) -> usize {
        self.node_walks.load(Ordering::SeqCst)
    }
}

impl RegistryPort for ObservedRegistry {
    fn write(&self, command: Command) -> BoxFuture<'_, Result<CommandResponse, HostError>> {
        self.inner.write(command)
    }
    fn session(&self, id: SessionId) -> BoxFuture<'_, Result<Option<SessionRecord>, HostError>> {
        self.session_reads.fetch_add(1, Ordering::SeqCst);
        self.inner.session(id)
    }
    fn session_recent(
        &self,
        id: SessionId,
    ) -> BoxFuture<'_, Result<Option<SessionRecord>, HostError>> {
        let lagging = self
            .recent
            .lock()
            .unwrap()
            .clone()
            .filter(|r| r.id() == &id);
        match lagging {
            Some(record) => Box::pin(async move { Ok(Some(record)) }),
            None => self.inner.session_recent(id),
        }
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
        self.node_walks.fetch_add(1, Ordering::SeqCst);
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
