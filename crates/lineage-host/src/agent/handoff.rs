//! An agent's half of a graceful shutdown (K1, see [`crate::handoff`]): the engine decides
//! whether the agent may leave unsettled (no turn runs); once it is gone (driver stopped, inbox
//! consumer stopped, handle removed), its placement is released in the registry, fenced by the
//! epoch it holds, so another node resumes it at once with nothing cut short.

use lineage_core::engine::EngineEvent;
use lineage_registry::types::Command;
use tokio::sync::oneshot;

use super::{AgentTask, HandedOff};

impl AgentTask {
    /// Asks the engine to hand the agent off. When it does, the agent leaves (the task's loop
    /// ends) and the reply waits for the release ([`AgentTask::finish_handoff`]); otherwise it
    /// is answered now.
    pub(crate) async fn hand_off(&mut self, reply: oneshot::Sender<HandedOff>) {
        let left_before = self.engine.has_left();
        self.feed(EngineEvent::HandOff).await;
        if self.handed_off.is_some() {
            self.handoff_reply = Some(reply);
            return;
        }
        let outcome = match (left_before, self.done) {
            (true, _) => HandedOff::Gone,
            // The engine agreed but the log could not be made durable: not released.
            (false, true) => HandedOff::Kept(format!(
                "the log of session {} could not be written before the hand-off",
                self.session
            )),
            (false, false) => HandedOff::Busy,
        };
        let _ = reply.send(outcome);
    }

    /// After the agent left: releases its placement if the engine handed it off, and answers
    /// whoever asked.
    pub(crate) async fn finish_handoff(&mut self) {
        let Some(reply) = self.handoff_reply.take() else {
            return;
        };
        let outcome = match (self.handed_off, self.epoch) {
            (Some(pending_work), Some(epoch)) => {
                let session = self.session.clone();
                let node = self.shared.cfg.node.clone();
                let written = self
                    .shared
                    .write(|request_id, at_ms| Command::ReleasePlacement {
                        request_id,
                        at_ms,
                        session: session.clone(),
                        node: node.clone(),
                        expected_epoch: epoch,
                    })
                    .await;
                match written {
                    Ok(_) => HandedOff::Released { pending_work },
                    Err(e) => HandedOff::Kept(e.to_string()),
                }
            }
            (Some(_), None) => {
                HandedOff::Kept(format!("session {} holds no placement epoch", self.session))
            }
            (None, _) => HandedOff::Gone,
        };
        let _ = reply.send(outcome);
    }
}
