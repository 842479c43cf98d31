//! [`RegistryClient`]'s typed reads: one method per [`Query`], each returning the answer it
//! expects (paged reads walk every page).

use lineage_core::ids::{NodeId, SessionId};

use crate::error::RegistryError;
use crate::types::{ChildSummary, NodeRecord, SessionRecord};
use crate::wire::{Consistency, Query, QueryResult, RegistryStatus};

use super::{unexpected_read, RegistryClient, SUBTREE_PAGE};

impl RegistryClient {
    /// One session's record.
    pub async fn session(
        &self,
        session: SessionId,
        consistency: Consistency,
    ) -> Result<Option<SessionRecord>, RegistryError> {
        match self.query(Query::Session { session }, consistency).await? {
            QueryResult::Session(r) => Ok(r.map(|b| *b)),
            other => Err(unexpected_read(&other)),
        }
    }

    /// The subtree under `root` (inclusive), parents before children (breadth first, ids
    /// sorted within a level), whatever its size: read in pages of [`SUBTREE_PAGE`] records
    /// ([`Query::SubtreePage`]), so no reply comes near NATS' max_payload. Each page is one read
    /// at `consistency`; a session registered while the pages are read may be missing (see
    /// [`crate::state::RegistryState::subtree_page`]).
    pub async fn subtree(
        &self,
        root: SessionId,
        consistency: Consistency,
    ) -> Result<Vec<SessionRecord>, RegistryError> {
        let mut out = Vec::new();
        let mut after = None;
        loop {
            let (page, next) = self
                .subtree_page(root.clone(), after, SUBTREE_PAGE, consistency)
                .await?;
            out.extend(page);
            match next {
                Some(cursor) => after = Some(cursor),
                None => return Ok(out),
            }
        }
    }

    /// One page of the subtree under `root`: the records after the cursor `after` (`None`: from
    /// the root), at most `limit`, and the cursor of the next page (`None` on the last page).
    pub async fn subtree_page(
        &self,
        root: SessionId,
        after: Option<SessionId>,
        limit: u32,
        consistency: Consistency,
    ) -> Result<(Vec<SessionRecord>, Option<SessionId>), RegistryError> {
        match self
            .query(Query::SubtreePage { root, after, limit }, consistency)
            .await?
        {
            QueryResult::Page { sessions, next } => Ok((sessions, next)),
            other => Err(unexpected_read(&other)),
        }
    }

    /// Q4: one page of the sessions `filter` keeps, oldest first, after the cursor `after`
    /// (`None`: from the oldest), at most `limit`; and where the next page starts (`None`:
    /// nothing further can match). A page may be short, even empty, with a `next`: each
    /// examines a bounded number of index entries (see [`crate::listing`]).
    pub async fn list_page(
        &self,
        filter: crate::listing::ListFilter,
        after: Option<crate::listing::ListCursor>,
        limit: u32,
        consistency: Consistency,
    ) -> Result<(Vec<SessionRecord>, Option<crate::listing::ListCursor>), RegistryError> {
        match self
            .query(
                Query::ListSessions {
                    filter,
                    after,
                    limit,
                },
                consistency,
            )
            .await?
        {
            QueryResult::Listed { sessions, next } => Ok((sessions, next)),
            other => Err(unexpected_read(&other)),
        }
    }

    /// True when `ancestor` is a strict ancestor of `descendant` (R3, across nodes).
    pub async fn is_ancestor(
        &self,
        ancestor: SessionId,
        descendant: SessionId,
        consistency: Consistency,
    ) -> Result<bool, RegistryError> {
        match self
            .query(
                Query::IsAncestor {
                    ancestor,
                    descendant,
                },
                consistency,
            )
            .await?
        {
            QueryResult::Bool(b) => Ok(b),
            other => Err(unexpected_read(&other)),
        }
    }

    /// The undisposed sessions placed on `node`, oldest first: Q4 listing pages of the node's
    /// index walked to the end (each reply bounded under max_payload, each page a bounded
    /// walk), so a node that hosts thousands of sessions is read whole. Each page is its own
    /// read at `consistency`: a session placed or moved during the walk may be missed or seen
    /// with its new values (re-adoption reads a dead node's sessions, which do not move but
    /// by a takeover, and a takeover claims them with fencing).
    pub async fn sessions_on_node(
        &self,
        node: NodeId,
        consistency: Consistency,
    ) -> Result<Vec<SessionRecord>, RegistryError> {
        let filter = crate::listing::ListFilter {
            node: Some(node),
            ..Default::default()
        };
        let mut out = Vec::new();
        let mut after = None;
        loop {
            let (page, next) = self
                .list_page(
                    filter.clone(),
                    after,
                    crate::listing::LIST_PAGE_MAX,
                    consistency,
                )
                .await?;
            out.extend(
                page.into_iter()
                    .filter(|r| r.state != crate::types::SessionState::Disposed),
            );
            match next {
                Some(cursor) => after = Some(cursor),
                None => return Ok(out),
            }
        }
    }

    /// Direct children with counts of their subagent descendants (I1).
    pub async fn children(
        &self,
        session: SessionId,
        consistency: Consistency,
    ) -> Result<Vec<ChildSummary>, RegistryError> {
        match self.query(Query::Children { session }, consistency).await? {
            QueryResult::Children(r) => Ok(r),
            other => Err(unexpected_read(&other)),
        }
    }

    /// Every node record with its lease.
    pub async fn nodes(&self, consistency: Consistency) -> Result<Vec<NodeRecord>, RegistryError> {
        match self.query(Query::Nodes, consistency).await? {
            QueryResult::Nodes(r) => Ok(r),
            other => Err(unexpected_read(&other)),
        }
    }

    /// The Raft status (linearizable: as seen by the leader).
    pub async fn status(&self, consistency: Consistency) -> Result<RegistryStatus, RegistryError> {
        match self.query(Query::Status, consistency).await? {
            QueryResult::Status(r) => Ok(r),
            other => Err(unexpected_read(&other)),
        }
    }

    /// How many sessions are in each state.
    pub async fn session_counts(
        &self,
        consistency: Consistency,
    ) -> Result<std::collections::BTreeMap<String, u64>, RegistryError> {
        match self.query(Query::SessionCounts, consistency).await? {
            QueryResult::Counts(c) => Ok(c),
            other => Err(unexpected_read(&other)),
        }
    }

    /// The nearest spent budget (Q3) at or above `session`, if any.
    pub async fn spent_budget_over(
        &self,
        session: SessionId,
        consistency: Consistency,
    ) -> Result<Option<lineage_core::budget::BudgetSpent>, RegistryError> {
        match self
            .query(Query::SpentBudgetOver { session }, consistency)
            .await?
        {
            QueryResult::BudgetSpent(b) => Ok(b),
            other => Err(unexpected_read(&other)),
        }
    }

    /// The digest of the answering member's applied state.
    pub async fn digest(&self, consistency: Consistency) -> Result<u64, RegistryError> {
        match self.query(Query::Digest, consistency).await? {
            QueryResult::Digest(d) => Ok(d),
            other => Err(unexpected_read(&other)),
        }
    }
}
