//! Unit tests of the engine: each asserts on the command list.

use super::restore::fold;
use super::*;
use crate::ids::NodeId;
use crate::journal::TurnMessage;
use crate::log::SessionEvent;
use crate::messages::{Delivery, InboxMessage, SubagentReport};

use crate::ids::sid;

mod replay;
mod stop;
mod waits;

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
