//! Unit tests of [`EngineEvent::DriverState`]: a driver's own state of its agent (an A2A
//! agent's remote task) goes into the log with the turn's end, and a restore leaves it to the
//! driver.

use super::restore::fold;
use super::*;
use crate::ids::sid;
use crate::journal::TurnMessage;

fn root() -> AgentEngine {
    fold(init(), &[], 0, false, 0).unwrap().0
}

fn init() -> EngineInit {
    EngineInit {
        session: sid(1),
        parent: None,
        shape: None,
        label: None,
        descriptor_pending: false,
        wake_on: WakeOn::Every,
    }
}

fn prompt() -> EngineEvent {
    EngineEvent::Deliver {
        arrival: Arrival {
            message: TurnMessage::User {
                content: "go".into(),
            },
            wake: true,
            dedup_id: None,
            request_id: None,
            settled_child: None,
        },
        reply: 1,
    }
}

/// What `cmds` do, in order: the kinds they stage, `Flush`, or `other`.
fn steps(cmds: &[EngineCommand]) -> Vec<String> {
    cmds.iter()
        .map(|c| match c {
            EngineCommand::Stage { event, .. } => format!("stage {}", event.kind()),
            EngineCommand::Flush => "Flush".into(),
            _ => "other".into(),
        })
        .collect()
}

#[test]
fn a2_a_drivers_state_is_written_with_the_turns_end_and_read_back_by_nothing_else() {
    let mut e = root();
    e.handle(prompt(), 1);
    e.handle(EngineEvent::BeginTurn, 2);
    let state = serde_json::json!({"a2a": {"task": "t-1", "context": "c-1"}});
    let staged = e.handle(EngineEvent::DriverState(state.clone()), 3);
    assert_eq!(
        steps(&staged),
        ["stage driver/state"],
        "staged, not yet written"
    );
    let end = e.handle(EngineEvent::TurnEnded(TurnOutcome::Completed), 4);
    let end = steps(&end);
    let flush = end
        .iter()
        .position(|s| s == "Flush")
        .expect("the turn's end is written");
    assert!(
        end[..flush].contains(&"stage turn/end".to_owned()),
        "{end:?}"
    );
    // Restored from a log holding it, the engine is as without it (the driver reads it).
    let event = |seq: u64, j: JournalEvent| {
        let (kind, data) = j.to_parts();
        crate::log::SessionEvent {
            seq,
            kind: kind.into(),
            data,
            at_ms: 1,
        }
    };
    let log = [event(1, JournalEvent::DriverState(state))];
    assert!(fold(init(), &log, 1, true, 5).is_ok());
}
