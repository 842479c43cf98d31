//! Stops (X3) and checkpoints (K1): no turn after a drain stop, a turn due at the stop never
//! begins, a turn whose files were not stored does not end completed.

use super::*;

/// X3 (issue 32, item 1): a drain's stop is final. The root's turn is cut; the disposal notice
/// of its child that the drain sends afterwards is recorded (accepted, durable, answered) but
/// starts no turn, a turn that was due never begins, and the release leaves at once.
#[test]
pub(super) fn x3_after_a_drain_stop_no_turn_starts_and_a_disposal_notice_is_only_recorded() {
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
pub(super) fn x3_a_turn_due_when_the_stop_comes_never_begins() {
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

#[test]
pub(super) fn k1_a_turn_whose_files_were_not_checkpointed_does_not_end_completed() {
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
