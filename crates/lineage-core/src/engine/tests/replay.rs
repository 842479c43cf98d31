//! What a resumed engine replays (F1, T5, M1, M2): the followups a turn took, the spawns a
//! lost turn made, the outbox read back from the log.

use super::*;

pub(super) fn run_turn_request_ids(cmds: &[EngineCommand]) -> Option<Vec<String>> {
    cmds.iter().find_map(|c| match c {
        EngineCommand::RunTurn { request_ids, .. } => Some(request_ids.clone()),
        _ => None,
    })
}

#[test]
pub(super) fn f1_a_turn_names_the_followups_it_took_and_a_restore_remembers_queued_ones() {
    // Top level: two followups while a turn runs are the next turn, which names both.
    let mut e = engine(None);
    e.handle(user("first", Some("r1")), 1);
    let begin = e.handle(EngineEvent::BeginTurn, 2);
    assert_eq!(run_turn_request_ids(&begin), Some(vec!["r1".to_owned()]));
    e.handle(user("second", Some("r2")), 3);
    e.handle(user("no id", None), 4);
    e.handle(user("third", Some("r3")), 5);
    e.handle(EngineEvent::TurnEnded(TurnOutcome::Completed), 6);
    let next = e.handle(EngineEvent::BeginTurn, 7);
    assert_eq!(run_turn_request_ids(&next), Some(vec!["r2".to_owned()]));
    e.handle(EngineEvent::TurnEnded(TurnOutcome::Completed), 8);
    let next = e.handle(EngineEvent::BeginTurn, 9);
    assert_eq!(run_turn_request_ids(&next), Some(vec![]));

    // A followup accepted but not taken before a crash is named by the turn after restore;
    // one a turn took is not named again.
    let accepted = |text: &str, id: &str| {
        JournalEvent::Accepted(crate::journal::Accepted {
            message: TurnMessage::User {
                content: text.into(),
            },
            wake: true,
            dedup_id: None,
            request_id: Some(id.into()),
        })
    };
    let log = vec![
        ev(1, accepted("one", "taken")),
        ev(
            2,
            JournalEvent::TurnStart {
                index: 0,
                inputs: vec![1],
            },
        ),
        ev(
            3,
            JournalEvent::TurnEnd {
                index: 0,
                stop_reason: StopReason::Completed,
                error: None,
            },
        ),
        ev(4, accepted("two", "queued")),
    ];
    let init = EngineInit {
        wake_on: Default::default(),
        session: sid(2),
        parent: None,
        shape: None,
        label: None,
        descriptor_pending: false,
    };
    let (mut e, _) = fold(init, &log, 4, true, 0).unwrap();
    let begin = e.handle(EngineEvent::BeginTurn, 10);
    assert_eq!(
        run_turn_request_ids(&begin),
        Some(vec!["queued".to_owned()])
    );
}

#[test]
pub(super) fn t5_a_resumed_turn_asking_for_a_spawn_the_lost_turn_made_gets_that_child_once() {
    let spawned = |child: u32, shape, call: &str| JournalEvent::Spawned {
        child: sid(child),
        shape,
        node: NodeId::parse("node-2").unwrap(),
        run: None,
        call: Some(call.into()),
    };
    let log = vec![
        ev(
            1,
            JournalEvent::TurnStart {
                index: 0,
                inputs: vec![],
            },
        ),
        ev(2, spawned(10, SubagentShape::Continuable, "c-cont")),
        ev(3, spawned(11, SubagentShape::OneShot, "c-done")),
        ev(
            4,
            JournalEvent::ChildResult {
                child: sid(11),
                result: serde_json::json!({"output": "42", "stop_reason": "completed"}),
            },
        ),
        ev(5, spawned(12, SubagentShape::OneShot, "c-lost")),
        // The node died here: no turn/end.
    ];
    let init = EngineInit {
        wake_on: Default::default(),
        session: sid(2),
        parent: None,
        shape: None,
        label: None,
        descriptor_pending: false,
    };
    let (mut e, _) = fold(init, &log, 5, true, 0).unwrap();
    e.handle(user("again", None), 1);
    e.handle(EngineEvent::BeginTurn, 2);
    let born = |cmds: &[EngineCommand]| {
        cmds.iter().find_map(|c| match c {
            EngineCommand::Answer {
                answer: Answer::Born { child, result },
                ..
            } => Some((child.clone(), result.clone())),
            _ => None,
        })
    };
    let births = |cmds: &[EngineCommand]| {
        cmds.iter()
            .filter(|c| matches!(c, EngineCommand::BeforeBirth { .. }))
            .count()
    };
    let spawn = |e: &mut AgentEngine, reply, call: &str| {
        e.handle(
            EngineEvent::Spawn {
                reply,
                call: Some(call.into()),
            },
            3,
        )
    };
    // The continuable child and the one-shot child with a result answer; nothing is born.
    let again = spawn(&mut e, 20, "c-cont");
    assert_eq!(born(&again), Some((sid(10), None)));
    assert_eq!(births(&again), 0);
    let again = spawn(&mut e, 21, "c-done");
    assert_eq!(born(&again).unwrap().0, sid(11));
    assert!(
        born(&again).unwrap().1.is_some(),
        "with its recorded result"
    );
    // A one-shot child whose result never reached the log is born again (its result is lost).
    assert_eq!(births(&spawn(&mut e, 22, "c-lost")), 1);
    // Each is answered once: the same call again is a new birth.
    assert_eq!(births(&spawn(&mut e, 23, "c-cont")), 1);
    // A new birth records its call, so a later loss can find it.
    let recorded = e.handle(
        EngineEvent::ChildBorn {
            child: sid(13),
            shape: SubagentShape::Continuable,
            node: NodeId::parse("node-2").unwrap(),
            run: None,
            result: None,
            reply: 23,
        },
        4,
    );
    assert!(recorded.iter().any(|c| matches!(
        c,
        EngineCommand::Stage { event: JournalEvent::Spawned { call: Some(call), .. }, .. } if call == "c-cont"
    )));
    // After that turn ends, a repeat is an ordinary new spawn.
    e.handle(EngineEvent::TurnEnded(TurnOutcome::Completed), 5);
    e.handle(user("later", None), 6);
    e.handle(EngineEvent::BeginTurn, 7);
    assert_eq!(births(&spawn(&mut e, 30, "c-done")), 1);
}

#[test]
pub(super) fn t5_a_turn_that_spawns_nothing_does_not_use_up_the_lost_turns_calls() {
    // The lost turn spawned a continuable child; after the resume, a turn answering a notice
    // (no spawn) runs first, then the turn that repeats the call: still the same child.
    let log = vec![
        ev(
            1,
            JournalEvent::TurnStart {
                index: 0,
                inputs: vec![],
            },
        ),
        ev(
            2,
            JournalEvent::Spawned {
                child: sid(10),
                shape: SubagentShape::Continuable,
                node: NodeId::parse("node-2").unwrap(),
                run: None,
                call: Some("c-cont".into()),
            },
        ),
    ];
    let init = EngineInit {
        wake_on: Default::default(),
        session: sid(2),
        parent: None,
        shape: None,
        label: None,
        descriptor_pending: false,
    };
    let (mut e, _) = fold(init, &log, 2, true, 0).unwrap();
    let spawn = |e: &mut AgentEngine, reply, call: &str| {
        e.handle(
            EngineEvent::Spawn {
                reply,
                call: Some(call.into()),
            },
            3,
        )
    };
    let births = |cmds: &[EngineCommand]| {
        cmds.iter()
            .filter(|c| matches!(c, EngineCommand::BeforeBirth { .. }))
            .count()
    };
    e.handle(user("a notice", None), 1);
    e.handle(EngineEvent::BeginTurn, 2);
    e.handle(EngineEvent::TurnEnded(TurnOutcome::Completed), 3);
    e.handle(user("again", None), 4);
    e.handle(EngineEvent::BeginTurn, 5);
    let again = spawn(&mut e, 20, "c-cont");
    assert_eq!(births(&again), 0, "{again:?}");
    assert!(again.iter().any(|c| matches!(
        c,
        EngineCommand::Answer { answer: Answer::Born { child, .. }, .. } if *child == sid(10)
    )));
    // That turn spawned: once it ends, the window is closed.
    e.handle(EngineEvent::TurnEnded(TurnOutcome::Completed), 6);
    e.handle(user("later", None), 7);
    e.handle(EngineEvent::BeginTurn, 8);
    assert_eq!(births(&spawn(&mut e, 30, "c-cont")), 1);
}

#[test]
pub(super) fn t5_call_fingerprints_are_stable_and_tell_specs_apart() {
    assert_eq!(call_fingerprint(b""), "cbf29ce484222325");
    assert_eq!(
        call_fingerprint(b"{\"a\":1}"),
        call_fingerprint(b"{\"a\":1}")
    );
    assert_ne!(
        call_fingerprint(b"{\"a\":1}"),
        call_fingerprint(b"{\"a\":2}")
    );
}

/// Issue 12: the outbox read back from a child's log is exactly what the engine published (a
/// report, then the settlement notice with the last reply as its output), so a node that
/// adopts the child can send it again.
#[test]
pub(super) fn m1_m2_the_outbox_read_back_from_the_log_is_what_the_engine_published() {
    let mut e = engine(Some(SubagentShape::Continuable));
    let mut log: Vec<SessionEvent> = Vec::new();
    let mut published: Vec<InboxMessage> = Vec::new();
    let events = [
        user("go", None),
        EngineEvent::BeginTurn,
        EngineEvent::Report {
            content: "half".into(),
            delivery: Delivery::Wakeup,
            reply: 9,
        },
        EngineEvent::Replied {
            text: "done".into(),
            reply: 1,
        },
        EngineEvent::TurnEnded(TurnOutcome::Completed),
    ];
    for (now, event) in (10u64..).zip(events) {
        for cmd in e.handle(event, now) {
            match cmd {
                EngineCommand::Stage { seq, event } => {
                    let (kind, data) = event.to_parts();
                    log.push(SessionEvent {
                        seq,
                        kind: kind.into(),
                        data,
                        at_ms: now,
                    });
                }
                EngineCommand::PublishReport { report, .. } => {
                    published.push(InboxMessage::Report(report))
                }
                EngineCommand::PublishNotice(notice) => {
                    published.push(InboxMessage::Settled(notice))
                }
                _ => {}
            }
        }
    }
    assert_eq!(published.len(), 2, "a report and a notice: {published:?}");
    let rebuilt = super::outbox::outbox_messages(&sid(2), &sid(1), &log).unwrap();
    assert_eq!(rebuilt, published);
    assert!(matches!(&rebuilt[1], InboxMessage::Settled(n) if n.output.as_deref() == Some("done")));
}
