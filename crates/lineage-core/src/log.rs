//! The session event log: append-only, sequence-numbered from 1 (L1, P1, C3).
//!
//! A [`SessionLog`] holds one session's transcript and lifecycle events: the fork seed inherited
//! from the parent (the first [`SessionLog::seed_length`] events), then the child's own events:
//! its `subagent/descriptor`, its delegated policy (`sandbox/mode`, `approval/policy`), its turns.
//! Sequence numbers are contiguous from 1 by construction; [`SessionLog::from_events`] refuses a
//! loaded log that is not.
//!
//! Everything that reads a child's *own* birth record (descriptor, policy snapshot) looks only at
//! [`SessionLog::events_after_seed`]: a seed forked from a parent that is itself a subagent holds
//! the parent's descriptor and policy events, which are not the child's.

use serde::{Deserialize, Serialize};

use crate::descriptor::DESCRIPTOR_EVENT;
use crate::error::CoreError;
use crate::ids::SessionId;

/// One entry of a session log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionEvent {
    /// Position in the log, from 1, contiguous.
    pub seq: u64,
    /// What happened, e.g. `subagent/descriptor`, `sandbox/mode`, `approval/policy`,
    /// `turn/user`, `turn/assistant`.
    pub kind: String,
    /// The event's payload; its shape depends on `kind`.
    pub data: serde_json::Value,
    /// When it was appended, unix milliseconds (passed in: the core has no clock).
    pub at_ms: u64,
}

/// One session's append-only event log.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionLog {
    session: SessionId,
    events: Vec<SessionEvent>,
    seed_length: usize,
}

impl SessionLog {
    /// A new log for `session` that starts with the `seed` events (a fork seed inherited from the
    /// parent, possibly empty). The seed keeps its kinds, data and times but is renumbered from 1
    /// in this log; [`SessionLog::seed_length`] is its length.
    pub fn create(session: SessionId, seed: Vec<SessionEvent>) -> Self {
        let events: Vec<SessionEvent> = seed
            .into_iter()
            .zip(1u64..)
            .map(|(event, seq)| SessionEvent { seq, ..event })
            .collect();
        let seed_length = events.len();
        SessionLog {
            session,
            events,
            seed_length,
        }
    }

    /// Rebuilds a log loaded from storage, checking that sequence numbers run 1, 2, 3, ... with
    /// no gap and that `seed_length` is not past the end ([`CoreError::InvalidLog`] otherwise).
    pub fn from_events(
        session: SessionId,
        events: Vec<SessionEvent>,
        seed_length: u64,
    ) -> Result<Self, CoreError> {
        let invalid = |reason: String| CoreError::InvalidLog {
            session: session.to_string(),
            reason,
        };
        for (event, expected) in events.iter().zip(1u64..) {
            if event.seq != expected {
                return Err(invalid(format!(
                    "event {expected} has sequence number {}; sequence numbers must run from 1 without gaps",
                    event.seq
                )));
            }
        }
        let seed_length = usize::try_from(seed_length)
            .ok()
            .filter(|s| *s <= events.len())
            .ok_or_else(|| {
                invalid(format!(
                    "seed length {seed_length} is past the end of a log of {} events",
                    events.len()
                ))
            })?;
        Ok(SessionLog {
            session,
            events,
            seed_length,
        })
    }

    /// The session this log belongs to.
    pub fn session(&self) -> &SessionId {
        &self.session
    }

    /// How many leading events were inherited from the fork seed.
    pub fn seed_length(&self) -> u64 {
        self.seed_length as u64
    }

    /// All events, seed first, in sequence order.
    pub fn events(&self) -> &[SessionEvent] {
        &self.events
    }

    /// The session's own events: everything after the seed.
    pub fn events_after_seed(&self) -> &[SessionEvent] {
        self.events.get(self.seed_length..).unwrap_or(&[])
    }

    /// Number of events, seed included.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// True when the log holds no event at all.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The sequence number of the last event, 0 for an empty log.
    pub fn last_seq(&self) -> u64 {
        self.events.len() as u64
    }

    /// Appends an event with the next sequence number and returns it.
    pub fn append(
        &mut self,
        kind: impl Into<String>,
        data: serde_json::Value,
        at_ms: u64,
    ) -> &SessionEvent {
        let slot = self.events.len();
        self.events.push(SessionEvent {
            seq: slot as u64 + 1,
            kind: kind.into(),
            data,
            at_ms,
        });
        // `slot` was the length before the push, so it is the index of the new event.
        &self.events[slot]
    }

    /// The session's own events (after the seed) of one `kind`, in order.
    pub fn own_events_of_kind<'a>(
        &'a self,
        kind: &'a str,
    ) -> impl Iterator<Item = &'a SessionEvent> + 'a {
        self.events_after_seed()
            .iter()
            .filter(move |event| event.kind == kind)
    }

    /// The first `subagent/descriptor` event after the seed, if any (P1). A descriptor inside the
    /// seed belongs to the parent the seed was forked from and is ignored.
    pub fn descriptor_event(&self) -> Option<&SessionEvent> {
        self.own_events_of_kind(DESCRIPTOR_EVENT).next()
    }

    /// Gives the events back, seed first.
    pub fn into_events(self) -> Vec<SessionEvent> {
        self.events
    }
}

/// A log spread over fewer messages than this is never compacted.
pub const COMPACT_MIN_MESSAGES: u64 = 8;

/// Compaction (issue 35): whether a turn's end writes the whole log of `events` events, now
/// stored in `messages` messages, again as one message (and drops the messages before it).
///
/// A continuable session makes each event durable on its own, so a turn of a hundred events is
/// a hundred messages for a cold resume to read. Due when the log is spread over at least
/// [`COMPACT_MIN_MESSAGES`] messages and over at least one for every four events. The second
/// part bounds the rewriting: every message after a compaction holds at least one event, so a
/// compaction comes only once the log has grown by a third since the last one, and all the
/// compactions of a session together write at most four times its final log.
pub fn compaction_due(events: usize, messages: u64) -> bool {
    messages >= COMPACT_MIN_MESSAGES && messages.saturating_mul(4) >= events as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn l3_compaction_is_due_for_a_log_spread_over_many_messages_only() {
        // A continuable turn: about one message per event.
        assert!(compaction_due(101, 96));
        // Few messages, however many events: a one-shot turn is one message.
        assert!(!compaction_due(100, 1));
        assert!(!compaction_due(7, COMPACT_MIN_MESSAGES - 1));
        assert!(compaction_due(8, COMPACT_MIN_MESSAGES));
        // A compacted log of 1,000 events and ten messages since: not yet.
        assert!(!compaction_due(1_010, 11));
        // It has grown by a third: due.
        assert!(compaction_due(1_336, 334));
    }

    #[test]
    fn l3_compactions_write_at_most_four_times_the_final_log() {
        // Turns of `k` events, each flushed on its own, compacted whenever due.
        for k in [1usize, 3, 10, 100] {
            let (mut events, mut messages, mut rewritten) = (0usize, 1u64, 0usize);
            for _turn in 0..2_000 {
                events += k;
                messages += k as u64;
                if compaction_due(events, messages) {
                    rewritten += events;
                    messages = 1;
                }
            }
            assert!(
                rewritten <= 4 * events,
                "turns of {k}: {rewritten} for {events}"
            );
        }
    }

    fn sid() -> SessionId {
        SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000002").unwrap()
    }

    fn event(seq: u64, kind: &str) -> SessionEvent {
        SessionEvent {
            seq,
            kind: kind.into(),
            data: json!({}),
            at_ms: 10,
        }
    }

    #[test]
    fn l1_log_renumbers_the_seed_and_appends_from_the_next_sequence() {
        let seed = vec![event(40, "turn/user"), event(41, "turn/assistant")];
        let mut log = SessionLog::create(sid(), seed);
        assert_eq!(log.seed_length(), 2);
        assert_eq!(log.events()[0].seq, 1);
        assert_eq!(log.events()[1].seq, 2);
        assert_eq!(log.events()[1].kind, "turn/assistant");
        let appended = log.append("turn/user", json!({"text": "hi"}), 99).clone();
        assert_eq!(appended.seq, 3);
        assert_eq!(appended.at_ms, 99);
        assert_eq!(log.last_seq(), 3);
        assert_eq!(log.events_after_seed(), &[appended][..]);
    }

    #[test]
    fn l1_empty_log_has_no_seed() {
        let mut log = SessionLog::create(sid(), vec![]);
        assert!(log.is_empty());
        assert_eq!(log.seed_length(), 0);
        assert_eq!(log.last_seq(), 0);
        assert_eq!(log.append("turn/user", json!(null), 1).seq, 1);
        assert_eq!(log.events_after_seed().len(), 1);
    }

    #[test]
    fn l3_from_events_accepts_a_contiguous_log() {
        let events = vec![event(1, "a"), event(2, "b"), event(3, "c")];
        let log = SessionLog::from_events(sid(), events.clone(), 2).unwrap();
        assert_eq!(log.events(), &events[..]);
        assert_eq!(log.events_after_seed(), &events[2..]);
        let full_seed = SessionLog::from_events(sid(), events.clone(), 3).unwrap();
        assert!(full_seed.events_after_seed().is_empty());
        assert_eq!(full_seed.into_events(), events);
    }

    #[test]
    fn l3_from_events_refuses_gaps_and_seed_past_the_end() {
        let cases = [
            (vec![event(2, "a")], 0, "sequence numbers must run from 1"),
            (
                vec![event(1, "a"), event(3, "b")],
                0,
                "event 2 has sequence number 3",
            ),
            (
                vec![event(1, "a"), event(1, "b")],
                0,
                "event 2 has sequence number 1",
            ),
            (vec![event(1, "a")], 2, "seed length 2 is past the end"),
            (vec![], u64::MAX, "past the end"),
        ];
        for (events, seed, expect) in cases {
            let err = SessionLog::from_events(sid(), events, seed).unwrap_err();
            assert!(matches!(err, CoreError::InvalidLog { .. }));
            let msg = err.to_string();
            assert!(msg.contains(expect), "{msg}");
            assert!(msg.contains(sid().as_str()), "{msg}");
            assert!(!msg.contains('\n'), "{msg}");
        }
    }

    #[test]
    fn p1_descriptor_event_ignores_a_descriptor_inherited_in_the_seed() {
        let seed = vec![event(1, DESCRIPTOR_EVENT), event(2, "turn/user")];
        let mut log = SessionLog::create(sid(), seed);
        assert!(log.descriptor_event().is_none());
        log.append(DESCRIPTOR_EVENT, json!({"provider": "p"}), 5);
        assert_eq!(log.descriptor_event().map(|e| e.seq), Some(3));
    }

    #[test]
    fn l1_session_event_json_uses_snake_case_fields() {
        let text = serde_json::to_string(&event(1, "turn/user")).unwrap();
        assert_eq!(text, r#"{"seq":1,"kind":"turn/user","data":{},"at_ms":10}"#);
    }
}
