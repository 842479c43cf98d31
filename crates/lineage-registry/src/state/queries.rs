//! Reads of the state: pages, subtrees, counts, what the sweepers look for, and the digest.

use super::*;

impl RegistryState {
    /// Q4: one page of the sessions `filter` keeps, oldest first, after `after` (see
    /// [`SessionIndex::page`]), and the cursor of the next page.
    pub fn list_page(
        &self,
        filter: &ListFilter,
        after: Option<&ListCursor>,
        limit: u32,
    ) -> (Vec<SessionRecord>, Option<ListCursor>) {
        self.index.page(&self.sessions, filter, after, limit)
    }

    /// One session's record.
    pub fn session(&self, id: &SessionId) -> Option<&SessionRecord> {
        self.sessions.get(id).map(|r| &**r)
    }

    /// Every session, by id.
    pub fn sessions(&self) -> impl Iterator<Item = &SessionRecord> {
        self.sessions.values().map(|r| &**r)
    }

    /// How many sessions are in each state (every state listed, zero included).
    pub fn session_counts(&self) -> std::collections::BTreeMap<String, u64> {
        let mut counts: std::collections::BTreeMap<String, u64> = SessionState::ALL
            .iter()
            .map(|s| (s.as_str().to_owned(), 0))
            .collect();
        for state in SessionState::ALL {
            counts.insert(state.as_str().to_owned(), self.index.count_in(state) as u64);
        }
        counts.insert("purged".to_owned(), self.tombstone.purged);
        counts
    }

    /// How many sessions the registry holds.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    pub(super) fn subtree_ids(&self, root: &SessionId) -> Vec<SessionId> {
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        let mut queue = VecDeque::from([root.clone()]);
        while let Some(id) = queue.pop_front() {
            if !seen.insert(id.clone()) {
                continue;
            }
            if let Some(record) = self.sessions.get(&id) {
                queue.extend(record.children.iter().cloned());
                out.push(id);
            }
        }
        out
    }

    /// The subtree under `root` (inclusive), parents before children (breadth first).
    pub fn subtree(&self, root: &SessionId) -> Vec<SessionRecord> {
        self.subtree_ids(root)
            .iter()
            .filter_map(|id| self.sessions.get(id).map(|r| (**r).clone()))
            .collect()
    }

    /// One page of the subtree under `root` (inclusive), in (level below `root`, id) order, so
    /// parents come before children within a page and across pages. `after` is the cursor:
    /// the last id of the previous page (`None` for the first page); at most `limit` records
    /// (at least one) follow it. Returns the records and whether more follow.
    ///
    /// The order is stable while the tree grows: sessions are never removed and parent links
    /// never change, so the cursor stays in the subtree at the same level. A session registered
    /// between two page reads is included only if it sorts after the cursor. A cursor outside
    /// the subtree yields an empty last page.
    pub fn subtree_page(
        &self,
        root: &SessionId,
        after: Option<&SessionId>,
        limit: usize,
    ) -> (Vec<SessionRecord>, bool) {
        let mut ordered: Vec<&SessionId> = Vec::new();
        let mut seen = BTreeSet::new();
        let mut level: Vec<&SessionId> = match self.sessions.get(root) {
            Some(record) => vec![record.id()],
            None => Vec::new(),
        };
        while !level.is_empty() {
            level.sort_unstable();
            level.retain(|id| seen.insert(*id));
            let mut next = Vec::new();
            for id in &level {
                if let Some(record) = self.sessions.get(*id) {
                    next.extend(
                        record
                            .children
                            .iter()
                            .filter(|c| self.sessions.contains_key(*c)),
                    );
                }
            }
            ordered.append(&mut level);
            level = next;
        }
        let start = match after {
            None => 0,
            Some(cursor) => match ordered.iter().position(|id| *id == cursor) {
                Some(i) => i + 1,
                None => ordered.len(),
            },
        };
        let end = start.saturating_add(limit.max(1)).min(ordered.len());
        let page = ordered[start..end]
            .iter()
            .filter_map(|id| self.sessions.get(*id).map(|r| (**r).clone()))
            .collect();
        (page, end < ordered.len())
    }

    /// True when `ancestor` is a strict ancestor of `descendant` (R3).
    pub fn is_ancestor(&self, ancestor: &SessionId, descendant: &SessionId) -> bool {
        let mut cursor = self
            .sessions
            .get(descendant)
            .and_then(|r| r.header.parent_session());
        let mut steps = 0usize;
        while let Some(current) = cursor {
            if current == ancestor {
                return true;
            }
            steps += 1;
            if steps > self.sessions.len() {
                return false;
            }
            cursor = self
                .sessions
                .get(current)
                .and_then(|r| r.header.parent_session());
        }
        false
    }

    /// Sessions placed on `node` that are not disposed, oldest first: from the node index (a
    /// walk of what was placed there, not a scan of every session). All of them in one answer:
    /// a client walks [`crate::listing`] pages instead (`RegistryClient::sessions_on_node`).
    pub fn sessions_on_node(&self, node: &NodeId) -> Vec<SessionRecord> {
        self.index
            .placed_on(node)
            .filter_map(|id| self.sessions.get(id))
            .filter(|r| r.state != SessionState::Disposed)
            .map(|r| (**r).clone())
            .collect()
    }

    /// The `starting` sessions whose start deadline is at or before `now_ms` (the caller's
    /// clock), oldest deadline first, at most `limit` (at least 1, at most
    /// [`OVERDUE_BIRTHS_PAGE`]): one page for the sweeper, which disposes them and asks again.
    pub fn overdue_births(&self, now_ms: u64, limit: usize) -> Vec<SessionRecord> {
        self.births_by_deadline
            .iter()
            .take_while(|(deadline, _)| *deadline <= now_ms)
            .take(limit.clamp(1, OVERDUE_BIRTHS_PAGE))
            .filter_map(|(_, id)| self.sessions.get(id).map(|r| (**r).clone()))
            .collect()
    }

    /// The undisposed sessions whose deadline (Q2) is at or before `now_ms` (the caller's
    /// clock), earliest first, at most `limit` (at least 1, at most
    /// [`OVERDUE_DEADLINES_PAGE`]): one page for the deadline sweeper, which drains them and
    /// asks again.
    pub fn overdue_deadlines(&self, now_ms: u64, limit: usize) -> Vec<SessionRecord> {
        self.sessions_by_deadline
            .iter()
            .take_while(|(deadline, _)| *deadline <= now_ms)
            .take(limit.clamp(1, OVERDUE_DEADLINES_PAGE))
            .filter_map(|(_, id)| self.sessions.get(id).map(|r| (**r).clone()))
            .collect()
    }

    /// The undisposed sessions whose budget (Q3) is spent, at most `limit` (at least 1, at most
    /// [`SPENT_BUDGETS_PAGE`]): one page for the budget sweeper, which drains them.
    pub fn spent_budgets(&self, limit: usize) -> Vec<SessionRecord> {
        self.spent_budgets
            .iter()
            .take(limit.clamp(1, SPENT_BUDGETS_PAGE))
            .filter_map(|id| self.sessions.get(id).map(|r| (**r).clone()))
            .collect()
    }

    /// The usage of `id`'s whole subtree (Q3), itself and disposed sessions included.
    pub fn subtree_usage(&self, id: &SessionId) -> UsageTotal {
        self.subtree_usage.get(id).cloned().unwrap_or_default()
    }

    /// Direct children of `id`, each with counts of its subagent descendants (I1).
    pub fn children(&self, id: &SessionId) -> Vec<ChildSummary> {
        let Some(record) = self.sessions.get(id) else {
            return Vec::new();
        };
        record
            .children
            .iter()
            .filter_map(|c| self.sessions.get(c))
            .map(|child| {
                let below = self.subtree_ids(child.id());
                let mut count = 0;
                let mut running_count = 0;
                for d in below.iter().skip(1) {
                    if let Some(r) = self.sessions.get(d) {
                        if r.header.is_subagent() {
                            count += 1;
                            if r.state == SessionState::Running {
                                running_count += 1;
                            }
                        }
                    }
                }
                ChildSummary {
                    record: (**child).clone(),
                    count,
                    running_count,
                }
            })
            .collect()
    }

    /// Every node record.
    pub fn nodes(&self) -> Vec<NodeRecord> {
        self.nodes.values().cloned().collect()
    }

    /// The stored first result for a request id, if the command was accepted (and its result
    /// is still within [`REQUEST_RETENTION_MS`]).
    pub fn request_outcome(&self, request_id: &RequestId) -> Option<&RequestOutcome> {
        self.requests.get(request_id)
    }

    /// How many accepted commands' results are stored for retries.
    pub fn request_count(&self) -> usize {
        self.requests.len()
    }

    /// A stable 64-bit digest (FNV-1a) of the serialized state: equal states, equal digests.
    pub fn digest(&self) -> u64 {
        let bytes = serde_json::to_vec(self).unwrap_or_default();
        fnv1a(&bytes)
    }
}
