//! Graceful shutdown (K1): a node that stops lets running turns finish, then hands its idle
//! agents off instead of cutting anything short.
//!
//! - [`EngineEvent::Quiesce`](super::EngineEvent::Quiesce): the host winds down. The agent
//!   takes no new turn here; a running turn goes on to its end (its reply, reports, end and
//!   settlement are recorded and published as usual). Messages still arrive and are accepted
//!   into the log (durable, answered), and wait for the next host: a resume queues every
//!   accepted message no turn consumed. A one-shot run is not quiesced: its one turn belongs to
//!   its caller's turn, which waits for it.
//! - [`EngineEvent::HandOff`](super::EngineEvent::HandOff): the agent leaves without settling,
//!   when no turn runs: everything staged is made durable, then
//!   [`EngineCommand::HandOff`] (the host releases the placement, so another node, or this one
//!   after its restart, resumes it with nothing cut short; `pending_work` says whether a
//!   waking message waits, so the host asks another node to resume it at once), then
//!   [`EngineCommand::Leave`]. While a turn runs (the grace ran out) or for a one-shot run it
//!   is an explicit no-op: the host stops that agent as before, and the resume closes the turn
//!   as `interrupted`.

use crate::descriptor::SubagentShape;

use super::{AgentEngine, EngineCommand};

impl AgentEngine {
    /// Whether the host wound down: no new turn starts here.
    pub fn quiesced(&self) -> bool {
        self.quiesced
    }

    /// Whether accepted waking input waits for a turn (or one is due).
    pub fn has_pending_work(&self) -> bool {
        self.turn_due || !self.wake.is_empty()
    }

    pub(super) fn quiesce(&mut self) {
        match self.shape {
            Some(SubagentShape::OneShot) => {}
            Some(SubagentShape::Continuable) | None => self.quiesced = true,
        }
    }

    pub(super) fn hand_off(&mut self, out: &mut Vec<EngineCommand>) {
        if self.in_turn.is_some() || self.shape == Some(SubagentShape::OneShot) {
            return;
        }
        let after_seq = self.flush(out);
        out.push(EngineCommand::HandOff {
            pending_work: self.has_pending_work(),
            after_seq,
        });
        self.left = true;
        out.push(EngineCommand::Leave);
    }
}

#[cfg(test)]
mod tests {
    use crate::descriptor::SubagentShape;
    use crate::engine::{
        AgentEngine, Answer, Arrival, EngineCommand, EngineEvent, EngineInit, TurnOutcome,
    };

    use crate::journal::{JournalEvent, TurnMessage};
    use crate::messages::StopReason;

    use crate::ids::sid;

    fn engine(shape: Option<SubagentShape>) -> AgentEngine {
        let init = EngineInit {
            wake_on: Default::default(),
            session: sid(2),
            parent: shape.map(|_| sid(1)),
            shape,
            label: Some("kid".into()),
            descriptor_pending: false,
        };
        crate::engine::restore::fold(init, &[], 3, false, 0)
            .unwrap()
            .0
    }

    fn user(text: &str, id: &str) -> EngineEvent {
        EngineEvent::Deliver {
            arrival: Arrival {
                message: TurnMessage::User {
                    content: text.into(),
                },
                wake: true,
                dedup_id: None,
                request_id: Some(id.into()),
                settled_child: None,
            },
            reply: 7,
        }
    }

    fn takes_turn(cmds: &[EngineCommand]) -> bool {
        cmds.iter().any(|c| matches!(c, EngineCommand::TakeTurn))
    }

    #[test]
    fn k1_a_quiesced_agent_accepts_messages_but_takes_no_turn_then_hands_off_with_work() {
        for shape in [Some(SubagentShape::Continuable), None] {
            let mut e = engine(shape);
            assert!(e.handle(EngineEvent::Quiesce, 1).is_empty());
            assert!(e.quiesced());
            let cmds = e.handle(user("later", "req-1"), 2);
            // Accepted durably and answered, but no turn.
            assert!(cmds.iter().any(|c| matches!(
                c,
                EngineCommand::Answer {
                    answer: Answer::Accepted,
                    ..
                }
            )));
            assert!(!takes_turn(&cmds), "{cmds:?}");
            assert!(e.handle(EngineEvent::BeginTurn, 3).is_empty());
            assert!(!e.in_turn());
            // The hand-off: nothing staged (the message is durable already), no settlement.
            let cmds = e.handle(EngineEvent::HandOff, 4);
            assert_eq!(
                cmds,
                vec![
                    EngineCommand::HandOff {
                        pending_work: true,
                        after_seq: 4
                    },
                    EngineCommand::Leave
                ]
            );
            assert!(e.has_left());
            // Once gone, a message is not taken (its sender resumes the session).
            let late = e.handle(user("too late", "req-2"), 5);
            assert!(late.iter().any(|c| matches!(
                c,
                EngineCommand::Answer {
                    answer: Answer::NotLive,
                    ..
                }
            )));
        }
    }

    #[test]
    fn k1_a_running_turn_finishes_normally_under_quiesce_and_settles_uninterrupted() {
        let mut e = engine(Some(SubagentShape::Continuable));
        let cmds = e.handle(user("work", "req-1"), 1);
        assert!(takes_turn(&cmds));
        let cmds = e.handle(EngineEvent::BeginTurn, 2);
        assert!(cmds
            .iter()
            .any(|c| matches!(c, EngineCommand::RunTurn { .. })));
        e.handle(EngineEvent::Quiesce, 3);
        // Mid-turn: no hand-off (the host abandons it if the grace runs out).
        assert!(e.handle(EngineEvent::HandOff, 4).is_empty());
        assert!(!e.has_left());
        e.handle(
            EngineEvent::Replied {
                text: "done".into(),
                reply: 9,
            },
            5,
        );
        let cmds = e.handle(EngineEvent::TurnEnded(TurnOutcome::Completed), 6);
        let ended = cmds.iter().find_map(|c| match c {
            EngineCommand::Stage {
                event: JournalEvent::TurnEnd { stop_reason, .. },
                ..
            } => Some(*stop_reason),
            _ => None,
        });
        assert_eq!(ended, Some(StopReason::Completed));
        let notice = cmds.iter().find_map(|c| match c {
            EngineCommand::PublishNotice(n) => Some(n.stop_reason),
            _ => None,
        });
        assert_eq!(notice, Some(StopReason::Completed), "{cmds:?}");
    }

    #[test]
    fn k1_an_idle_agent_hands_off_without_work_and_a_one_shot_never_quiesces() {
        let mut e = engine(None);
        e.handle(EngineEvent::Quiesce, 1);
        let cmds = e.handle(EngineEvent::HandOff, 2);
        assert_eq!(
            cmds,
            vec![
                EngineCommand::HandOff {
                    pending_work: false,
                    after_seq: 3
                },
                EngineCommand::Leave
            ]
        );
        let mut one = engine(Some(SubagentShape::OneShot));
        one.handle(EngineEvent::Quiesce, 1);
        assert!(!one.quiesced(), "a one-shot's turn belongs to its caller's");
        assert!(one.handle(EngineEvent::HandOff, 2).is_empty());
        assert!(!one.has_left());
    }
}
