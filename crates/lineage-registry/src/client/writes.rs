//! [`RegistryClient`]'s typed writes: one method per [`Command`], each returning the
//! outcome it expects or [`RegistryError::Refused`] with the registry's refusal.

use lineage_core::header::SessionHeader;
use lineage_core::ids::{NodeId, RequestId, RunId, SessionId};

use crate::error::RegistryError;
use crate::types::{Command, CommandResponse, Placement, SessionRecord, SessionState};
use crate::wire::{Consistency, Query, QueryResult};

use super::{unexpected, unexpected_read, NewSession, RegistryClient};

impl RegistryClient {
    /// Registers a session (a top-level one, or a child: the commit is the birth). Returns its
    /// depth.
    pub async fn register_session(
        &self,
        request_id: RequestId,
        at_ms: u64,
        header: SessionHeader,
        new: NewSession,
    ) -> Result<u64, RegistryError> {
        let cmd = Command::RegisterSession {
            request_id,
            at_ms,
            header,
            descriptor: new.descriptor,
            max_depth: new.limits.max_depth,
            fan_out: new.limits.fan_out,
            budget: new.limits.budget,
            node: new.node,
            run: new.run,
            start_within_ms: new.start_within_ms,
            hosted: new.hosted,
        };
        match self.accepted(cmd).await? {
            CommandResponse::Registered { depth, .. } => Ok(depth),
            other => Err(unexpected(&other)),
        }
    }

    /// Confirms, as `node`, the start of a `starting` session (`starting -> running`). Returns
    /// its placement.
    pub async fn confirm_start(
        &self,
        request_id: RequestId,
        at_ms: u64,
        session: SessionId,
        node: NodeId,
        expected_epoch: u64,
    ) -> Result<Placement, RegistryError> {
        let cmd = Command::ConfirmStart {
            request_id,
            at_ms,
            session,
            node,
            expected_epoch,
        };
        match self.accepted(cmd).await? {
            CommandResponse::Started { placement, .. } => Ok(placement),
            other => Err(unexpected(&other)),
        }
    }

    /// The `starting` sessions whose start is overdue at `now_ms`, oldest deadline first, at
    /// most `limit` (clamped to 1..=[`crate::state::OVERDUE_BIRTHS_PAGE`]).
    pub async fn overdue_births(
        &self,
        now_ms: u64,
        limit: u32,
        consistency: Consistency,
    ) -> Result<Vec<SessionRecord>, RegistryError> {
        match self
            .query(Query::OverdueBirths { now_ms, limit }, consistency)
            .await?
        {
            QueryResult::Sessions(r) => Ok(r),
            other => Err(unexpected_read(&other)),
        }
    }

    /// The undisposed sessions whose deadline (Q2) is at or before `now_ms`, earliest first,
    /// at most `limit` (clamped to 1..=[`crate::state::OVERDUE_DEADLINES_PAGE`]).
    pub async fn overdue_deadlines(
        &self,
        now_ms: u64,
        limit: u32,
        consistency: Consistency,
    ) -> Result<Vec<SessionRecord>, RegistryError> {
        match self
            .query(Query::OverdueDeadlines { now_ms, limit }, consistency)
            .await?
        {
            QueryResult::Sessions(r) => Ok(r),
            other => Err(unexpected_read(&other)),
        }
    }

    /// The undisposed sessions whose budget (Q3) is spent, at most `limit` (clamped to
    /// 1..=[`crate::state::SPENT_BUDGETS_PAGE`]).
    pub async fn spent_budgets(
        &self,
        limit: u32,
        consistency: Consistency,
    ) -> Result<Vec<SessionRecord>, RegistryError> {
        match self
            .query(Query::SpentBudgets { limit }, consistency)
            .await?
        {
            QueryResult::Sessions(r) => Ok(r),
            other => Err(unexpected_read(&other)),
        }
    }

    /// Claims a session's placement by CAS on the epoch (K1). Returns the new placement.
    pub async fn claim_placement(
        &self,
        request_id: RequestId,
        at_ms: u64,
        session: SessionId,
        node: NodeId,
        expected_epoch: u64,
    ) -> Result<Placement, RegistryError> {
        let cmd = Command::ClaimPlacement {
            request_id,
            at_ms,
            session,
            node,
            expected_epoch,
            run: None,
            activate: false,
        };
        match self.accepted(cmd).await? {
            CommandResponse::Placed { placement, .. } => Ok(placement),
            other => Err(unexpected(&other)),
        }
    }

    /// Records an activation state (not `disposed`: use [`Self::dispose`]).
    pub async fn set_state(
        &self,
        request_id: RequestId,
        at_ms: u64,
        session: SessionId,
        state: SessionState,
    ) -> Result<(), RegistryError> {
        let cmd = Command::SetState {
            stop_reason: None,
            expected_epoch: None,
            request_id,
            at_ms,
            session,
            state,
        };
        match self.accepted(cmd).await? {
            CommandResponse::StateSet { .. } => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// Closes admission on whole subtrees in one entry (X1). Returns every closed session,
    /// parents before children.
    pub async fn close_admission(
        &self,
        request_id: RequestId,
        at_ms: u64,
        roots: Vec<SessionId>,
    ) -> Result<Vec<SessionId>, RegistryError> {
        let cmd = Command::CloseAdmission {
            request_id,
            at_ms,
            roots,
        };
        match self.accepted(cmd).await? {
            CommandResponse::AdmissionClosed { sessions } => Ok(sessions),
            other => Err(unexpected(&other)),
        }
    }

    /// Disposes a session (refused while it has undisposed children). Returns `true` when it
    /// was already disposed.
    pub async fn dispose(
        &self,
        request_id: RequestId,
        at_ms: u64,
        session: SessionId,
    ) -> Result<bool, RegistryError> {
        let cmd = Command::Dispose {
            stop_reason: None,
            request_id,
            at_ms,
            session,
        };
        match self.accepted(cmd).await? {
            CommandResponse::Disposed { already, .. } => Ok(already),
            other => Err(unexpected(&other)),
        }
    }

    /// Q5: purges the named disposed sessions that are due (see [`Command::Purge`]); returns
    /// the ones removed.
    pub async fn purge(
        &self,
        request_id: RequestId,
        at_ms: u64,
        sessions: Vec<SessionId>,
        disposed_after_ms: u64,
    ) -> Result<Vec<SessionId>, RegistryError> {
        let cmd = Command::Purge {
            request_id,
            at_ms,
            sessions,
            disposed_after_ms,
        };
        match self.accepted(cmd).await? {
            CommandResponse::Purged { sessions } => Ok(sessions),
            other => Err(unexpected(&other)),
        }
    }

    /// Q5: the disposed sessions due to be purged at `now_ms`, oldest disposal first.
    pub async fn purge_candidates(
        &self,
        now_ms: u64,
        disposed_after_ms: u64,
        limit: u32,
        consistency: Consistency,
    ) -> Result<Vec<SessionId>, RegistryError> {
        match self
            .query(
                Query::PurgeCandidates {
                    now_ms,
                    disposed_after_ms,
                    limit,
                },
                consistency,
            )
            .await?
        {
            QueryResult::SessionIds(ids) => Ok(ids),
            other => Err(unexpected_read(&other)),
        }
    }

    /// Renews a node's lease. Returns the lease end.
    pub async fn heartbeat(
        &self,
        request_id: RequestId,
        at_ms: u64,
        node: NodeId,
        lease_ms: u64,
        info: Option<String>,
    ) -> Result<u64, RegistryError> {
        let cmd = Command::Heartbeat {
            request_id,
            at_ms,
            node,
            lease_ms,
            info,
        };
        match self.accepted(cmd).await? {
            CommandResponse::LeaseRenewed {
                lease_expires_at_ms,
                ..
            } => Ok(lease_expires_at_ms),
            other => Err(unexpected(&other)),
        }
    }

    /// Records a new run of a session. Returns the number of runs.
    pub async fn append_run(
        &self,
        request_id: RequestId,
        at_ms: u64,
        session: SessionId,
        run: RunId,
    ) -> Result<usize, RegistryError> {
        let cmd = Command::AppendRun {
            request_id,
            at_ms,
            session,
            run,
        };
        match self.accepted(cmd).await? {
            CommandResponse::RunAppended { runs, .. } => Ok(runs),
            other => Err(unexpected(&other)),
        }
    }

    /// Stores a session's descriptor (P1).
    pub async fn set_descriptor(
        &self,
        request_id: RequestId,
        at_ms: u64,
        session: SessionId,
        descriptor: serde_json::Value,
    ) -> Result<(), RegistryError> {
        let cmd = Command::SetDescriptor {
            request_id,
            at_ms,
            session,
            descriptor,
        };
        match self.accepted(cmd).await? {
            CommandResponse::DescriptorSet { .. } => Ok(()),
            other => Err(unexpected(&other)),
        }
    }
}
