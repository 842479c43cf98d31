//! The session event log on JetStream (L3, P1, K1): readable from any node for cold resume.
//!
//! One stream per cluster captures `lineage.<cluster>.session.*.events`; each session's log is
//! its subject. Appends carry `Nats-Expected-Last-Subject-Sequence`, so two nodes that both
//! believe they own a session cannot interleave writes: the loser gets [`BusError::LogConflict`].
//!
//! One message holds the events appended together ([`EventLogStore::append_all`]), in order,
//! in one versioned envelope (N3): `{"v":1,"events":[{...}, ...]}`. A batch is stored,
//! deduplicated and fenced as one message, so it is all in the log or none of it, for one round
//! trip. [`decode_log_message`] reads the envelope and the two older forms that logs written
//! before it hold (one event as a bare JSON object, a batch as a bare JSON array), and refuses
//! an envelope of a later version with a line saying to upgrade.
//!
//! Compaction ([`EventLogStore::compact`], `events/compaction.rs`): a log spread over many
//! messages (a continuable session flushes each event on its own) is written again as one
//! message at a turn's end, and the messages before it are then purged; a cold resume reads
//! one message instead of a hundred. A later message may therefore restate events a reader
//! already has (until the purge); every read keeps the first copy of each event seq.

use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_nats::jetstream::{self, stream};
use async_nats::HeaderMap;
use lineage_core::ids::SessionId;
use lineage_core::log::SessionEvent;

use crate::error::BusError;
use crate::streams::{open_stream, outcome_unknown, retry_pause, StreamOptions};
use crate::subjects::Subjects;

pub(crate) mod compaction;

pub use compaction::COMPACTION_MAX_BYTES;

/// Appends to and reads session logs on JetStream: the NATS implementation of
/// [`crate::ports::EventLog`].
#[derive(Clone)]
pub struct EventLogStore {
    client: async_nats::Client,
    js: jetstream::Context,
    subjects: Subjects,
}

/// Log messages asked for per direct-get batch when reading a log.
pub use crate::direct::READ_BATCH;

/// Where a session's log stands on the stream: the stream sequence of its last message and
/// the seq of its last event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogCursor {
    /// Stream sequence of the session's last message (0 when the log is empty).
    pub last_stream_seq: u64,
    /// Seq of the session's last event (0 when the log is empty): a read after this cursor
    /// skips the events up to it that a compaction restates.
    pub last_event_seq: u64,
}

/// A whole log as read: its events, the cursor after them, and how many messages held them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LogRead {
    /// Every event, in order, each once.
    pub events: Vec<SessionEvent>,
    /// The cursor to append after them.
    pub cursor: LogCursor,
    /// How many messages the log is stored in (what [`lineage_core::log::compaction_due`]
    /// weighs).
    pub messages: u64,
}

impl EventLogStore {
    /// Binds to the events stream of a cluster with one replica ([`StreamOptions::default`]);
    /// see [`EventLogStore::open_with`].
    pub async fn open(client: async_nats::Client, subjects: Subjects) -> Result<Self, BusError> {
        Self::open_with(client, subjects, StreamOptions::default()).await
    }

    /// A reader of the events stream, neither creating nor checking it (a client that only
    /// reads logs, by direct gets: `lineage acp` loading a session).
    pub fn reader(client: async_nats::Client, subjects: Subjects) -> Self {
        let js = jetstream::new(client.clone());
        EventLogStore {
            client,
            js,
            subjects,
        }
    }

    /// Binds to the events stream of a cluster, creating it (with `options.replicas` replicas)
    /// if it does not exist; an existing one with fewer replicas is updated or refused as
    /// `options.update` says (see [`crate::streams`]). The stream allows direct gets (one round
    /// trip per [`READ_BATCH`] messages when a log is read); an existing stream created without
    /// them is updated to allow them.
    pub async fn open_with(
        client: async_nats::Client,
        subjects: Subjects,
        options: StreamOptions,
    ) -> Result<Self, BusError> {
        let js = jetstream::new(client.clone());
        let config = stream::Config {
            name: subjects.events_stream(),
            subjects: vec![subjects.all_session_events()],
            storage: stream::StorageType::File,
            description: Some("lineage session event logs, one subject per session".into()),
            allow_direct: true,
            ..Default::default()
        };
        let (_, existing) =
            open_stream(&js, config, options, "create the session events stream").await?;
        if !existing.allow_direct {
            js.update_stream(stream::Config {
                allow_direct: true,
                ..existing
            })
            .await
            .map_err(|e| BusError::js("allow direct gets on the session events stream", e))?;
        }
        Ok(EventLogStore {
            client,
            js,
            subjects,
        })
    }

    /// Appends one event; with `expected`, refuses if the log moved past that cursor.
    pub async fn append(
        &self,
        session: &SessionId,
        event: &SessionEvent,
        expected: Option<LogCursor>,
    ) -> Result<LogCursor, BusError> {
        self.append_all(session, std::slice::from_ref(event), expected)
            .await
    }

    /// Appends `events` (in order) as one message: all of them or none, one round trip. With
    /// `expected`, refuses if the log moved past that cursor. The message id (deduplication of
    /// a retried append) is `<session>-<first seq>` for one event, `<session>-<first>-<last>`
    /// for a batch. Appending nothing returns `expected` (or the empty cursor) untouched. A
    /// publish whose outcome is unknown (ack lost, the stream's leader being replaced, a
    /// reconnect) is sent again, the same message, for up to
    /// [`crate::streams::UNKNOWN_OUTCOME_RETRY_FOR`]: it is appended once either way.
    pub async fn append_all(
        &self,
        session: &SessionId,
        events: &[SessionEvent],
        expected: Option<LogCursor>,
    ) -> Result<LogCursor, BusError> {
        let Some(append) = encode_append(session, events)? else {
            return Ok(expected.unwrap_or_default());
        };
        self.append_encoded(session, append, expected).await
    }

    /// Stores one encoded message on `session`'s log, fenced by `expected`, sending it again
    /// while its outcome is unknown: [`EventLogStore::append_all`] and the compaction.
    async fn append_encoded(
        &self,
        session: &SessionId,
        append: EncodedAppend,
        expected: Option<LogCursor>,
    ) -> Result<LogCursor, BusError> {
        let EncodedAppend {
            msg_id,
            payload,
            last_event_seq,
        } = append;
        let mut headers = HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, msg_id.as_str());
        if let Some(cursor) = expected {
            headers.insert(
                async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
                cursor.last_stream_seq.to_string().as_str(),
            );
        }
        // An unknown outcome (ack lost, stream leader being replaced, reconnecting) is resolved
        // by sending the same message again: it lands once, or it had landed and the expected
        // sequence check plus `landed` recognise it.
        let started = std::time::Instant::now();
        let mut attempt = 0u32;
        loop {
            let outcome = match self
                .js
                .publish_with_headers(
                    self.subjects.session_events(session),
                    headers.clone(),
                    payload.clone(),
                )
                .await
            {
                Ok(ack) => ack.await,
                Err(e) => Err(e),
            };
            let e = match outcome {
                Ok(ack) => {
                    return Ok(LogCursor {
                        last_stream_seq: ack.sequence,
                        last_event_seq,
                    })
                }
                Err(e) => e,
            };
            if e.kind() == PublishErrorKind::WrongLastSequence {
                // The server checks the expected sequence before deduplication: a retry of an
                // append that landed (its ack lost) looks like a conflict. It is ours when the
                // log's last message carries this append's message id and bytes (the id alone
                // is not enough: a fenced writer appending at the same seq has the same id).
                match self.landed(session, &msg_id, &payload).await {
                    Ok(Some(seq)) => {
                        return Ok(LogCursor {
                            last_stream_seq: seq,
                            last_event_seq,
                        })
                    }
                    Ok(None) => {
                        return Err(BusError::LogConflict {
                            session: session.to_string(),
                            expected: expected.map(|c| c.last_stream_seq).unwrap_or(0),
                        })
                    }
                    // Cannot tell yet (the stream has no leader): ask again below.
                    Err(reason) => match retry_pause(started, attempt) {
                        Some(pause) => {
                            tracing::debug!(%session, %reason, attempt, "cannot check whether a log append landed; asking again");
                            attempt += 1;
                            tokio::time::sleep(pause).await;
                            continue;
                        }
                        None => {
                            return Err(BusError::js(
                                "check whether a session log append landed",
                                reason,
                            ))
                        }
                    },
                }
            }
            match retry_pause(started, attempt).filter(|_| outcome_unknown(&e)) {
                Some(pause) => {
                    tracing::warn!(%session, error = %e, attempt, "session log append outcome unknown; sending it again");
                    attempt += 1;
                    tokio::time::sleep(pause).await;
                }
                None => return Err(BusError::js("acknowledge a session log append", e)),
            }
        }
    }

    /// The stream sequence of `session`'s last log message when it is this append: message id
    /// `msg_id` and these bytes (`Ok(None)`: the last message is another one, or there is
    /// none). `Err` when the stream cannot answer now.
    async fn landed(
        &self,
        session: &SessionId,
        msg_id: &str,
        payload: &[u8],
    ) -> Result<Option<u64>, String> {
        let stream = self
            .js
            .get_stream(self.subjects.events_stream())
            .await
            .map_err(|e| e.to_string())?;
        let last = match stream
            .get_last_raw_message_by_subject(&self.subjects.session_events(session))
            .await
        {
            Ok(last) => last,
            Err(e) if matches!(e.kind(), LastRawMessageErrorKind::NoMessageFound) => {
                return Ok(None)
            }
            Err(e) => return Err(e.to_string()),
        };
        let ours = last
            .headers
            .get(async_nats::header::NATS_MESSAGE_ID)
            .is_some_and(|id| id.as_str() == msg_id)
            && last.payload.as_ref() == payload;
        Ok(ours.then_some(last.sequence))
    }

    /// Reads a session's whole log, in order, with the cursor to append after it: batched
    /// direct gets (`$JS.API.DIRECT.GET.<stream>` with `next_by_subj`), [`READ_BATCH`]
    /// messages per round trip, each batch ended by the server's `204 EOB` status.
    pub async fn read(
        &self,
        session: &SessionId,
    ) -> Result<(Vec<SessionEvent>, LogCursor), BusError> {
        self.read_after(session, LogCursor::default()).await
    }

    /// [`EventLogStore::read`], with how many messages held the log.
    pub async fn read_log(&self, session: &SessionId) -> Result<LogRead, BusError> {
        self.read_messages_after(session, LogCursor::default())
            .await
    }

    /// [`EventLogStore::read`] of what was appended after `cursor` (a cursor a read returned):
    /// the new events and the cursor to read after them next (`cursor` itself when nothing is
    /// new). Events up to `cursor.last_event_seq` that a compaction restates are skipped. How
    /// `lineage logs -f` follows a log.
    pub async fn read_after(
        &self,
        session: &SessionId,
        after: LogCursor,
    ) -> Result<(Vec<SessionEvent>, LogCursor), BusError> {
        let read = self.read_messages_after(session, after).await?;
        Ok((read.events, read.cursor))
    }

    /// The messages after `after`, decoded, each event once.
    async fn read_messages_after(
        &self,
        session: &SessionId,
        after: LogCursor,
    ) -> Result<LogRead, BusError> {
        let subject = self.subjects.session_events(session);
        let mut read = LogRead {
            cursor: after,
            ..LogRead::default()
        };
        crate::direct::read_subject(
            &self.client,
            &self.subjects.events_stream(),
            &subject,
            after.last_stream_seq,
            "read a session log",
            |seq, payload| {
                read.cursor.last_stream_seq = seq;
                read.messages += 1;
                take_new_events(&mut read, decode_log_message(payload)?);
                Ok(())
            },
        )
        .await?;
        Ok(read)
    }
}

/// Adds to `read` the events it does not have yet (a compaction restates the ones before it),
/// moving its cursor's event seq on.
pub(crate) fn take_new_events(read: &mut LogRead, events: Vec<SessionEvent>) {
    for event in events {
        if event.seq > read.cursor.last_event_seq {
            read.cursor.last_event_seq = event.seq;
            read.events.push(event);
        }
    }
}

/// One append as it is stored: its message id and its bytes.
pub(crate) struct EncodedAppend {
    /// `<session>-<first seq>` for one event, `<session>-<first>-<last>` for a batch.
    pub(crate) msg_id: String,
    /// The envelope `{"v":1,"events":[...]}` of the events, in order.
    pub(crate) payload: bytes::Bytes,
    /// The seq of its last event.
    pub(crate) last_event_seq: u64,
}

/// The version of the log message envelope this build writes and the latest it reads.
pub const LOG_ENVELOPE_VERSION: u64 = 1;

/// A log message as this build writes it.
#[derive(serde::Serialize)]
struct EnvelopeOut<'a> {
    v: u64,
    events: &'a [SessionEvent],
}

/// A log message as stored: the envelope, or one of the two forms written before it.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum StoredMessage {
    /// `{"v":N,"events":[...]}`.
    Envelope { v: u64, events: Vec<SessionEvent> },
    /// Before the envelope: a batch as a bare array.
    Batch(Vec<SessionEvent>),
    /// Before the envelope: one event as a bare object.
    One(SessionEvent),
}

/// The bytes of the envelope `{"v":1,"events":[...]}` of `events`.
pub(crate) fn envelope(events: &[SessionEvent]) -> Result<Vec<u8>, BusError> {
    serde_json::to_vec(&EnvelopeOut {
        v: LOG_ENVELOPE_VERSION,
        events,
    })
    .map_err(|e| BusError::Json {
        what: "session event",
        reason: e.to_string(),
    })
}

/// Encodes `events` as one log message (`None`: there is nothing to append). Shared by the
/// NATS store and its in-memory twin, so both store (and recognise) the same bytes.
pub(crate) fn encode_append(
    session: &SessionId,
    events: &[SessionEvent],
) -> Result<Option<EncodedAppend>, BusError> {
    let (first, last) = match (events.first(), events.last()) {
        (Some(first), Some(last)) => (first.seq, last.seq),
        _ => return Ok(None),
    };
    let payload = bytes::Bytes::from(envelope(events)?);
    let msg_id = if events.len() == 1 {
        format!("{session}-{first}")
    } else {
        format!("{session}-{first}-{last}")
    };
    Ok(Some(EncodedAppend {
        msg_id,
        payload,
        last_event_seq: last,
    }))
}

impl crate::ports::EventLog for EventLogStore {
    fn append_all<'a>(
        &'a self,
        session: &'a SessionId,
        events: &'a [SessionEvent],
        expected: Option<LogCursor>,
    ) -> crate::ports::BoxFuture<'a, Result<LogCursor, BusError>> {
        Box::pin(EventLogStore::append_all(self, session, events, expected))
    }

    fn read_log<'a>(
        &'a self,
        session: &'a SessionId,
    ) -> crate::ports::BoxFuture<'a, Result<LogRead, BusError>> {
        Box::pin(EventLogStore::read_log(self, session))
    }

    fn compact<'a>(
        &'a self,
        session: &'a SessionId,
        events: &'a [SessionEvent],
        expected: LogCursor,
    ) -> crate::ports::BoxFuture<'a, Result<Option<LogCursor>, BusError>> {
        Box::pin(EventLogStore::compact(self, session, events, expected))
    }

    fn drop_superseded<'a>(
        &'a self,
        session: &'a SessionId,
        compaction: LogCursor,
    ) -> crate::ports::BoxFuture<'a, Result<(), BusError>> {
        Box::pin(EventLogStore::drop_superseded(self, session, compaction))
    }

    fn purge<'a>(
        &'a self,
        sessions: &'a [SessionId],
    ) -> crate::ports::BoxFuture<'a, Result<(), BusError>> {
        Box::pin(async move {
            let subjects = sessions
                .iter()
                .map(|s| self.subjects.session_events(s))
                .collect();
            crate::streams::purge_subjects(
                &self.js,
                &self.subjects.events_stream(),
                subjects,
                "purge session logs",
            )
            .await
        })
    }
}

/// The events of one log message, in order: the envelope `{"v":1,"events":[...]}` that
/// [`EventLogStore::append_all`] writes, or a form written before it (one event as a JSON
/// object, a batch as a JSON array). An envelope of a later version than
/// [`LOG_ENVELOPE_VERSION`] is refused (this build cannot know what it means).
pub fn decode_log_message(payload: &[u8]) -> Result<Vec<SessionEvent>, BusError> {
    let stored: StoredMessage = serde_json::from_slice(payload).map_err(|e| BusError::Json {
        what: "session event",
        reason: format!(
            "not a log message ({e}); expected {{\"v\":1,\"events\":[...]}} or an older event or array of events"
        ),
    })?;
    match stored {
        StoredMessage::Envelope { v, events } if v <= LOG_ENVELOPE_VERSION && v > 0 => Ok(events),
        StoredMessage::Envelope { v, .. } => Err(BusError::Json {
            what: "session event",
            reason: format!(
                "log message version {v} is not one this build reads (1..={LOG_ENVELOPE_VERSION}); upgrade lineage on this node"
            ),
        }),
        StoredMessage::Batch(events) => Ok(events),
        StoredMessage::One(event) => Ok(vec![event]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, kind: &str) -> SessionEvent {
        SessionEvent {
            seq,
            kind: kind.to_owned(),
            data: serde_json::json!({"n": seq}),
            at_ms: 7,
        }
    }

    #[test]
    fn n3_an_append_is_one_versioned_envelope_and_reads_back_in_order() {
        let session = SessionId::parse("0192f0c1-0000-7000-8000-000000000001").unwrap();
        let one = encode_append(&session, &[event(1, "a")]).unwrap().unwrap();
        assert_eq!(
            std::str::from_utf8(&one.payload).unwrap(),
            r#"{"v":1,"events":[{"seq":1,"kind":"a","data":{"n":1},"at_ms":7}]}"#
        );
        assert_eq!(one.msg_id, format!("{session}-1"));
        assert_eq!(
            decode_log_message(&one.payload).unwrap(),
            vec![event(1, "a")]
        );
        let batch = encode_append(&session, &[event(2, "b"), event(3, "c")])
            .unwrap()
            .unwrap();
        assert!(batch.payload.starts_with(br#"{"v":1,"events":[{"seq":2"#));
        assert_eq!(batch.msg_id, format!("{session}-2-3"));
        assert_eq!(
            decode_log_message(&batch.payload).unwrap(),
            vec![event(2, "b"), event(3, "c")]
        );
        assert!(encode_append(&session, &[]).unwrap().is_none());
    }

    #[test]
    fn n3_a_later_envelope_version_is_refused_with_what_to_do() {
        let later = br#"{"v":2,"events":[]}"#;
        match decode_log_message(later) {
            Err(BusError::Json { reason, .. }) => {
                assert!(reason.contains("version 2"), "{reason}");
                assert!(reason.contains("upgrade lineage"), "{reason}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert!(decode_log_message(br#"{"v":0,"events":[]}"#).is_err());
    }

    #[test]
    fn decode_reads_the_older_forms_one_event_and_a_batch_in_order() {
        let one = serde_json::to_vec(&event(1, "a")).unwrap();
        assert_eq!(decode_log_message(&one).unwrap(), vec![event(1, "a")]);
        let batch = serde_json::to_vec(&vec![event(2, "b"), event(3, "c")]).unwrap();
        assert_eq!(
            decode_log_message(&batch).unwrap(),
            vec![event(2, "b"), event(3, "c")]
        );
    }

    #[test]
    fn decode_refuses_what_is_not_an_event() {
        for bad in [
            &b"{}"[..],
            b"[1]",
            b"",
            b"nope",
            br#"{"v":1}"#,
            br#"{"v":"1","events":[]}"#,
        ] {
            assert!(matches!(
                decode_log_message(bad),
                Err(BusError::Json { .. })
            ));
        }
    }
}
