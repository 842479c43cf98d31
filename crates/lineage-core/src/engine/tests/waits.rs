//! The engine's waits for children (H1): for all, for any, past a deadline, and what a
//! restore remembers of a turn that waited.

use super::*;

/// A top-level engine in its first turn with continuable children 10 and 11.
pub(super) fn parent_in_turn() -> AgentEngine {
    parent_in_turn_of(None)
}

pub(super) fn arrived(
    cmds: &[EngineCommand],
    reply: ReplyTo,
) -> Option<(Vec<TurnMessage>, bool, u64)> {
    cmds.iter().find_map(|c| match c {
        EngineCommand::Answer {
            reply: r,
            answer: Answer::Arrived { messages, complete },
            after_seq,
        } if *r == reply => Some((messages.clone(), *complete, *after_seq)),
        _ => None,
    })
}

#[test]
pub(super) fn h1_m2_a_wait_for_all_children_receives_their_messages_in_the_turn_once_all_settled() {
    let mut e = parent_in_turn();
    let wait = e.handle(
        EngineEvent::WaitChildren {
            children: None,
            mode: WaitMode::All,
            reply: 30,
        },
        4,
    );
    assert!(arrived(&wait, 30).is_none(), "two children still run");
    // A report and one settlement: still waiting for child 11.
    assert!(arrived(&e.handle(from_child(10, false, 40), 5), 30).is_none());
    assert!(arrived(&e.handle(from_child(10, true, 41), 6), 30).is_none());
    let last = e.handle(from_child(11, true, 42), 7);
    let (messages, complete, after_seq) = arrived(&last, 30).expect("the wait is over");
    assert!(complete);
    assert_eq!(messages.len(), 3, "{messages:?}");
    // The inputs are durable (turn/inputs, one turn/user each) before the answer.
    let k = kinds(&last);
    let at = |s: &str| k.iter().rposition(|x| x == s).unwrap();
    assert!(at("stage turn/inputs") < at("Flush"));
    assert!(
        at("Flush")
            < k.iter()
                .rposition(|x| x.starts_with("answer Arrived"))
                .unwrap()
    );
    assert_eq!(k.iter().filter(|x| *x == "stage turn/user").count(), 3);
    let flushed = last
        .iter()
        .filter_map(|c| match c {
            EngineCommand::Stage { seq, .. } => Some(*seq),
            _ => None,
        })
        .max()
        .unwrap();
    assert_eq!(after_seq, flushed);
    // Received in the turn: no further turn for them, and none pending.
    assert_eq!(e.pending(), (0, 0));
    let end = e.handle(EngineEvent::TurnEnded(TurnOutcome::Completed), 8);
    assert!(
        !kinds(&end).contains(&"TakeTurn".to_owned()),
        "{:?}",
        kinds(&end)
    );
}

#[test]
pub(super) fn h1_a_wait_for_any_child_ends_at_the_first_message_and_leaves_user_messages_queued() {
    let mut e = parent_in_turn();
    e.handle(user("later", None), 4);
    e.handle(
        EngineEvent::WaitChildren {
            children: Some(vec![sid(11)]),
            mode: WaitMode::Any,
            reply: 30,
        },
        5,
    );
    // Child 10 is not waited for.
    assert!(arrived(&e.handle(from_child(10, false, 40), 6), 30).is_none());
    let got = e.handle(from_child(11, false, 41), 7);
    let (messages, complete, _) = arrived(&got, 30).expect("over at the first message");
    assert!(complete);
    assert_eq!(
        messages,
        vec![TurnMessage::SubagentReport {
            sender_session_id: sid(11),
            content: "child 11 progress".into()
        }]
    );
    assert_eq!(e.last_report(&sid(11)), Some("child 11 progress"));
    // The user message and child 10's report stay for the next turn.
    assert_eq!(e.pending(), (2, 0));
}

#[test]
pub(super) fn h1_a_wait_past_its_deadline_answers_what_arrived_and_refusals_are_one_line() {
    let mut e = parent_in_turn();
    e.handle(
        EngineEvent::WaitChildren {
            children: None,
            mode: WaitMode::All,
            reply: 30,
        },
        4,
    );
    e.handle(from_child(10, false, 40), 5);
    // A second wait while one is pending, and a stranger, are refused.
    let again = e.handle(
        EngineEvent::WaitChildren {
            children: Some(vec![sid(99)]),
            mode: WaitMode::Any,
            reply: 31,
        },
        6,
    );
    assert_eq!(
        kinds(&again),
        ["answer Refused(\"a wait for children is already in progress in this turn; wait for it\")"]
    );
    let expired = e.handle(EngineEvent::WaitExpired { reply: 30 }, 7);
    let (messages, complete, _) = arrived(&expired, 30).unwrap();
    assert!(!complete);
    assert_eq!(messages.len(), 1);
    // A stale deadline does nothing.
    assert!(e
        .handle(EngineEvent::WaitExpired { reply: 30 }, 8)
        .is_empty());
    let stranger = e.handle(
        EngineEvent::WaitChildren {
            children: Some(vec![sid(99)]),
            mode: WaitMode::Any,
            reply: 32,
        },
        9,
    );
    match &stranger[..] {
        [EngineCommand::Answer {
            answer: Answer::Refused(text),
            ..
        }] => {
            assert!(text.contains("is not a child of session"), "{text}");
            assert!(!text.contains('\n'));
        }
        other => panic!("{other:?}"),
    }
    assert!(e.check_child(&sid(10)).is_ok());
}

#[test]
pub(super) fn h1_k1_messages_a_turn_received_while_waiting_are_not_handed_to_a_turn_again_after_restore(
) {
    let mut e = parent_in_turn();
    let mut log: Vec<SessionEvent> = Vec::new();
    let mut keep = |cmds: &[EngineCommand]| {
        for c in cmds {
            if let EngineCommand::Stage { seq, event } = c {
                let (kind, data) = event.to_parts();
                log.push(SessionEvent {
                    seq: *seq,
                    kind: kind.to_owned(),
                    data,
                    at_ms: 0,
                });
            }
        }
    };
    e.handle(
        EngineEvent::WaitChildren {
            children: None,
            mode: WaitMode::Any,
            reply: 30,
        },
        4,
    );
    keep(&e.handle(from_child(10, true, 40), 5));
    keep(&e.handle(from_child(11, false, 41), 6));
    assert_eq!(e.pending(), (1, 0), "the second report came after the wait");
    let init = EngineInit {
        wake_on: Default::default(),
        session: sid(2),
        parent: None,
        shape: None,
        label: None,
        descriptor_pending: false,
    };
    let (restored, _) = fold(init, &log, 100, true, 0).unwrap();
    // Only child 11's report waits for a turn; child 10's settlement was received.
    assert_eq!(restored.pending(), (1, 0));
    assert_eq!(restored.last_report(&sid(11)), Some("child 11 progress"));
}
