//! Interrupt (M4, R3): cancel a live session's current turn, with authority.
//!
//! The authority (`user {parent_session_id}` or `ancestor {session}`) is checked with
//! `lineage_core::authority::check_interrupt_authority`. Ancestry comes from this node's
//! `LocalAncestry` (O(1), live sessions only) and, across nodes, from the registry: the answers
//! the check may need are fetched first, so the check itself stays synchronous. A refusal is a
//! clear error and changes nothing. An allowed interrupt cancels the turn on whatever node hosts
//! the target (forwarded once).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use lineage_core::authority::{check_interrupt_authority, Ancestry, InterruptAuthority};
use lineage_core::ids::SessionId;

use crate::control::{Hop, InterruptOutcome, InterruptReply, InterruptRequest};
use crate::error::HostError;
use crate::host::Host;
use crate::shared::Shared;
use crate::telemetry::op_span;

/// Ancestry facts fetched from the registry for one check.
#[derive(Default)]
struct Known {
    ancestors: HashSet<(SessionId, SessionId)>,
    parents: HashMap<SessionId, SessionId>,
}

impl Ancestry for Known {
    fn is_ancestor(&self, ancestor: &SessionId, descendant: &SessionId) -> bool {
        self.ancestors
            .contains(&(ancestor.clone(), descendant.clone()))
    }

    fn parent_of(&self, session: &SessionId) -> Option<SessionId> {
        self.parents.get(session).cloned()
    }
}

impl Shared {
    pub(crate) async fn interrupt(
        self: &Arc<Self>,
        request: InterruptRequest,
        hop: Hop,
    ) -> Result<InterruptReply, HostError> {
        let target = request.target.clone();
        let record = self
            .registry
            .session(target.clone())
            .await?
            .ok_or_else(|| HostError::UnknownSession(target.to_string()))?;
        let mut known = Known::default();
        if let InterruptAuthority::Ancestor { session } = &request.authority {
            let local = self
                .live
                .ancestry
                .lock()
                .map(|a| a.is_ancestor(session, &target))
                .unwrap_or(false);
            if local
                || self
                    .registry
                    .is_ancestor(session.clone(), target.clone())
                    .await?
            {
                known.ancestors.insert((session.clone(), target.clone()));
            } else {
                if self
                    .registry
                    .is_ancestor(target.clone(), session.clone())
                    .await?
                {
                    known.ancestors.insert((target.clone(), session.clone()));
                }
                if let Some(r) = self.registry.session(session.clone()).await? {
                    if let Some(p) = r.header.parent_session() {
                        known.parents.insert(session.clone(), p.clone());
                    }
                }
            }
        }
        check_interrupt_authority(
            &target,
            record.header.parent_session(),
            &request.authority,
            &known,
        )?;
        if let Some(handle) = self.live.handle(&target) {
            let cancelled = handle
                .turn
                .lock()
                .map(|slot| match slot.as_ref() {
                    Some(token) if !token.is_cancelled() => {
                        token.cancel();
                        true
                    }
                    Some(_) | None => false,
                })
                .unwrap_or(false);
            return Ok(InterruptReply {
                target,
                node: Some(self.cfg.node.clone()),
                outcome: if cancelled {
                    InterruptOutcome::Cancelled
                } else {
                    InterruptOutcome::NothingRunning
                },
            });
        }
        if let Some(node) = self.forward_target(&record, hop.is_forwarded()).await? {
            return self
                .forward(
                    &node,
                    crate::control::ops::INTERRUPT,
                    &request,
                    self.cfg.request_timeout,
                )
                .await;
        }
        Ok(InterruptReply {
            target,
            node: None,
            outcome: InterruptOutcome::NotLive,
        })
    }
}

impl Host {
    /// `interrupt` (M4): refused (`NotAuthorized`, nothing changes) unless the authority holds.
    /// Runs in an `interrupt` span (`session`: the target).
    pub async fn interrupt(&self, request: InterruptRequest) -> Result<InterruptReply, HostError> {
        self.interrupt_via(request, Hop::Client).await
    }

    /// [`Host::interrupt`] of a request that reached this node by `hop` (a forwarded one is
    /// never forwarded again).
    pub async fn interrupt_via(
        &self,
        request: InterruptRequest,
        hop: Hop,
    ) -> Result<InterruptReply, HostError> {
        let op = op_span!("interrupt", self.node());
        op.record("session", &request.target);
        op.run(self.shared.interrupt(request, hop)).await
    }
}
