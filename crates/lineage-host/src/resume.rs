//! Cold resume (K1, R2, L3, P1, C3): host a session that is live nowhere.
//!
//! Read the registry record (header, placement; first as any member last applied it, see
//! [`Shared::resume_here`]) and the session's log (from JetStream, any node can) -> rebuild the
//! descriptor from the log alone (P1), re-apply the delegated policy from the log (C3),
//! recompute the composition (C1) -> claim the placement by compare-and-swap on the
//! epoch (one winner) -> start the driver on the log, with owner = the durable parent only when
//! that parent is live on this node (R2) -> a new run: `subagent/start` again, paired with the
//! `subagent/end` of its next settlement. Its reports and settlement still go to the durable
//! parent's inbox subject, wherever that parent runs; a live parent here adopts it again. A turn
//! the log shows started but never ended is closed as `interrupted` first. Messages accepted but
//! not consumed before the session went cold are turned into pending input again; its inbox
//! consumer picks up whatever arrived meanwhile.

use std::sync::Arc;

use lineage_core::composition::child_preset;
use lineage_core::descriptor::{descriptor_from_log, SubagentShape};
use lineage_core::ids::SessionId;
use lineage_core::journal::followup_accepted;
use lineage_core::log::SessionLog;
use lineage_core::messages::SubagentRunInfo;
use lineage_core::policy::reapply_delegated_policy;
use lineage_core::resume::{
    host_to_ask, refused_claim_step, resume_step, LogFacts, RecordRead, RefusedClaimStep,
    ResumeFacts, ResumeRefusal, ResumeStep,
};
use lineage_registry::types::{ClaimedSession, Command, CommandResponse, RegistryRefusal};

use crate::agent::{launch, AgentCmd, AgentInit, AgentRecord, AGENT_EVENT};
use crate::control::{ResumeOutcome, ResumeReply};
use crate::error::HostError;
use crate::host::{provider_of, Host};
use crate::shared::Shared;
use crate::telemetry::op_span;

impl Shared {
    /// Resumes `session` on this node, in a `resume` span.
    pub(crate) async fn resume_local(
        self: &Arc<Self>,
        session: SessionId,
    ) -> Result<ResumeReply, HostError> {
        match self.resume_for(session.clone(), None).await? {
            Resumption::Reply(reply) => Ok(reply),
            Resumption::AlreadyDelivered => Err(HostError::Internal(format!(
                "resuming {session} for no followup found one delivered"
            ))),
        }
    }

    /// Resumes `session` on this node for a followup sent with `request_id` (M3), in a
    /// `resume` span: when its log already holds that followup (a retry of one that resumed
    /// it and was answered too late), nothing is claimed and nothing runs.
    pub(crate) async fn resume_for(
        self: &Arc<Self>,
        session: SessionId,
        request_id: Option<&str>,
    ) -> Result<Resumption, HostError> {
        let op = op_span!("resume", self.node());
        op.record("session", &session);
        op.run(self.resume_here(session, request_id)).await
    }

    /// The cold resume itself, inside its `resume` span.
    ///
    /// First on a record any member answers from its applied state (no round to a quorum,
    /// read at once with the log): it only ever leads to a claim, which its epoch fences, and
    /// what the resume carries on with that no epoch fences (usage, children) comes back with
    /// the claim. Every other outcome (a refusal, a lost claim, a session found live) is
    /// decided on the record read again linearizably.
    async fn resume_here(
        self: &Arc<Self>,
        session: SessionId,
        request_id: Option<&str>,
    ) -> Result<Resumption, HostError> {
        self.lifetime.check_resumable()?;
        // One resume of a session at a time here: a second waits for the first (then finds
        // it live), bounded by the request deadline.
        let _resuming = ResumeUnderway::wait_for(self, &session, self.cfg.request_timeout)
            .await
            .ok_or_else(|| HostError::Starting(session.to_string()))?;
        if let Some(done) = self
            .resume_attempt(&session, request_id, RecordRead::Recent)
            .await?
        {
            return Ok(done);
        }
        self.resume_attempt(&session, request_id, RecordRead::Linearizable)
            .await?
            .ok_or_else(|| {
                HostError::Internal(format!(
                    "resuming {session} on a linearizable record asked to read it again"
                ))
            })
    }

    /// One attempt at the cold resume on a record read as `read` says. `None`: the recent
    /// record led elsewhere than to a won claim; decide again on a linearizable one.
    async fn resume_attempt(
        self: &Arc<Self>,
        session: &SessionId,
        request_id: Option<&str>,
        read: RecordRead,
    ) -> Result<Option<Resumption>, HostError> {
        let session = session.clone();
        // The record and the log are read at once (neither depends on the other). A log read
        // while another node still appended is caught later: the claim's epoch CAS refuses a
        // session that moved, and the log's sequence check fences a stale cursor.
        let record = match read {
            RecordRead::Recent => self.registry.session_recent(session.clone()),
            RecordRead::Linearizable => self.registry.session(session.clone()),
        };
        let (record, log_read) = tokio::join!(record, self.bus.events.read_log(&session));
        let record = record?;
        let live_here = self.live.is_live(&session);
        let being_born_here = self.live.is_being_born(&session);
        // A session that runs on another live node is not cold (one its node released is).
        let live_elsewhere = match record.as_ref().and_then(|r| {
            host_to_ask(
                r.state,
                r.placement.as_ref().and_then(|p| p.host()),
                &self.cfg.node,
                live_here,
                being_born_here,
            )
        }) {
            Some(host) if self.node_alive(host).await? => Some(host.clone()),
            _ => None,
        };
        let facts = ResumeFacts {
            state: record.as_ref().map(|r| r.state),
            live_here,
            being_born_here,
            live_elsewhere,
            log: match &log_read {
                Err(_) => LogFacts::Unreadable,
                Ok(read) if read.events.is_empty() => LogFacts::Empty,
                Ok(_) => LogFacts::Events,
            },
        };
        let epoch = record
            .as_ref()
            .and_then(|r| r.placement.as_ref())
            .map(|p| p.epoch)
            .unwrap_or(0);
        let refused = |why: ResumeRefusal| match why {
            ResumeRefusal::Unknown => HostError::UnknownSession(session.to_string()),
            ResumeRefusal::Disposed => HostError::Disposed(session.to_string()),
            ResumeRefusal::Starting => HostError::Starting(session.to_string()),
            ResumeRefusal::LiveElsewhere(node) => HostError::ClaimLost {
                session: session.to_string(),
                node: node.to_string(),
            },
        };
        let (record, log_read) = match (resume_step(read, &facts), record) {
            (ResumeStep::ReadAgain, _) => return Ok(None),
            (ResumeStep::AlreadyLive, _) => {
                return Ok(Some(Resumption::Reply(ResumeReply {
                    session,
                    node: self.cfg.node.clone(),
                    outcome: ResumeOutcome::AlreadyLive,
                    epoch,
                })))
            }
            (ResumeStep::Refuse(why), _) => return Err(refused(why)),
            (ResumeStep::LogUnreadable, _) => {
                log_read?;
                return Err(HostError::Internal(format!(
                    "the log of {session} was read, yet called unreadable"
                )));
            }
            (ResumeStep::DisposeCutShort, Some(record)) => {
                return Err(self.dispose_cut_short(&record).await)
            }
            (ResumeStep::Claim, Some(record)) => (record, log_read?),
            (ResumeStep::DisposeCutShort | ResumeStep::Claim, None) => {
                return Err(HostError::Internal(format!(
                    "resuming {session}: a step that needs its record, without one"
                )))
            }
        };
        // Read and check everything before claiming: a log that cannot be resumed is refused
        // without moving the placement.
        let header = record.header.clone();
        let lineage_bus::events::LogRead {
            events,
            cursor,
            messages: log_messages,
        } = log_read;
        let log =
            SessionLog::from_events(session.clone(), events, header.seed_length().unwrap_or(0))?;
        // M3: a retried followup its log already holds wakes nothing. A resumed run would have
        // no message to take: it would stay `running` and never settle.
        if request_id.is_some_and(|r| followup_accepted(&log, r)) {
            tracing::info!(%session, "followup already in its log; not resumed");
            return Ok(Some(Resumption::AlreadyDelivered));
        }
        let agent: AgentRecord = log
            .own_events_of_kind(AGENT_EVENT)
            .next()
            .and_then(|e| serde_json::from_value(e.data.clone()).ok())
            .ok_or_else(|| {
                HostError::Core(lineage_core::CoreError::InvalidLog {
                    session: session.to_string(),
                    reason: "it holds no readable host/agent event, so the agent to run is unknown"
                        .to_owned(),
                })
            })?;
        let (shape, descriptor, preset, policy_view) = if header.is_subagent() {
            let descriptor = descriptor_from_log(&log)?;
            if descriptor.mode == SubagentShape::OneShot {
                return Err(HostError::BadRequest(format!(
                    "session {session} is a one-shot child; one-shot runs are not resumed (S3)"
                )));
            }
            let policy = reapply_delegated_policy(&log)?;
            let preset = child_preset(header.agent_preset(), &descriptor.composition());
            (
                Some(descriptor.mode),
                Some(descriptor),
                Some(preset),
                crate::spawn::child_policy_view(&policy),
            )
        } else {
            (
                None,
                None,
                header.agent_preset().cloned(),
                agent.policy_view,
            )
        };
        // K1: one winner. The claim also records the new run (a child's) and the `running`
        // state (already so, or set: whatever the record read said): one registry write for
        // the whole hand-over.
        let run = match (&header.parent_session(), shape) {
            (Some(_), Some(_)) => Some(self.mint.run()),
            _ => None,
        };
        let claimed = self
            .registry
            .write(Command::ClaimPlacement {
                request_id: self.mint.request(),
                at_ms: self.now(),
                session: session.clone(),
                node: self.cfg.node.clone(),
                expected_epoch: epoch,
                run: run.clone(),
                activate: true,
            })
            .await;
        let (placement, claimed) = match claimed {
            Ok(CommandResponse::Placed { placement, claimed }) => (placement, claimed),
            Ok(other) => {
                return Err(HostError::Internal(format!(
                    "registry answered {other:?} to claim_placement"
                )))
            }
            Err(HostError::Refused(refusal)) => {
                let mismatch = matches!(refusal, RegistryRefusal::EpochMismatch { .. });
                match refused_claim_step(read, mismatch) {
                    // Refused on a recent record (it moved, was disposed, ...): decided again
                    // on a linearizable one.
                    RefusedClaimStep::ReadAgain => return Ok(None),
                    RefusedClaimStep::Lost => {
                        let now = self.registry.session(session.clone()).await?;
                        return Err(HostError::ClaimLost {
                            session: session.to_string(),
                            node: now
                                .and_then(|r| r.placement)
                                .map(|p| p.node.to_string())
                                .unwrap_or_else(|| "unknown".to_owned()),
                        });
                    }
                    RefusedClaimStep::Fail => return Err(HostError::Refused(refusal)),
                }
            }
            Err(e) => return Err(e),
        };
        // What the record held when the claim won (a member older than the answer's field:
        // read it now, linearizably; the claim holds the session, so nothing else writes it).
        let claimed = match claimed {
            Some(c) => *c,
            None => {
                let now = self.registry.session(session.clone()).await?;
                ClaimedSession {
                    usage: now.as_ref().and_then(|r| r.usage.as_deref().cloned()),
                    has_children: now.is_some_and(|r| !r.children.is_empty()),
                }
            }
        };
        let parent = header.parent_session().cloned();
        let owner = lineage_core::routing::owner_of(
            parent.as_ref(),
            parent.as_ref().is_some_and(|p| self.live.is_live(p)),
        );
        let span = tracing::Span::current();
        if let Some(p) = &parent {
            span.record("parent", tracing::field::display(p));
        }
        if let Some(s) = shape {
            span.record("shape", s.as_str());
        }
        tracing::info!(%session, epoch = placement.epoch, owner = ?owner, "claimed for cold resume");
        let run_info = match (&parent, shape, run) {
            (Some(parent), Some(shape), Some(run)) => {
                span.record("run", tracing::field::display(&run));
                Some(SubagentRunInfo {
                    run_id: run,
                    provider: provider_of(&agent.agent).to_owned(),
                    child_id: session.clone(),
                    parent_session_id: parent.clone(),
                    local: owner.is_some(),
                    shape,
                    node: self.cfg.node.clone(),
                    at_ms: self.now(),
                })
            }
            _ => None,
        };
        let adopter = owner
            .clone()
            .filter(|_| shape == Some(SubagentShape::Continuable));
        launch(
            self,
            AgentInit {
                header,
                shape,
                descriptor,
                spec: agent.agent,
                policy_view,
                preset,
                log,
                cursor,
                log_messages,
                run: run_info,
                owner,
                resumed: true,
                has_children: claimed.has_children,
                one_shot: None,
                // The editor's servers were never written down (their headers are its
                // credentials): a resumed root runs with lineage's tools only.
                mcp_servers: Vec::new(),
                epoch: Some(placement.epoch),
                idle_ttl: agent.idle_ttl_ms,
                usage: claimed.usage,
                wake_on: agent.wake_on.unwrap_or_default(),
            },
        )
        .await?;
        // R1: the live parent here owns it again (it waits for its settlement, as at birth).
        if let Some(parent) = adopter {
            let _ = self.live.send(&parent, AgentCmd::Adopt(session.clone()));
        }
        self.metrics.resumed();
        Ok(Some(Resumption::Reply(ResumeReply {
            session,
            node: self.cfg.node.clone(),
            outcome: ResumeOutcome::Resumed,
            epoch: placement.epoch,
        })))
    }
}

/// What a resume for a followup did.
pub(crate) enum Resumption {
    /// Resumed here, or found live here.
    Reply(ResumeReply),
    /// The followup is in the session's log already: nothing was claimed or started.
    AlreadyDelivered,
}

impl Host {
    /// `resume` (K1): claims `session` and hosts it here. `AlreadyLive` when it already is.
    pub async fn resume(&self, session: SessionId) -> Result<ResumeReply, HostError> {
        self.shared.resume_local(session).await
    }
}

/// A resume under way on this node ([`Shared::resuming`]); dropping it ends it.
struct ResumeUnderway<'a> {
    shared: &'a Shared,
    session: SessionId,
}

impl<'a> ResumeUnderway<'a> {
    /// Marks `session` as being resumed here, once no other resume of it runs; `None` when one
    /// still runs after `within`.
    async fn wait_for(
        shared: &'a Shared,
        session: &SessionId,
        within: std::time::Duration,
    ) -> Option<ResumeUnderway<'a>> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let taken = shared
                .live
                .resuming
                .lock()
                .map(|mut resuming| resuming.insert(session.clone()))
                .unwrap_or(true);
            if taken {
                return Some(ResumeUnderway {
                    shared,
                    session: session.clone(),
                });
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

impl Drop for ResumeUnderway<'_> {
    fn drop(&mut self) {
        if let Ok(mut resuming) = self.shared.live.resuming.lock() {
            resuming.remove(&self.session);
        }
    }
}
