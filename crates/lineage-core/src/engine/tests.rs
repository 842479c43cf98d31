//! Unit tests of the engine: each asserts on the command list.

use super::restore::fold;
use super::*;
use crate::ids::NodeId;
use crate::journal::TurnMessage;
use crate::log::SessionEvent;
use crate::messages::{Delivery, InboxMessage, SubagentReport};

use crate::ids::sid;

fn engine(shape: Option<SubagentShape>) -> AgentEngine {
    let init = EngineInit {
        wake_on: Default::default(),
        session: sid(2),
        parent: shape.map(|_| sid(1)),
        shape,
        label: Some("worker".into()),
        descriptor_pending: false,
    };
    fold(init, &[], 3, false, 0).unwrap().0
}

fn user(text: &str, dedup: Option<&str>) -> EngineEvent {
    EngineEvent::Deliver {
        arrival: Arrival {
            message: TurnMessage::User {
                content: text.into(),
            },
            wake: true,
            dedup_id: None,
            request_id: dedup.map(str::to_owned),
            settled_child: None,
        },
        reply: 7,
    }
}

fn kinds(cmds: &[EngineCommand]) -> Vec<String> {
    cmds.iter()
        .map(|c| match c {
            EngineCommand::Stage { event, .. } => format!("stage {}", event.kind()),
            EngineCommand::Answer { answer, .. } => format!("answer {answer:?}"),
            EngineCommand::RunTurn { index, .. } => format!("run {index}"),
            EngineCommand::CommitSettlement {
                dispose, with_log, ..
            } => match with_log {
                true => format!("commit dispose={dispose} with the log"),
                false => format!("commit dispose={dispose}"),
            },
            EngineCommand::PublishNotice(n) => format!("notice seq={}", n.seq),
            other => format!("{other:?}"),
        })
        .collect()
}

#[test]
fn m3_a_message_is_logged_and_durable_before_its_answer_and_a_retry_is_a_duplicate() {
    let mut e = engine(Some(SubagentShape::Continuable));
    let cmds = e.handle(user("hi", Some("r1")), 10);
    assert_eq!(
        kinds(&cmds),
        [
            "stage inbox/accepted",
            "Flush",
            "answer Accepted",
            "TakeTurn"
        ]
    );
    assert!(matches!(
        cmds[2],
        EngineCommand::Answer { after_seq: 4, .. }
    ));
    let again = e.handle(user("hi", Some("r1")), 11);
    assert_eq!(kinds(&again), ["answer Duplicate"]);
    assert_eq!(again[0].barrier(), Barrier::DurableThrough(4));
}

#[test]
fn m3_a_duplicate_is_answered_only_once_what_is_staged_is_durable() {
    // A one-shot run stages its turn's events without a flush; a retry of the message that
    // started it is acknowledged only after they are written.
    let mut e = engine(Some(SubagentShape::OneShot));
    e.handle(user("hi", Some("r1")), 1);
    let begin = e.handle(EngineEvent::BeginTurn, 2);
    assert!(!kinds(&begin).contains(&"Flush".to_owned()), "{begin:?}");
    let again = e.handle(user("hi", Some("r1")), 3);
    assert_eq!(kinds(&again), ["Flush", "answer Duplicate"]);
    let staged = e.next_seq - 1;
    assert_eq!(again[1].barrier(), Barrier::DurableThrough(staged));
}

#[test]
fn every_command_names_its_barrier() {
    let report = SubagentReport {
        sender_session_id: sid(2),
        parent_session_id: sid(1),
        seq: 1,
        content: "r".into(),
        delivery: Delivery::Wakeup,
        at_ms: 0,
    };
    let cases = [
        (EngineCommand::Flush, Barrier::None),
        (EngineCommand::TakeTurn, Barrier::None),
        (EngineCommand::Leave, Barrier::None),
        (
            EngineCommand::Answer {
                reply: 1,
                answer: Answer::Done,
                after_seq: 5,
            },
            Barrier::DurableThrough(5),
        ),
        (
            EngineCommand::PublishReport {
                report,
                after_seq: 6,
            },
            Barrier::DurableThrough(6),
        ),
        (
            EngineCommand::BeforeBirth { after_seq: 7 },
            Barrier::DurableThrough(7),
        ),
        (
            EngineCommand::CommitSettlement {
                dispose: false,
                with_log: false,
                stop_reason: StopReason::Completed,
                after_seq: 8,
            },
            Barrier::DurableThrough(8),
        ),
        (
            EngineCommand::CommitSettlement {
                dispose: true,
                with_log: true,
                stop_reason: StopReason::Completed,
                after_seq: 9,
            },
            Barrier::WrittenWith(9),
        ),
        (
            EngineCommand::HandOff {
                pending_work: false,
                after_seq: 10,
            },
            Barrier::DurableThrough(10),
        ),
    ];
    for (command, barrier) in cases {
        assert_eq!(command.barrier(), barrier, "{command:?}");
    }
}

#[test]
fn m3_a_message_during_a_turn_is_accepted_at_once_and_is_the_next_turn() {
    let mut e = engine(Some(SubagentShape::Continuable));
    e.handle(user("first", None), 1);
    let begin = e.handle(EngineEvent::BeginTurn, 2);
    assert_eq!(
        kinds(&begin),
        ["stage turn/start", "stage turn/user", "Flush", "run 0"]
    );
    // Mid-turn: answered at once, no second turn while one runs.
    let mid = e.handle(user("second", Some("r2")), 3);
    assert_eq!(
        kinds(&mid),
        ["stage inbox/accepted", "Flush", "answer Accepted"]
    );
    let end = e.handle(EngineEvent::TurnEnded(TurnOutcome::Completed), 4);
    assert_eq!(kinds(&end), ["stage turn/end", "TakeTurn", "Flush"]);
    let next = e.handle(EngineEvent::BeginTurn, 5);
    match &next[..] {
        [EngineCommand::Stage {
            event: JournalEvent::TurnStart { index: 1, inputs },
            ..
        }, ..] => assert_eq!(inputs, &vec![7]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn x2_settlement_order_commit_before_notice_and_top_level_never_settles() {
    let mut e = engine(Some(SubagentShape::Continuable));
    e.handle(user("go", None), 1);
    e.handle(EngineEvent::BeginTurn, 2);
    e.handle(
        EngineEvent::Replied {
            text: "done".into(),
            reply: 1,
        },
        3,
    );
    let end = e.handle(EngineEvent::TurnEnded(TurnOutcome::Completed), 4);
    assert_eq!(
        kinds(&end),
        [
            "stage turn/end",
            "stage outbox/settled",
            "Flush",
            "commit dispose=false",
            "Leave",
            "PublishEnd { stop_reason: Completed, output: Some(\"done\") }",
            "notice seq=1",
        ]
    );
    assert!(e.has_left());
    assert_eq!(kinds(&e.handle(user("late", None), 5)), ["answer NotLive"]);

    let mut top = engine(None);
    top.handle(user("go", None), 1);
    top.handle(EngineEvent::BeginTurn, 2);
    let end = top.handle(EngineEvent::TurnEnded(TurnOutcome::Completed), 3);
    assert_eq!(kinds(&end), ["stage turn/end", "Flush"]);
    assert!(!top.has_left());
}

#[test]
fn k1_a_checkpoint_is_written_with_its_turns_end_and_before_the_settlement_is_told() {
    let base = crate::workspace::WorkspaceSnapshot::whole("s.base".into(), "SHA-256=b".into());
    let snapshot = crate::workspace::WorkspaceSnapshot {
        object: "s.tip-1".into(),
        digest: "SHA-256=x".into(),
        changed: Some(2),
    };
    let init = || EngineInit {
        wake_on: Default::default(),
        session: sid(2),
        parent: Some(sid(1)),
        shape: Some(SubagentShape::Continuable),
        label: None,
        descriptor_pending: false,
    };
    // Born with a base (its creation window names it).
    let (mut e, _) = fold(
        init(),
        &[ev(1, JournalEvent::WorkspaceSnapshot(base.clone()))],
        3,
        false,
        0,
    )
    .unwrap();
    e.handle(user("go", None), 1);
    e.handle(EngineEvent::BeginTurn, 2);
    let saved = e.handle(EngineEvent::WorkspaceSaved(snapshot.clone()), 3);
    assert_eq!(
        kinds(&saved),
        ["stage workspace/snapshot"],
        "staged, not yet written"
    );
    let end = e.handle(EngineEvent::TurnEnded(TurnOutcome::Completed), 4);
    assert_eq!(
        kinds(&end),
        [
            "stage turn/end",
            "stage outbox/settled",
            "Flush",
            "commit dispose=false",
            "Leave",
            "PublishEnd { stop_reason: Completed, output: None }",
            "notice seq=1",
        ],
        "the snapshot goes out in the turn end's write, before the commit and the notice"
    );
    // The notice points at the child's changes: its base, its latest delta, two paths.
    let expected = crate::workspace::WorkspaceChanges::new(base.clone(), snapshot.clone());
    assert_eq!(expected.changed, 2);
    let notice = end.iter().find_map(|c| match c {
        EngineCommand::PublishNotice(n) => Some(n.clone()),
        _ => None,
    });
    assert_eq!(notice.unwrap().changes, Some(Box::new(expected.clone())));
    // A restored engine knows the same changes from its log.
    let log = [
        ev(1, JournalEvent::WorkspaceSnapshot(base)),
        ev(4, JournalEvent::WorkspaceSnapshot(snapshot)),
    ];
    let (restored, _) = fold(init(), &log, 4, true, 5).unwrap();
    assert_eq!(restored.workspace_changes(), Some(&expected));
}

#[test]
fn k1_a_one_shot_result_carries_the_childs_changes_and_none_without_a_workspace() {
    let base = crate::workspace::WorkspaceSnapshot::whole("s.base".into(), "SHA-256=b".into());
    let init = EngineInit {
        wake_on: Default::default(),
        session: sid(2),
        parent: Some(sid(1)),
        shape: Some(SubagentShape::OneShot),
        label: None,
        descriptor_pending: false,
    };
    let (mut e, _) = fold(
        init,
        &[ev(1, JournalEvent::WorkspaceSnapshot(base.clone()))],
        3,
        false,
        0,
    )
    .unwrap();
    e.handle(user("go", None), 1);
    e.handle(EngineEvent::BeginTurn, 2);
    let end = e.handle(EngineEvent::TurnEnded(TurnOutcome::Completed), 4);
    let changes = end.iter().find_map(|c| match c {
        EngineCommand::ReturnResult { changes, .. } => Some(changes.clone()),
        _ => None,
    });
    // No checkpoint since the base: a reference that says nothing changed.
    let unchanged = crate::workspace::WorkspaceChanges::new(base.clone(), base);
    assert_eq!(unchanged.changed, 0);
    assert_eq!(changes, Some(Some(Box::new(unchanged))));
    let mut plain = engine(Some(SubagentShape::OneShot));
    plain.handle(user("go", None), 1);
    plain.handle(EngineEvent::BeginTurn, 2);
    let end = plain.handle(EngineEvent::TurnEnded(TurnOutcome::Completed), 4);
    assert!(end
        .iter()
        .any(|c| matches!(c, EngineCommand::ReturnResult { changes: None, .. })));
}

#[test]
fn s1_a_one_shot_run_settles_as_a_dispose_and_returns_its_result() {
    let mut e = engine(Some(SubagentShape::OneShot));
    e.handle(user("go", None), 1);
    let begin = e.handle(EngineEvent::BeginTurn, 2);
    assert_eq!(
        kinds(&begin),
        ["stage turn/start", "stage turn/user", "run 0"]
    );
    let end = e.handle(
        EngineEvent::TurnEnded(TurnOutcome::Failed("boom".into())),
        3,
    );
    assert_eq!(
        kinds(&end),
        // The dispose and the turn's events are written at once (no Flush of their own).
        [
            "stage turn/end",
            "commit dispose=true with the log",
            "Leave",
            "PublishEnd { stop_reason: Failed, output: None }",
            "ReturnResult { output: None, stop_reason: Failed, changes: None }",
        ]
    );
}

#[test]
fn x1_a_drain_stop_makes_the_cut_short_turn_disposed() {
    let mut e = engine(Some(SubagentShape::Continuable));
    e.handle(user("go", None), 1);
    e.handle(EngineEvent::BeginTurn, 2);
    let stop = e.handle(EngineEvent::Stop(StopReason::Disposed), 3);
    assert!(stop.contains(&EngineCommand::CancelTurn));
    let end = e.handle(EngineEvent::TurnEnded(TurnOutcome::Cancelled), 4);
    assert!(end.iter().any(|c| matches!(
        c,
        EngineCommand::CommitSettlement {
            stop_reason: StopReason::Disposed,
            ..
        }
    )));
}

#[test]
fn m1_a_report_is_durable_before_it_is_published_and_top_level_cannot_report() {
    let mut e = engine(Some(SubagentShape::Continuable));
    e.handle(user("go", None), 1);
    e.handle(EngineEvent::BeginTurn, 2);
    let cmds = e.handle(
        EngineEvent::Report {
            content: "half".into(),
            delivery: Delivery::Wakeup,
            reply: 9,
        },
        3,
    );
    assert_eq!(
        kinds(&cmds)[..2],
        ["stage outbox/report".to_owned(), "Flush".to_owned()]
    );
    assert!(matches!(
        &cmds[2],
        EngineCommand::PublishReport { report, .. } if report.seq == 1
    ));
    let mut top = engine(None);
    let cmds = top.handle(
        EngineEvent::Report {
            content: "x".into(),
            delivery: Delivery::Quiet,
            reply: 1,
        },
        1,
    );
    assert!(matches!(
        &cmds[..],
        [EngineCommand::Answer { answer: Answer::Refused(m), .. }] if m.contains("top level")
    ));
}

fn ev(seq: u64, event: JournalEvent) -> SessionEvent {
    let (kind, data) = event.to_parts();
    SessionEvent {
        seq,
        kind: kind.into(),
        data,
        at_ms: 0,
    }
}

#[test]
fn k1_restore_closes_a_cut_short_turn_and_queues_what_no_turn_consumed() {
    let accepted = |text: &str, dedup: &str| {
        JournalEvent::Accepted(crate::journal::Accepted {
            message: TurnMessage::User {
                content: text.into(),
            },
            wake: true,
            dedup_id: Some(dedup.into()),
            request_id: None,
        })
    };
    let log = vec![
        ev(1, accepted("one", "a")),
        ev(
            2,
            JournalEvent::TurnStart {
                index: 0,
                inputs: vec![1],
            },
        ),
        ev(
            3,
            JournalEvent::ReportSent {
                seq: 4,
                content: "r".into(),
                delivery: Delivery::Quiet,
            },
        ),
        ev(4, accepted("two", "b")),
    ];
    let init = EngineInit {
        wake_on: Default::default(),
        session: sid(2),
        parent: Some(sid(1)),
        shape: Some(SubagentShape::Continuable),
        label: None,
        descriptor_pending: false,
    };
    let (e, cmds) = fold(init, &log, 4, true, 0).unwrap();
    assert_eq!(kinds(&cmds), ["stage turn/end", "Flush", "TakeTurn"]);
    assert!(matches!(
        &cmds[0],
        EngineCommand::Stage {
            seq: 5,
            event: JournalEvent::TurnEnd {
                index: 0,
                stop_reason: StopReason::Interrupted,
                ..
            }
        }
    ));
    assert_eq!(e.next_turn_index(), 1);
    assert!(e.has_accepted("a") && e.has_accepted("b"));
    assert_eq!(e.pending(), (1, 0));
}

fn from_child(child: u32, settled: bool, reply: ReplyTo) -> EngineEvent {
    let message = match settled {
        true => TurnMessage::SubagentSettled {
            sender_session_id: sid(child),
            summary: format!("child {child} done"),
            changed: None,
        },
        false => TurnMessage::SubagentReport {
            sender_session_id: sid(child),
            content: format!("child {child} progress"),
        },
    };
    EngineEvent::Deliver {
        arrival: Arrival {
            message,
            wake: true,
            dedup_id: Some(format!("{child}-{settled}")),
            request_id: None,
            settled_child: settled.then(|| sid(child)),
        },
        reply,
    }
}

/// A top-level engine in its first turn with continuable children 10 and 11.
fn parent_in_turn() -> AgentEngine {
    parent_in_turn_of(None)
}

fn arrived(cmds: &[EngineCommand], reply: ReplyTo) -> Option<(Vec<TurnMessage>, bool, u64)> {
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
fn h1_m2_a_wait_for_all_children_receives_their_messages_in_the_turn_once_all_settled() {
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
fn h1_a_wait_for_any_child_ends_at_the_first_message_and_leaves_user_messages_queued() {
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
fn h1_a_wait_past_its_deadline_answers_what_arrived_and_refusals_are_one_line() {
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
fn h1_k1_messages_a_turn_received_while_waiting_are_not_handed_to_a_turn_again_after_restore() {
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

fn run_turn_request_ids(cmds: &[EngineCommand]) -> Option<Vec<String>> {
    cmds.iter().find_map(|c| match c {
        EngineCommand::RunTurn { request_ids, .. } => Some(request_ids.clone()),
        _ => None,
    })
}

#[test]
fn f1_a_turn_names_the_followups_it_took_and_a_restore_remembers_queued_ones() {
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
fn t5_a_resumed_turn_asking_for_a_spawn_the_lost_turn_made_gets_that_child_once() {
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
fn t5_a_turn_that_spawns_nothing_does_not_use_up_the_lost_turns_calls() {
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
fn t5_call_fingerprints_are_stable_and_tell_specs_apart() {
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
fn m1_m2_the_outbox_read_back_from_the_log_is_what_the_engine_published() {
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

/// X3 (issue 32, item 1): a drain's stop is final. The root's turn is cut; the disposal notice
/// of its child that the drain sends afterwards is recorded (accepted, durable, answered) but
/// starts no turn, a turn that was due never begins, and the release leaves at once.
#[test]
fn x3_after_a_drain_stop_no_turn_starts_and_a_disposal_notice_is_only_recorded() {
    for shape in [None, Some(SubagentShape::Continuable)] {
        let mut e = parent_in_turn_of(shape);
        let stop = e.handle(EngineEvent::Stop(StopReason::Disposed), 5);
        assert!(stop.contains(&EngineCommand::CancelTurn), "{shape:?}");
        let end = e.handle(EngineEvent::TurnEnded(TurnOutcome::Cancelled), 6);
        assert!(
            !end.contains(&EngineCommand::TakeTurn),
            "{shape:?}: {end:?}"
        );
        // The child's disposal notice and a user's followup arrive after the stop.
        for (event, reply) in [(from_child(10, true, 30), 30), (user("late", None), 7)] {
            let cmds = e.handle(event, 7);
            assert!(
                kinds(&cmds).contains(&"answer Accepted".to_owned()),
                "{shape:?}: {:?}",
                kinds(&cmds)
            );
            assert!(
                cmds.iter()
                    .any(|c| matches!(c, EngineCommand::Answer { reply: r, .. } if *r == reply)),
                "{shape:?}"
            );
            assert!(
                !cmds.contains(&EngineCommand::TakeTurn),
                "{shape:?}: {cmds:?}"
            );
        }
        assert!(e.handle(EngineEvent::BeginTurn, 8).is_empty(), "{shape:?}");
        let release = e.handle(EngineEvent::Release(StopReason::Disposed), 9);
        assert!(
            release.contains(&EngineCommand::Leave),
            "{shape:?}: {release:?}"
        );
        assert!(!release.contains(&EngineCommand::TakeTurn), "{shape:?}");
        assert!(
            !release
                .iter()
                .any(|c| matches!(c, EngineCommand::RunTurn { .. })),
            "{shape:?}"
        );
    }
}

/// X3: a stop that comes while a turn is due (a message accepted, the turn not begun) means
/// that turn never begins.
#[test]
fn x3_a_turn_due_when_the_stop_comes_never_begins() {
    let mut e = engine(None);
    let cmds = e.handle(user("go", None), 1);
    assert!(cmds.contains(&EngineCommand::TakeTurn));
    e.handle(EngineEvent::Stop(StopReason::Disposed), 2);
    let begin = e.handle(EngineEvent::BeginTurn, 3);
    assert!(
        !begin
            .iter()
            .any(|c| matches!(c, EngineCommand::RunTurn { .. })),
        "{begin:?}"
    );
    assert!(!e.in_turn());
}

/// [`parent_in_turn`], of either shape.
fn parent_in_turn_of(shape: Option<SubagentShape>) -> AgentEngine {
    let mut e = engine(shape);
    e.handle(user("go", None), 1);
    e.handle(EngineEvent::BeginTurn, 2);
    for (n, reply) in [(10, 20), (11, 21)] {
        e.handle(EngineEvent::Spawn { reply, call: None }, 3);
        e.handle(
            EngineEvent::ChildBorn {
                child: sid(n),
                shape: SubagentShape::Continuable,
                node: NodeId::parse("node-1").unwrap(),
                run: None,
                result: None,
                reply,
            },
            3,
        );
    }
    e
}

#[test]
fn k1_a_turn_whose_files_were_not_checkpointed_does_not_end_completed() {
    let lost = Err("the turn's files were not checkpointed (over its cap)".to_owned());
    assert_eq!(
        TurnOutcome::Completed.with_checkpoint(lost.clone()),
        TurnOutcome::Failed("the turn's files were not checkpointed (over its cap)".into())
    );
    assert_eq!(
        TurnOutcome::Failed("agent died".into()).with_checkpoint(lost.clone()),
        TurnOutcome::Failed("agent died".into()),
        "a failed turn keeps its own reason"
    );
    assert_eq!(
        TurnOutcome::Cancelled.with_checkpoint(lost),
        TurnOutcome::Cancelled
    );
    assert_eq!(
        TurnOutcome::Completed.with_checkpoint(Ok(())),
        TurnOutcome::Completed
    );
}
