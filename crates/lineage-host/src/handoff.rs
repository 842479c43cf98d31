//! Graceful shutdown (K1, X1): a node that is told to stop (SIGTERM; a Kubernetes rolling
//! upgrade) interrupts nothing that can finish within its grace.
//!
//! [`Host::wind_down`], called by the node before [`Host::shutdown`]:
//!
//! 1. **Stop taking new work.** The node has left the cluster-wide queue group already
//!    (`service::ServiceHandle::leave_group`), so spawns, followups and resumes sent to any
//!    node go to the others. Every live agent is quiesced (`EngineEvent::Quiesce`): it takes no
//!    new turn here. The sweeps (births, deadlines, budgets, retention, takeover) stop, and no
//!    session is resumed here (re-adoption, takeover, `resume`, a followup to a cold session:
//!    `unavailable`, which the forwarding node answers by resuming it itself).
//!    What is addressed to this node is still served: a followup or inbox message for a
//!    session it hosts is accepted into that session's log (durable, answered at once) and
//!    waits for the next host, as a signal to a Temporal workflow waits in its history for
//!    the next worker; refusing it instead would hand callers errors for the whole grace. A
//!    birth addressed to it is registered and handed off before its first turn; a one-shot run
//!    takes its one turn (its caller's turn waits for it). Interrupts and drains are served.
//! 2. **Let running turns finish**, until none runs or the grace (`shutdown.grace_ms`) is
//!    over. Their replies, reports, ends and settlements are recorded and published as usual.
//! 3. **Hand off.** Each idle agent leaves without settling (`EngineEvent::HandOff`, the log
//!    durable first), and once it is gone its placement is released in the registry
//!    (`release_placement`, fenced by its epoch): any node resumes it at once, on its next
//!    followup, by takeover, or this node's re-adoption after its restart, and nothing about it
//!    says `interrupted`. A released session with a waking message waiting (a followup or
//!    child notice accepted during the grace, a birth's first prompt) is resumed on another
//!    node right away (`resume` to any node), so its turn does not wait for a followup.
//!
//! A turn still running when the grace is over is stopped by [`Host::shutdown`] as before:
//! the session stays placed here, and its next host closes that turn as `interrupted`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use lineage_bus::control::{decode_reply, encode_request, ControlError, Hop};
use lineage_bus::ports::{ControlCall, ControlTarget};
use lineage_core::ids::{NodeId, SessionId};

use crate::agent::cmd::{AgentCmd, HandedOff};
use crate::control::{ops, ResumeReply, ResumeRequest};
use crate::host::Host;

/// How often the grace checks whether a turn still runs.
const TURN_POLL: Duration = Duration::from_millis(50);

/// How long the hand-off may spend on resuming sessions elsewhere, in all.
const RESUME_ELSEWHERE_FOR: Duration = Duration::from_secs(5);

/// Resumes asked of other nodes at once.
const RESUMES_IN_FLIGHT: usize = 16;

/// What a graceful shutdown did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WindDownReport {
    /// How long the running turns took to finish (at most the grace), in ms.
    pub waited_ms: u64,
    /// Sessions handed off: left unsettled, placement released.
    pub released: Vec<SessionId>,
    /// Released sessions with work waiting that another node resumed, and where.
    pub resumed_elsewhere: Vec<(SessionId, NodeId)>,
    /// Sessions whose turn still ran when the grace was over: stopped with the host, their
    /// next host closes that turn as `interrupted`.
    pub cut_short: Vec<SessionId>,
    /// Sessions that left unsettled but could not be released, with the one-line reason: they
    /// stay placed here (re-adoption, takeover or a followup bring them back).
    pub kept: Vec<(SessionId, String)>,
}

impl Host {
    /// Graceful shutdown (see the module documentation): quiesce, let running turns finish
    /// within `grace`, then hand every idle agent off. Call [`Host::shutdown`] after it; it
    /// stops whatever is still live (a turn that outlived the grace).
    pub async fn wind_down(&self, grace: Duration) -> WindDownReport {
        let shared = &self.shared;
        shared.lifetime.winding.cancel();
        let started = tokio::time::Instant::now();
        for session in self.live_sessions() {
            let _ = shared.live.send(&session, AgentCmd::Quiesce);
        }
        let deadline = started + grace;
        while self.turns_running() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(TURN_POLL.min(grace)).await;
        }
        let mut report = WindDownReport {
            waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            ..WindDownReport::default()
        };
        shared.lifetime.handing_off.store(true, Ordering::SeqCst);
        let mut waiting = Vec::new();
        let outcomes = stream::iter(self.live_sessions())
            .map(|session| async move {
                let outcome = shared
                    .live
                    .ask(&session, AgentCmd::HandOff)
                    .await
                    .unwrap_or(HandedOff::Gone);
                (session, outcome)
            })
            .buffer_unordered(RESUMES_IN_FLIGHT)
            .collect::<Vec<_>>()
            .await;
        for (session, outcome) in outcomes {
            match outcome {
                HandedOff::Released { pending_work } => {
                    if pending_work {
                        waiting.push(session.clone());
                    }
                    report.released.push(session);
                }
                HandedOff::Busy => report.cut_short.push(session),
                HandedOff::Gone => {}
                HandedOff::Kept(reason) => report.kept.push((session, reason)),
            }
        }
        report.resumed_elsewhere = self.resume_elsewhere(waiting).await;
        tracing::info!(
            waited_ms = report.waited_ms,
            released = report.released.len(),
            resumed_elsewhere = report.resumed_elsewhere.len(),
            cut_short = report.cut_short.len(),
            kept = report.kept.len(),
            "handed off the sessions hosted here"
        );
        for (session, reason) in &report.kept {
            tracing::warn!(%session, %reason, "left unsettled but not released; it stays placed here");
        }
        report
    }

    /// The sessions live here now.
    fn live_sessions(&self) -> Vec<SessionId> {
        self.shared
            .live
            .agents
            .lock()
            .map(|agents| agents.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether any live agent is in a turn.
    fn turns_running(&self) -> bool {
        self.shared
            .live
            .agents
            .lock()
            .map(|agents| {
                agents
                    .values()
                    .any(|h| h.turn.lock().map(|t| t.is_some()).unwrap_or(false))
            })
            .unwrap_or(false)
    }

    /// Asks other nodes (the queue group this node left) to resume each session, at most
    /// [`RESUMES_IN_FLIGHT`] at once and [`RESUME_ELSEWHERE_FOR`] in all. One that is not
    /// resumed stays released: its next followup, takeover or this node's restart resumes it.
    async fn resume_elsewhere(&self, sessions: Vec<SessionId>) -> Vec<(SessionId, NodeId)> {
        let shared = &self.shared;
        let asked = stream::iter(sessions)
            .map(|session| async move {
                let body = encode_request(&ResumeRequest {
                    session: session.clone(),
                })
                .map_err(|e| e.message)?;
                let call = ControlCall {
                    op: ops::RESUME.to_owned(),
                    body,
                    hop: Hop::Client,
                    trace: lineage_bus::trace::current(),
                };
                let reply = shared
                    .bus
                    .control
                    .request(&ControlTarget::Any, call, shared.cfg.request_timeout)
                    .await
                    .map_err(|e| e.message)?;
                let subject = shared.cfg.subjects.control(ops::RESUME);
                let resumed: ResumeReply =
                    decode_reply(&subject, &reply).map_err(|e: ControlError| e.message)?;
                Ok::<_, String>((session, resumed.node))
            })
            .buffer_unordered(RESUMES_IN_FLIGHT)
            .collect::<Vec<_>>();
        match tokio::time::timeout(RESUME_ELSEWHERE_FOR, asked).await {
            Ok(results) => results
                .into_iter()
                .filter_map(|r| {
                    r.map_err(
                        |e| tracing::info!(error = %e, "not resumed elsewhere; it stays released"),
                    )
                    .ok()
                })
                .collect(),
            Err(_) => {
                tracing::info!("resuming elsewhere ran out of time; the rest stay released");
                Vec::new()
            }
        }
    }
}
