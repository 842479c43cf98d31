//! Tests of [`super`] (`activation.rs`).

use super::*;
use ActivationAction as A;
use ActivationEvent as E;

use crate::ids::sid;

fn settle_actions(stop_reason: Option<&str>) -> Vec<ActivationAction> {
    vec![
        A::CaptureResult {
            stop_reason: stop_reason.map(str::to_owned),
        },
        A::MarkTerminal,
        A::DisposeHandle,
        A::SettleObservers,
        A::DeliverSettlement {
            parent_session: sid(1),
            child: sid(2),
        },
    ]
}

fn finished(reason: &str) -> ActivationEvent {
    E::TurnFinished {
        stop_reason: Some(reason.to_owned()),
    }
}

/// A child with one message delivered and its turn running.
fn running_turn() -> Activation {
    let mut a = Activation::new(sid(2), sid(1));
    assert_eq!(a.handle(E::MessageQueued).unwrap(), vec![A::StartTurn]);
    assert_eq!(a.handle(E::MessageAccepted).unwrap(), vec![]);
    assert_eq!(a.handle(E::TurnStarted).unwrap(), vec![]);
    a
}

/// A child that ran one turn, owns `children`, and is now waiting.
fn waiting_with(children: &[u32]) -> Activation {
    let mut a = running_turn();
    for c in children {
        assert_eq!(a.handle(E::ChildAdopted(sid(*c))).unwrap(), vec![]);
    }
    assert_eq!(
        a.handle(finished("end_turn")).unwrap(),
        vec![A::EnterWaiting]
    );
    assert_eq!(a.state(), ActivationState::Waiting);
    a
}

#[test]
fn x2_state_wire_names_are_snake_case() {
    for (s, name) in [
        (ActivationState::Running, "running"),
        (ActivationState::Waiting, "waiting"),
        (ActivationState::Settled, "settled"),
    ] {
        assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{name}\""));
        assert_eq!(s.as_str(), name);
    }
}

#[test]
fn x2_running_settles_directly_when_idle_with_nothing_pending_and_no_children() {
    let mut a = running_turn();
    assert_eq!(
        a.handle(finished("end_turn")).unwrap(),
        settle_actions(Some("end_turn"))
    );
    assert_eq!(a.state(), ActivationState::Settled);
    assert!(!a.is_busy());
}

#[test]
fn x2_running_goes_waiting_when_idle_but_owned_children_remain() {
    let a = waiting_with(&[3, 4]);
    assert_eq!(a.owned_children().len(), 2);
    assert_eq!(a.inbox_len(), 0);
    assert_eq!(a.accepted(), 0);
}

#[test]
fn x2_waiting_settles_when_last_owned_child_disposed() {
    let mut a = waiting_with(&[3, 4]);
    assert_eq!(a.handle(E::ChildDisposed(sid(3))).unwrap(), vec![]);
    assert_eq!(a.state(), ActivationState::Waiting);
    assert_eq!(
        a.handle(E::ChildDisposed(sid(4))).unwrap(),
        settle_actions(Some("end_turn"))
    );
    assert_eq!(a.state(), ActivationState::Settled);
}

#[test]
fn x2_message_while_waiting_starts_a_turn_and_runs_again() {
    let mut a = waiting_with(&[3]);
    assert_eq!(a.handle(E::MessageQueued).unwrap(), vec![A::StartTurn]);
    assert_eq!(a.state(), ActivationState::Running);
    // A second message while the turn is requested only queues.
    assert_eq!(a.handle(E::MessageQueued).unwrap(), vec![]);
    assert_eq!(a.inbox_len(), 2);
    // The child disposing mid-turn does not settle a running activation.
    assert_eq!(a.handle(E::MessageAccepted).unwrap(), vec![]);
    assert_eq!(a.handle(E::TurnStarted).unwrap(), vec![]);
    assert_eq!(a.handle(E::ChildDisposed(sid(3))).unwrap(), vec![]);
    assert_eq!(a.state(), ActivationState::Running);
    // The queued message gets its own turn, then the child settles.
    assert_eq!(a.handle(finished("end_turn")).unwrap(), vec![A::StartTurn]);
    assert_eq!(a.handle(E::MessageAccepted).unwrap(), vec![]);
    assert_eq!(a.handle(E::TurnStarted).unwrap(), vec![]);
    assert_eq!(
        a.handle(finished("max_tokens")).unwrap(),
        settle_actions(Some("max_tokens"))
    );
}

#[test]
fn x2_accepted_turn_not_finished_keeps_the_activation_running() {
    let mut a = running_turn();
    // A second message accepted while the first turn runs: one more turn is owed.
    assert_eq!(a.handle(E::MessageAccepted).unwrap(), vec![]);
    assert_eq!(a.accepted(), 2);
    assert_eq!(a.handle(finished("end_turn")).unwrap(), vec![A::StartTurn]);
    assert_eq!(a.state(), ActivationState::Running);
    assert_eq!(a.handle(E::TurnStarted).unwrap(), vec![]);
    assert_eq!(
        a.handle(finished("end_turn")).unwrap(),
        settle_actions(Some("end_turn"))
    );
}

#[test]
fn x2_fresh_activation_does_not_settle_before_its_first_turn() {
    let mut a = Activation::new(sid(2), sid(1));
    assert_eq!(a.handle(E::ChildAdopted(sid(3))).unwrap(), vec![]);
    assert_eq!(a.handle(E::ChildDisposed(sid(3))).unwrap(), vec![]);
    assert_eq!(a.state(), ActivationState::Running);
    // A cold resume with nothing to do settles when the loop reports idle.
    assert_eq!(a.handle(E::Idle).unwrap(), settle_actions(None));
}

#[test]
fn x2_settled_refuses_work_that_would_be_lost() {
    let mut a = running_turn();
    a.handle(finished("end_turn")).unwrap();
    for event in [
        E::MessageQueued,
        E::MessageAccepted,
        E::TurnStarted,
        E::ChildAdopted(sid(9)),
    ] {
        let name = event.name();
        let err = a.handle(event).unwrap_err();
        assert_eq!(
            err,
            CoreError::IllegalTransition {
                session: sid(2).to_string(),
                state: "settled",
                event: name,
            }
        );
        assert!(!err.to_string().contains('\n'));
    }
    assert_eq!(a.state(), ActivationState::Settled);
}

#[test]
fn x2_settled_is_idempotent_for_duplicates_and_late_events() {
    let mut a = running_turn();
    a.handle(finished("end_turn")).unwrap();
    let before = a.clone();
    for event in [
        finished("end_turn"),
        E::Idle,
        E::ChildDisposed(sid(7)),
        E::Cancel,
        E::Stop,
    ] {
        assert_eq!(a.handle(event).unwrap(), vec![]);
    }
    assert_eq!(a, before);
}

#[test]
fn x2_child_disposed_for_unknown_child_is_a_no_op() {
    let mut a = waiting_with(&[3]);
    assert_eq!(a.handle(E::ChildDisposed(sid(8))).unwrap(), vec![]);
    assert_eq!(a.state(), ActivationState::Waiting);
    // Disposing the same child twice settles once.
    assert_eq!(a.handle(E::ChildDisposed(sid(3))).unwrap().len(), 5);
    assert_eq!(a.handle(E::ChildDisposed(sid(3))).unwrap(), vec![]);
}

#[test]
fn x2_child_adopted_twice_is_a_no_op_and_self_adoption_is_refused() {
    let mut a = running_turn();
    assert_eq!(a.handle(E::ChildAdopted(sid(3))).unwrap(), vec![]);
    assert_eq!(a.handle(E::ChildAdopted(sid(3))).unwrap(), vec![]);
    assert_eq!(a.owned_children().len(), 1);
    let err = a.handle(E::ChildAdopted(sid(2))).unwrap_err();
    assert!(err.to_string().contains("child_adopted(self)"), "{err}");
}

#[test]
fn m4_cancel_stops_the_running_turn_only() {
    let mut a = running_turn();
    assert_eq!(a.handle(E::MessageQueued).unwrap(), vec![]);
    assert_eq!(a.handle(E::Cancel).unwrap(), vec![A::CancelTurn]);
    // The queued message still gets a turn after the cancelled one.
    assert_eq!(a.handle(finished("cancelled")).unwrap(), vec![A::StartTurn]);
    assert_eq!(a.last_stop_reason(), Some("cancelled"));
    // Nothing running: cancel is a no-op.
    let mut idle = waiting_with(&[3]);
    assert_eq!(idle.handle(E::Cancel).unwrap(), vec![]);
}

#[test]
fn x1_stop_cancels_the_turn_then_settles_ignoring_the_inbox() {
    let mut a = running_turn();
    a.handle(E::MessageQueued).unwrap();
    assert_eq!(a.handle(E::Stop).unwrap(), vec![A::CancelTurn]);
    assert_eq!(a.handle(E::Stop).unwrap(), vec![]);
    // A settlement from a grandchild arrives during drain: counted, no turn.
    assert_eq!(a.handle(E::MessageQueued).unwrap(), vec![]);
    assert_eq!(a.inbox_len(), 2);
    assert_eq!(
        a.handle(finished("cancelled")).unwrap(),
        settle_actions(Some("cancelled"))
    );
}

#[test]
fn x1_stop_while_owning_children_waits_for_them_then_settles() {
    let mut a = running_turn();
    a.handle(E::ChildAdopted(sid(3))).unwrap();
    assert_eq!(a.handle(E::Stop).unwrap(), vec![A::CancelTurn]);
    let err = a.handle(E::ChildAdopted(sid(4))).unwrap_err().to_string();
    assert!(err.contains("while stopping"), "{err}");
    assert_eq!(
        a.handle(finished("cancelled")).unwrap(),
        vec![A::EnterWaiting]
    );
    // A turn the loop starts anyway during drain is cancelled at once.
    assert_eq!(a.handle(E::TurnStarted).unwrap(), vec![A::CancelTurn]);
    assert_eq!(
        a.handle(finished("cancelled")).unwrap(),
        vec![A::EnterWaiting]
    );
    assert_eq!(
        a.handle(E::ChildDisposed(sid(3))).unwrap(),
        settle_actions(Some("cancelled"))
    );
}

#[test]
fn x1_stop_on_idle_activation_settles_or_waits_at_once() {
    let mut fresh = Activation::new(sid(2), sid(1));
    assert_eq!(fresh.handle(E::Stop).unwrap(), settle_actions(None));
    let mut waiting = waiting_with(&[3]);
    assert_eq!(waiting.handle(E::Stop).unwrap(), vec![]);
    assert_eq!(waiting.handle(E::MessageQueued).unwrap(), vec![]);
    assert_eq!(waiting.state(), ActivationState::Waiting);
    assert_eq!(
        waiting.handle(E::ChildDisposed(sid(3))).unwrap(),
        settle_actions(Some("end_turn"))
    );
}

#[test]
fn x2_events_and_actions_have_stable_json() {
    assert_eq!(
        serde_json::to_string(&E::ChildDisposed(sid(3))).unwrap(),
        format!("{{\"child_disposed\":\"{}\"}}", sid(3))
    );
    assert_eq!(
        serde_json::to_string(&A::StartTurn).unwrap(),
        "\"start_turn\""
    );
    let back: ActivationEvent =
        serde_json::from_str(r#"{"turn_finished":{"stop_reason":"end_turn"}}"#).unwrap();
    assert_eq!(back, finished("end_turn"));
}
