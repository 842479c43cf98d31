//! Unit tests of [`WakeOn`]: what wakes a top-level session into a turn.

use super::restore::fold;
use super::*;
use crate::ids::sid;
use crate::journal::TurnMessage;

fn root(wake_on: WakeOn) -> AgentEngine {
    let init = EngineInit {
        session: sid(1),
        parent: None,
        shape: None,
        label: None,
        descriptor_pending: false,
        wake_on,
    };
    fold(init, &[], 0, false, 0).unwrap().0
}

fn arrive(message: TurnMessage, reply: u64) -> EngineEvent {
    EngineEvent::Deliver {
        arrival: Arrival {
            message,
            wake: true,
            dedup_id: Some(format!("m-{reply}")),
            request_id: None,
            settled_child: None,
        },
        reply,
    }
}

fn settled() -> TurnMessage {
    TurnMessage::SubagentSettled {
        sender_session_id: sid(2),
        summary: "subagent kid completed: done".into(),
        changed: None,
    }
}

/// Whether `cmds` ask for a turn, and the `wake` flag of the `inbox/accepted` they stage.
fn seen(cmds: &[EngineCommand]) -> (bool, Option<bool>) {
    let takes = cmds.iter().any(|c| matches!(c, EngineCommand::TakeTurn));
    let wake = cmds.iter().find_map(|c| match c {
        EngineCommand::Stage {
            event: JournalEvent::Accepted(a),
            ..
        } => Some(a.wake),
        _ => None,
    });
    (takes, wake)
}

#[test]
fn f1_a_root_woken_by_prompts_only_holds_a_childs_notice_for_the_next_prompts_turn() {
    // The seed's rule: a settlement notice wakes the root.
    let mut every = root(WakeOn::Every);
    assert_eq!(
        seen(&every.handle(arrive(settled(), 1), 1)),
        (true, Some(true))
    );

    // An editor's root: the notice is accepted, quiet; no turn runs for it.
    let mut editor = root(WakeOn::Prompts);
    assert_eq!(
        seen(&editor.handle(arrive(settled(), 1), 1)),
        (false, Some(false))
    );
    // The next prompt wakes it, and its turn takes the notice with the prompt.
    let prompt = TurnMessage::User {
        content: "and now?".into(),
    };
    assert_eq!(
        seen(&editor.handle(arrive(prompt, 2), 2)),
        (true, Some(true))
    );
    let begun = editor.handle(EngineEvent::BeginTurn, 3);
    let taken = begun.iter().find_map(|c| match c {
        EngineCommand::RunTurn { messages, .. } => Some(messages.clone()),
        _ => None,
    });
    let taken = taken.expect("a turn runs");
    assert_eq!(taken.len(), 2, "{taken:?}");
    assert!(taken
        .iter()
        .any(|m| matches!(m, TurnMessage::SubagentSettled { .. })));
    assert!(taken.iter().any(|m| matches!(m, TurnMessage::User { .. })));
}
