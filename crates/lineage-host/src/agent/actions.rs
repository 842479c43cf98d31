//! Actions a turn asks for that go beyond the agent itself (M3, M4; H1): a followup to a child,
//! an interrupt of a descendant, the list of its children, a wait for them, one child read as an
//! MCP task ([`super::child_task`], A3).
//!
//! Each runs beside the task as a [`Side`] future (a followup or interrupt may cross the bus to
//! the child's node, which must not stop the task from serving its mailbox), and its outcome is
//! the action's answer. Whose child it is and what a wait receives are the engine's rules
//! ([`lineage_core::engine::AgentEngine::check_child`], [`lineage_core::engine::wait`]); the
//! authority of an interrupt is the interrupt's own check (the caller as the target's
//! ancestor). The side futures of a turn are dropped when it ends.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use lineage_core::authority::InterruptAuthority;
use lineage_core::descriptor::SubagentDescriptor;
use lineage_core::engine::EngineEvent;
use lineage_core::ids::SessionId;
use lineage_drivers::driver::{ActionOutcome, ChildInfo, TurnAction};
use lineage_protocol::control::{FollowupRequest, InterruptRequest};
use lineage_registry::types::SessionRecord;

use super::{AgentTask, Pending};
use crate::control::Hop;
use crate::shared::Shared;

/// An action in flight beside the task.
pub(super) type Side = Pin<Box<dyn Future<Output = SideDone> + Send>>;

/// What a [`Side`] future ends with.
pub(super) enum SideDone {
    /// The action's outcome; `followed_up` names a child a followup reached.
    Answer {
        reply: u64,
        outcome: ActionOutcome,
        followed_up: Option<SessionId>,
    },
    /// A wait's deadline passed.
    WaitDeadline(u64),
}

impl AgentTask {
    /// Starts `action` (one of those served here) for the driver waiting on `reply`.
    pub(super) async fn side_action(
        &mut self,
        action: TurnAction,
        reply: u64,
        sides: &mut FuturesUnordered<Side>,
    ) {
        let shared = self.shared.clone();
        let session = self.session.clone();
        match action {
            TurnAction::Followup { child, content } => {
                if let Err(refusal) = self.engine.check_child(&child) {
                    return self.answer_action(reply, ActionOutcome::Refused(refusal));
                }
                sides.push(followup(shared, child, content, reply));
            }
            TurnAction::Interrupt { child } => {
                sides.push(interrupt(shared, session, child, reply));
            }
            TurnAction::ChildTask { child } => {
                sides.push(super::child_task::read(shared, session, child, reply));
            }
            TurnAction::ListChildren => {
                let reports = self
                    .engine
                    .children()
                    .iter()
                    .filter_map(|c| Some((c.clone(), self.engine.last_report(c)?.to_owned())))
                    .collect();
                sides.push(list(shared, session, reports, reply));
            }
            TurnAction::WaitChildren {
                children,
                mode,
                timeout_ms,
            } => {
                self.feed(EngineEvent::WaitChildren {
                    children,
                    mode,
                    reply,
                })
                .await;
                if self.pending.contains_key(&reply) {
                    sides.push(Box::pin(async move {
                        tokio::time::sleep(Duration::from_millis(timeout_ms)).await;
                        SideDone::WaitDeadline(reply)
                    }));
                }
            }
            TurnAction::ApplyChildChanges { child } => {
                if let Err(refusal) = self.engine.check_child(&child) {
                    return self.answer_action(reply, ActionOutcome::Refused(refusal));
                }
                let Some((dir, caps)) = self.workspace.as_ref().map(|w| (w.dir.clone(), w.caps))
                else {
                    let refusal = format!(
                        "session {session} has no files of its own to apply {child}'s changes to (it was started without a workspace)"
                    );
                    return self.answer_action(reply, ActionOutcome::Refused(refusal));
                };
                sides.push(apply_changes(shared, child, dir, caps, reply));
            }
            other @ (TurnAction::Reply(_)
            | TurnAction::Report { .. }
            | TurnAction::Spawn(_)
            | TurnAction::Usage(_)) => {
                let text = format!("{other:?} is not a side action");
                self.answer_action(reply, ActionOutcome::Refused(text));
            }
        }
    }

    /// A side action ended.
    pub(super) async fn on_side(&mut self, done: SideDone) {
        match done {
            SideDone::Answer {
                reply,
                outcome,
                followed_up,
            } => {
                if let Some(child) = followed_up {
                    self.feed(EngineEvent::ChildFollowedUp(child)).await;
                }
                self.answer_action(reply, outcome);
            }
            SideDone::WaitDeadline(reply) => self.feed(EngineEvent::WaitExpired { reply }).await,
        }
    }

    /// Answers the driver waiting on `reply` (once).
    fn answer_action(&mut self, reply: u64, outcome: ActionOutcome) {
        if let Some(Pending::Action(tx)) = self.pending.remove(&reply) {
            let _ = tx.send(outcome);
        }
    }
}

// The side futures are built by plain functions returning [`Side`]: an agent's followup may
// reach an agent task on this node, so their types must not name the task's own future.

/// M3: the followup goes where the child is (cold-resuming it if it settled).
fn followup(shared: Arc<Shared>, child: SessionId, content: String, reply: u64) -> Side {
    Box::pin(async move {
        let request = FollowupRequest {
            session: child.clone(),
            content,
            request_id: Some(shared.mint.request()),
        };
        match shared.followup(request, Hop::Client).await {
            Ok(_) => SideDone::Answer {
                reply,
                outcome: ActionOutcome::Done,
                followed_up: Some(child),
            },
            Err(e) => SideDone::Answer {
                reply,
                outcome: ActionOutcome::Refused(e.to_string()),
                followed_up: None,
            },
        }
    })
}

/// Issue 39: the child's changes into this agent's own files.
fn apply_changes(
    shared: Arc<Shared>,
    child: SessionId,
    dir: std::path::PathBuf,
    caps: lineage_workspace::Caps,
    reply: u64,
) -> Side {
    Box::pin(async move {
        let outcome = match shared.apply_child_changes(&child, &dir, caps).await {
            Ok((changed, already)) => ActionOutcome::Applied { changed, already },
            Err(e) => ActionOutcome::Refused(e.to_string()),
        };
        SideDone::Answer {
            reply,
            outcome,
            followed_up: None,
        }
    })
}

/// M4: with this agent's authority as the target's ancestor.
fn interrupt(shared: Arc<Shared>, session: SessionId, target: SessionId, reply: u64) -> Side {
    Box::pin(async move {
        let request = InterruptRequest {
            target,
            authority: InterruptAuthority::Ancestor { session },
        };
        let outcome = match shared.interrupt(request, Hop::Client).await {
            Ok(_) => ActionOutcome::Done,
            Err(e) => ActionOutcome::Refused(e.to_string()),
        };
        SideDone::Answer {
            reply,
            outcome,
            followed_up: None,
        }
    })
}

/// The registry's records of this agent's direct children, oldest first, with the last report
/// each sent.
fn list(
    shared: Arc<Shared>,
    session: SessionId,
    reports: std::collections::BTreeMap<SessionId, String>,
    reply: u64,
) -> Side {
    Box::pin(async move {
        let outcome = match shared.registry.subtree(session.clone()).await {
            Ok(records) => {
                let mut children: Vec<&SessionRecord> = records
                    .iter()
                    .filter(|r| r.header.parent_session() == Some(&session))
                    .collect();
                children.sort_by_key(|r| r.created_at_ms);
                ActionOutcome::Children(
                    children
                        .into_iter()
                        .map(|r| child_info(r, reports.get(r.id()).cloned()))
                        .collect(),
                )
            }
            Err(e) => ActionOutcome::Refused(e.to_string()),
        };
        SideDone::Answer {
            reply,
            outcome,
            followed_up: None,
        }
    })
}

/// A child's record as the list shows it.
fn child_info(record: &SessionRecord, last_report: Option<String>) -> ChildInfo {
    let descriptor: Option<SubagentDescriptor> = record.descriptor.as_ref().and_then(|d| d.parse());
    ChildInfo {
        session: record.id().clone(),
        state: record.state,
        shape: descriptor.as_ref().map(|d| d.mode),
        node: record.placement.as_ref().map(|p| p.node.clone()),
        label: descriptor.and_then(|d| d.label),
        last_report,
    }
}
