//! Followup (M3): the next user message to a session; a cold session is cold-resumed first.
//!
//! Live here: the message is accepted into the agent's log and queued. Live on another node
//! (its lease is current and it is running or waiting): the request is forwarded once to that
//! node; a settled one is forwarded to its node too, to be resumed there while that node is
//! live. Otherwise (its node is dead, or it was passivated) it is cold: resumed here
//! ([`crate::resume`]) and then given the message. A followup that finds the agent here in the
//! middle of its settlement (live, taking no message) waits for it to leave, then resumes it.
//! A retry of a followup that resumed a session and was answered too late finds the request id
//! in the log the resume reads, and is answered `already_delivered` without resuming it again
//! (a resumed run with no message would stay `running` and never settle: chaos seed 23).

use std::sync::Arc;

use lineage_core::descriptor::SubagentShape;
use lineage_registry::types::SessionState;

use crate::agent::cmd::AgentCmd;
use crate::agent::mail::{Delivered, Incoming};
use crate::control::{FollowupOutcome, FollowupReply, FollowupRequest, Hop, ResumeOutcome};
use crate::error::HostError;
use crate::fence::LeaseWait;
use crate::host::Host;
use crate::resume::Resumption;
use crate::shared::Shared;
use crate::telemetry::op_span;

impl Shared {
    async fn deliver_user(
        self: &Arc<Self>,
        request: &FollowupRequest,
    ) -> Result<Delivered, HostError> {
        self.live
            .ask(&request.session, |reply| AgentCmd::Deliver {
                incoming: Incoming::User {
                    content: request.content.clone(),
                    request_id: request.request_id.clone(),
                },
                reply,
                trace: lineage_bus::trace::current(),
            })
            .await?
    }

    pub(crate) async fn followup(
        self: &Arc<Self>,
        request: FollowupRequest,
        hop: Hop,
    ) -> Result<FollowupReply, HostError> {
        self.lifetime.check_running()?;
        let session = request.session.clone();
        if let Some(handle) = self.live.handle(&session) {
            if handle.shape == Some(SubagentShape::OneShot) {
                return Err(one_shot(&session));
            }
            // K1: given to the agent here only while this node surely holds its lease (else
            // another node may host the session by now: crate::fence). Stopped meanwhile by the
            // placement check, the session is cold here: looked up below.
            let wait = Some(self.cfg.request_timeout / 2);
            match self.until_lease_held(&session, &handle.stop, wait).await {
                LeaseWait::Held => match self.deliver_user(&request).await {
                    Ok(delivered) => {
                        return Ok(FollowupReply {
                            session,
                            node: self.cfg.node.clone(),
                            outcome: match delivered {
                                Delivered::Accepted => FollowupOutcome::Delivered,
                                Delivered::Duplicate => FollowupOutcome::AlreadyDelivered,
                            },
                        });
                    }
                    // It settled (or left) between the lookup and the delivery: cold (below).
                    Err(HostError::NotLive { .. }) => {}
                    // Its log append failed: the message may still be staged there and taken by
                    // a later turn, so this call does not deliver it a second time (a retry
                    // with a request id is recognised; one without may be taken twice).
                    Err(e) => return Err(e),
                },
                // Stopped by the placement check: the session lives elsewhere (below).
                LeaseWait::Stopped => {}
                // Nothing was delivered: the caller may send it again once a renewal is due.
                LeaseWait::TimedOut => {
                    return Err(HostError::LeaseNotHeld {
                        node: self.cfg.node.to_string(),
                        session: session.to_string(),
                        retry_after: self.cfg.heartbeat_every,
                    })
                }
            }
            // It settled between the lookup and the delivery: it is cold now.
        }
        let record = self
            .registry
            .session(session.clone())
            .await?
            .ok_or_else(|| HostError::UnknownSession(session.to_string()))?;
        if record.state == SessionState::Disposed {
            return Err(HostError::Disposed(session.to_string()));
        }
        if record.is_one_shot() {
            return Err(one_shot(&session));
        }
        // A settled session goes back to its own node while that node is live.
        if let Some(node) = self.followup_target(&record, hop.is_forwarded()).await? {
            let forwarded = self
                .forward(
                    &node,
                    crate::control::ops::FOLLOWUP,
                    &request,
                    self.cfg.request_timeout,
                )
                .await;
            match forwarded {
                // That node does not take it (say it is winding down, K1): a session it no
                // longer hosts (settled, or handed off meanwhile) is resumed here instead.
                Err(HostError::Unavailable(reason)) => {
                    let now = self
                        .registry
                        .session(session.clone())
                        .await?
                        .ok_or_else(|| HostError::UnknownSession(session.to_string()))?;
                    let hosted = now.state.is_active()
                        && now.placement.as_ref().and_then(|p| p.host()).is_some();
                    if hosted || now.state == SessionState::Disposed {
                        return Err(HostError::Unavailable(reason));
                    }
                    tracing::info!(%session, %node, %reason, "its node did not take the followup; resuming it here");
                }
                other => return other,
            }
        }
        // Cold, or settling here: an agent whose settlement is under way is still live here
        // (resume says `already_live`) but takes no message; once it has left, it is cold and
        // resumed. Bounded by the request deadline.
        let deadline = tokio::time::Instant::now() + self.cfg.request_timeout;
        let request_id = request.request_id.as_ref().map(|r| r.to_string());
        // Resumes by this call whose agent left before it took the message (one that settles
        // at once, say closing a cut-short turn): a few, not a loop for as long as its log
        // cannot be written (each one a placement claim, a new run and a `subagent/start`).
        let mut resumed_and_left = 0u32;
        loop {
            let resumed = match self
                .resume_for(session.clone(), request_id.as_deref())
                .await?
            {
                Resumption::Reply(reply) => reply,
                Resumption::AlreadyDelivered => {
                    return Ok(FollowupReply {
                        session,
                        node: self.cfg.node.clone(),
                        outcome: FollowupOutcome::AlreadyDelivered,
                    })
                }
            };
            match self.deliver_user(&request).await {
                Ok(delivered) => {
                    let outcome = match (delivered, resumed.outcome) {
                        (Delivered::Duplicate, _) => FollowupOutcome::AlreadyDelivered,
                        (Delivered::Accepted, ResumeOutcome::Resumed) => {
                            FollowupOutcome::ResumedAndDelivered
                        }
                        (Delivered::Accepted, ResumeOutcome::AlreadyLive) => {
                            FollowupOutcome::Delivered
                        }
                    };
                    return Ok(FollowupReply {
                        session,
                        node: self.cfg.node.clone(),
                        outcome,
                    });
                }
                Err(HostError::NotLive { .. }) if resumed_and_left >= MAX_RESUMES => {
                    return Err(HostError::Unavailable(format!(
                        "session {session} stopped right after {MAX_RESUMES} resumes in a row (is its log writable?); retry later"
                    )))
                }
                Err(HostError::NotLive { .. }) if tokio::time::Instant::now() < deadline => {
                    if resumed.outcome == ResumeOutcome::Resumed {
                        resumed_and_left += 1;
                    }
                    while self.live.is_live(&session) && tokio::time::Instant::now() < deadline {
                        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// How many times one followup resumes a session that stops before taking the message.
const MAX_RESUMES: u32 = 3;

fn one_shot(session: &lineage_core::ids::SessionId) -> HostError {
    HostError::BadRequest(format!(
        "session {session} is a one-shot child; it takes no followup (spawn a continuable child instead)"
    ))
}

impl Host {
    /// `followup` (M3) from a client, in a `followup` span.
    pub async fn followup(&self, request: FollowupRequest) -> Result<FollowupReply, HostError> {
        self.followup_via(request, Hop::Client).await
    }

    /// `followup` (M3) that reached this node by `hop` (a forwarded one is never forwarded
    /// again), in a `followup` span.
    pub async fn followup_via(
        &self,
        request: FollowupRequest,
        hop: Hop,
    ) -> Result<FollowupReply, HostError> {
        let op = op_span!("followup", self.node());
        op.record("session", &request.session);
        op.run(self.shared.followup(request, hop)).await
    }
}
