//! Restore from a log: a pure fold (K1, X2, M1–M3).
//!
//! At birth the log holds the creation window (and the accepted first prompt); on cold resume
//! it holds everything the session ever did. [`fold`] reads the agent's own events (after the
//! fork seed) and rebuilds what the engine keeps: the turn index, the outbox seq (a resumed
//! child never reuses one), the dedup ids accepted, the last assistant text and turn stop
//! reason, and the messages accepted but never consumed by a turn (they are queued again, a
//! waking one wakes the agent). On resume, a turn the log shows started but never ended was
//! cut short by the loss of its node: it is closed as `interrupted` first, so the log says how
//! it ended.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::activation::Activation;
use crate::descriptor::SubagentShape;
use crate::error::CoreError;
use crate::ids::SessionId;
use crate::journal::{Accepted, JournalEvent, TurnMessage};
use crate::log::SessionEvent;
use crate::messages::StopReason;

use super::turn::LostSpawn;
use super::{AgentEngine, EngineCommand, EngineInit};

/// The `error` of the `turn/end` a resume writes for a turn cut short by the loss of its node.
pub const LOST_TURN_ERROR: &str =
    "the agent running this turn was lost (its node stopped); resumed here";

/// Builds the engine from `own_events` (the log after its fork seed; `last_seq` is the whole
/// log's last seq) and returns the commands that restoring needs: the closing `turn/end` of a
/// cut-short turn (on resume) and a turn for a restored waking message. An event of a journal
/// kind whose data is unreadable is an error naming it (nothing is guessed).
pub fn fold(
    init: EngineInit,
    own_events: &[SessionEvent],
    last_seq: u64,
    resumed: bool,
    now_ms: u64,
) -> Result<(AgentEngine, Vec<EngineCommand>), CoreError> {
    let mut turn_index = 0;
    let mut outbox_seq = 0;
    let mut consumed: BTreeSet<u64> = BTreeSet::new();
    let mut accepted: Vec<(u64, Accepted)> = Vec::new();
    let mut dedup: BTreeSet<String> = BTreeSet::new();
    let mut last_assistant = None;
    let mut ended_turn = None;
    let mut open_turn: Option<u64> = None;
    let mut children: BTreeSet<SessionId> = BTreeSet::new();
    let mut unsettled: BTreeSet<SessionId> = BTreeSet::new();
    let mut last_reports: BTreeMap<SessionId, String> = BTreeMap::new();
    // The spawns of the turn open at the end of the log (T5).
    let mut turn_spawns: Vec<LostSpawn> = Vec::new();
    let mut workspace = None;
    for event in own_events {
        let Some(journal) = JournalEvent::from_event(&init.session, event)? else {
            continue;
        };
        match journal {
            JournalEvent::TurnStart { index, inputs } => {
                turn_index += 1;
                consumed.extend(inputs);
                open_turn = Some(index);
                turn_spawns.clear();
            }
            JournalEvent::TurnEnd { stop_reason, .. } => {
                ended_turn = Some(stop_reason);
                open_turn = None;
                turn_spawns.clear();
            }
            JournalEvent::TurnInputs { inputs, .. } => consumed.extend(inputs),
            JournalEvent::Accepted(a) => {
                dedup.extend(a.once_keys());
                match &a.message {
                    TurnMessage::SubagentReport {
                        sender_session_id,
                        content,
                    } => {
                        last_reports.insert(sender_session_id.clone(), content.clone());
                    }
                    TurnMessage::SubagentSettled {
                        sender_session_id, ..
                    } => {
                        unsettled.remove(sender_session_id);
                    }
                    TurnMessage::User { .. } => {}
                }
                accepted.push((event.seq, a));
            }
            JournalEvent::Spawned {
                child, shape, call, ..
            } => {
                if let Some(call) = call {
                    turn_spawns.push(LostSpawn {
                        call,
                        child: child.clone(),
                        shape,
                        result: None,
                    });
                }
                children.insert(child.clone());
                match shape {
                    SubagentShape::Continuable => {
                        unsettled.insert(child);
                    }
                    SubagentShape::OneShot => {}
                }
            }
            JournalEvent::ReportSent { seq, .. } | JournalEvent::SettledSent { seq, .. } => {
                outbox_seq = outbox_seq.max(seq);
            }
            JournalEvent::TurnAssistant { text } => last_assistant = Some(text),
            JournalEvent::ChildResult { child, result } => {
                if let Some(lost) = turn_spawns.iter_mut().find(|l| l.child == child) {
                    lost.result = Some(result);
                }
            }
            JournalEvent::WorkspaceSnapshot(snapshot) => {
                workspace = Some(super::workspace_after(workspace, &snapshot));
            }
            // The driver's own state is the driver's to read back (`DriverStart::log`).
            JournalEvent::TurnUser { .. }
            | JournalEvent::SpawnRefused { .. }
            | JournalEvent::DriverState(_) => {}
        }
    }
    let activation = match (init.shape, &init.parent) {
        (Some(_), Some(parent)) => Some(Activation::new(init.session.clone(), parent.clone())),
        (Some(_), None) | (None, _) => None,
    };
    let mut engine = AgentEngine {
        session: init.session,
        parent: init.parent,
        shape: init.shape,
        label: init.label,
        descriptor_pending: init.descriptor_pending,
        wake_on: init.wake_on,
        activation,
        wake: VecDeque::new(),
        quiet: Vec::new(),
        requests: BTreeMap::new(),
        busy: false,
        turn_due: false,
        in_turn: None,
        turn_index,
        outbox_seq,
        accepted: dedup,
        last_assistant,
        last_stop: StopReason::Completed,
        forced_stop: None,
        recorded_waiting: false,
        ended_turn,
        captured_stop: None,
        notice: None,
        left: false,
        children,
        unsettled,
        last_reports,
        wait: None,
        // A turn cut short on resume: its spawns may be asked for again (T5).
        lost_spawns: match (resumed, open_turn) {
            (true, Some(_)) => turn_spawns,
            _ => Vec::new(),
        },
        spawn_asked: false,
        calls: BTreeMap::new(),
        quiesced: false,
        workspace,
        next_seq: last_seq + 1,
        flushed_seq: last_seq,
    };
    let mut out = Vec::new();
    if resumed {
        if let Some(index) = open_turn {
            engine.stage(
                JournalEvent::TurnEnd {
                    index,
                    stop_reason: StopReason::Interrupted,
                    error: Some(LOST_TURN_ERROR.to_owned()),
                },
                &mut out,
            );
            engine.flush(&mut out);
            engine.last_stop = StopReason::Interrupted;
            engine.ended_turn = Some(StopReason::Interrupted);
        }
    }
    for (seq, a) in accepted {
        if consumed.contains(&seq) {
            continue;
        }
        if let Some(id) = &a.request_id {
            engine.requests.insert(seq, id.clone());
        }
        if a.wake {
            engine.wake.push_back((seq, a.message));
            engine.queued(&mut out, now_ms);
        } else {
            engine.quiet.push((seq, a.message));
        }
    }
    Ok((engine, out))
}
