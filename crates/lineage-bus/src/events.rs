//! The session event log on JetStream (L3, P1, K1): readable from any node for cold resume.
//!
//! One stream per cluster captures `lineage.<cluster>.session.*.events`; each session's log is
//! its subject. Appends carry `Nats-Expected-Last-Subject-Sequence`, so two nodes that both
//! believe they own a session cannot interleave writes: the loser gets [`BusError::LogConflict`].

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use async_nats::HeaderMap;
use futures::StreamExt;
use lineage_core::ids::SessionId;
use lineage_core::log::SessionEvent;

use crate::error::BusError;
use crate::subjects::Subjects;

/// Appends to and reads session logs.
#[derive(Clone)]
pub struct EventLogStore {
    js: jetstream::Context,
    subjects: Subjects,
}

/// Where a session's log stands on the stream: the stream sequence of its last event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogCursor {
    /// Stream sequence of the session's last event (0 when the log is empty).
    pub last_stream_seq: u64,
}

impl EventLogStore {
    /// Binds to the events stream of a cluster, creating it if it does not exist.
    pub async fn open(client: async_nats::Client, subjects: Subjects) -> Result<Self, BusError> {
        let js = jetstream::new(client);
        js.get_or_create_stream(stream::Config {
            name: subjects.events_stream(),
            subjects: vec![subjects.all_session_events()],
            storage: stream::StorageType::File,
            description: Some("lineage session event logs, one subject per session".into()),
            ..Default::default()
        })
        .await
        .map_err(|e| BusError::js("create the session events stream", e))?;
        Ok(EventLogStore { js, subjects })
    }

    /// Appends one event; with `expected`, refuses if the log moved past that cursor.
    pub async fn append(
        &self,
        session: &SessionId,
        event: &SessionEvent,
        expected: Option<LogCursor>,
    ) -> Result<LogCursor, BusError> {
        let payload = serde_json::to_vec(event).map_err(|e| BusError::Json {
            what: "session event",
            reason: e.to_string(),
        })?;
        let mut headers = HeaderMap::new();
        headers.insert(
            async_nats::header::NATS_MESSAGE_ID,
            format!("{session}-{}", event.seq).as_str(),
        );
        if let Some(cursor) = expected {
            headers.insert(
                async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
                cursor.last_stream_seq.to_string().as_str(),
            );
        }
        let ack = self
            .js
            .publish_with_headers(
                self.subjects.session_events(session),
                headers,
                payload.into(),
            )
            .await
            .map_err(|e| BusError::js("append to a session log", e))?
            .await;
        match ack {
            Ok(ack) => Ok(LogCursor {
                last_stream_seq: ack.sequence,
            }),
            Err(e) if e.to_string().contains("wrong last sequence") => Err(BusError::LogConflict {
                session: session.to_string(),
                expected: expected.map(|c| c.last_stream_seq).unwrap_or(0),
            }),
            Err(e) => Err(BusError::js("acknowledge a session log append", e)),
        }
    }

    /// Reads a session's whole log, in order, with the cursor to append after it.
    pub async fn read(
        &self,
        session: &SessionId,
    ) -> Result<(Vec<SessionEvent>, LogCursor), BusError> {
        let stream = self
            .js
            .get_stream(self.subjects.events_stream())
            .await
            .map_err(|e| BusError::js("open the session events stream", e))?;
        let mut consumer = stream
            .create_consumer(consumer::pull::OrderedConfig {
                filter_subject: self.subjects.session_events(session),
                deliver_policy: consumer::DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .map_err(|e| BusError::js("read a session log", e))?;
        let pending = consumer
            .info()
            .await
            .map_err(|e| BusError::js("read a session log", e))?
            .num_pending;
        let mut events = Vec::new();
        let mut cursor = LogCursor::default();
        if pending == 0 {
            return Ok((events, cursor));
        }
        let mut messages = consumer
            .messages()
            .await
            .map_err(|e| BusError::js("read a session log", e))?;
        while (events.len() as u64) < pending {
            let next = tokio::time::timeout(Duration::from_secs(5), messages.next())
                .await
                .map_err(|_| BusError::Timeout {
                    op: "reading a session log",
                    millis: 5000,
                })?;
            let Some(msg) = next else { break };
            let msg = msg.map_err(|e| BusError::js("read a session log", e))?;
            let info = msg
                .info()
                .map_err(|e| BusError::js("read a session log", e))?;
            cursor.last_stream_seq = info.stream_sequence;
            let event: SessionEvent =
                serde_json::from_slice(&msg.payload).map_err(|e| BusError::Json {
                    what: "session event",
                    reason: e.to_string(),
                })?;
            events.push(event);
            if info.pending == 0 {
                break;
            }
        }
        Ok((events, cursor))
    }
}
