//! Log compaction (issue 35): the whole log written again as one message, then the messages
//! before it purged.
//!
//! A continuable session makes each event durable on its own, so a 100-event turn is about
//! 100 messages; a cold resume elsewhere reads them one `next_by_subj` at a time, and the
//! server looks for each among every other session's messages written at the same time. The
//! turn's end writes the whole log as one message instead of its last events
//! ([`EventLogStore::compact`], fenced like any append), and afterwards purges the subject
//! below it ([`EventLogStore::drop_superseded`]). When the host compacts is
//! [`lineage_core::log::compaction_due`]'s rule.
//!
//! Safe at every step: until the purge, a reader meets the events twice and keeps each once
//! (`take_new_events`); the purge only removes messages a later one restates, so it is safe
//! whoever appended since; a build from before compaction reads a compacted log as it reads a
//! batch, and refuses the window before the purge ("sequence numbers must run from 1 without
//! gaps") rather than misread it.

use bytes::Bytes;
use lineage_core::ids::SessionId;
use lineage_core::log::SessionEvent;

use super::{envelope, EncodedAppend, EventLogStore, LogCursor};
use crate::error::BusError;

/// The largest compaction message, in bytes: a log larger than this stays in its messages.
/// Well under NATS' default `max_payload` (1 MiB); a server configured lower lowers it.
pub const COMPACTION_MAX_BYTES: usize = 512 * 1024;

/// Room left in a message for its headers.
const HEADER_ROOM: usize = 4096;

/// Encodes the whole log as one message, or `None` when it is empty or larger than `max`
/// bytes. Its message id, `<session>-<first>-<last>-all`, is not one an append makes. Shared
/// by the NATS store and its in-memory twin.
pub(crate) fn encode_compaction(
    session: &SessionId,
    events: &[SessionEvent],
    max: usize,
) -> Result<Option<EncodedAppend>, BusError> {
    let (first, last) = match (events.first(), events.last()) {
        (Some(first), Some(last)) => (first.seq, last.seq),
        _ => return Ok(None),
    };
    let payload = envelope(events)?;
    if payload.len() > max {
        return Ok(None);
    }
    Ok(Some(EncodedAppend {
        msg_id: format!("{session}-{first}-{last}-all"),
        payload: Bytes::from(payload),
        last_event_seq: last,
    }))
}

impl EventLogStore {
    /// Writes `events` (the whole log) as one message after `expected`, refused with
    /// [`BusError::LogConflict`] when the log moved past it; `Ok(None)` when the message would
    /// be larger than [`COMPACTION_MAX_BYTES`] or the server's `max_payload` (nothing written).
    pub async fn compact(
        &self,
        session: &SessionId,
        events: &[SessionEvent],
        expected: LogCursor,
    ) -> Result<Option<LogCursor>, BusError> {
        let server_max = self.client.server_info().max_payload;
        let max = COMPACTION_MAX_BYTES.min(server_max.saturating_sub(HEADER_ROOM));
        match encode_compaction(session, events, max)? {
            Some(append) => self
                .append_encoded(session, append, Some(expected))
                .await
                .map(Some),
            None => Ok(None),
        }
    }

    /// Purges `session`'s messages below the compaction at `compaction` (they are restated by
    /// it). A purge by sequence: what was appended after the compaction stays.
    pub async fn drop_superseded(
        &self,
        session: &SessionId,
        compaction: LogCursor,
    ) -> Result<(), BusError> {
        const WHAT: &str = "purge a session log's messages before its compaction";
        let stream = self
            .js
            .get_stream_no_info(self.subjects.events_stream())
            .await
            .map_err(|e| BusError::js(WHAT, e))?;
        stream
            .purge()
            .filter(self.subjects.session_events(session))
            .sequence(compaction.last_stream_seq)
            .await
            .map(|_| ())
            .map_err(|e| BusError::js(WHAT, e))
    }
}
