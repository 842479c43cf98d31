//! Stream options (Z3): how many replicas the events and inbox streams have, and what opening
//! them does when an existing stream has a different count.
//!
//! Both streams are created with [`StreamOptions::replicas`] replicas (1: one nats-server; 3: a
//! JetStream cluster of 3 or more servers, which keeps every acknowledged message on a quorum
//! of 2). An existing stream with fewer replicas is updated when [`StreamOptions::update`] is
//! set and refused otherwise (one line naming the stream, both counts and the fix); one with
//! more is kept as it is.

use std::time::{Duration, Instant};

use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::{self, stream};

use crate::error::BusError;

/// How long a JetStream publish whose outcome is unknown (the ack timed out, no stream leader
/// answered, the connection dropped) is sent again, the same message with the same
/// `Nats-Msg-Id`, before the error is returned: a server of a replicated stream that dies
/// takes a few seconds to be replaced as stream leader (about 5 s on loopback), and a client
/// a moment to reconnect. The message id (and, for a log append, the expected last sequence)
/// makes a copy that already landed a no-op.
pub const UNKNOWN_OUTCOME_RETRY_FOR: Duration = Duration::from_secs(15);

/// True when a publish failed without saying whether the message was stored, so sending the
/// same message again is the way to find out: the ack timed out, nobody answered for the
/// stream (its leader is being replaced), the connection dropped, or the server said
/// JetStream is temporarily unavailable.
pub(crate) fn outcome_unknown(e: &PublishError) -> bool {
    match e.kind() {
        PublishErrorKind::TimedOut
        | PublishErrorKind::StreamNotFound
        | PublishErrorKind::BrokenPipe => true,
        PublishErrorKind::Other => e.to_string().contains("unavailable"),
        PublishErrorKind::WrongLastSequence | PublishErrorKind::WrongLastMessageId => false,
    }
}

/// How long opening a stream asks again when JetStream answers that it is not ready (a
/// timeout, "temporarily unavailable"): the cluster is still placing it.
const OPEN_RETRY_FOR: Duration = Duration::from_secs(30);

/// True when a stream create, info or update failed because JetStream was not ready, not
/// because the request was refused.
fn admin_transient(e: &jetstream::context::CreateStreamError) -> bool {
    use jetstream::context::CreateStreamErrorKind as K;
    match e.kind() {
        K::TimedOut | K::JetStreamUnavailable => true,
        K::JetStream(err) => err.code() == 503,
        _ => false,
    }
}

/// The retry schedule of [`UNKNOWN_OUTCOME_RETRY_FOR`]: `Some(pause)` before attempt
/// `attempt + 1` while the deadline (from `started`) allows one, else `None`.
pub(crate) fn retry_pause(started: Instant, attempt: u32) -> Option<Duration> {
    let pause = Duration::from_millis(50u64 << attempt.min(5)).min(Duration::from_secs(1));
    (started.elapsed() + pause < UNKNOWN_OUTCOME_RETRY_FOR).then_some(pause)
}

/// Replication of lineage's JetStream streams (the session events and the parent inboxes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamOptions {
    /// Replicas of each stream: 1 or 3 (anything else is refused).
    pub replicas: usize,
    /// An existing stream with fewer replicas than [`StreamOptions::replicas`]: update it
    /// (true) or refuse to open it (false).
    pub update: bool,
}

impl Default for StreamOptions {
    /// One replica, never update.
    fn default() -> Self {
        StreamOptions {
            replicas: 1,
            update: false,
        }
    }
}

impl StreamOptions {
    /// Refuses replica counts other than 1 and 3, naming `stream`.
    pub fn check(&self, stream: &str) -> Result<(), BusError> {
        match self.replicas {
            1 | 3 => Ok(()),
            n => Err(BusError::StreamReplicas {
                stream: stream.to_owned(),
                problem: format!(
                    "cannot have {n} replicas (nats.stream_replicas = {n}); use 1 (one nats-server) or 3 (a JetStream cluster of 3 or more servers)"
                ),
            }),
        }
    }
}

/// Binds to the stream `config` names, creating it with `options.replicas` replicas when it
/// does not exist, and reconciles the replicas of one that does (see the module docs). Returns
/// the stream and its config as it stands afterwards. `what` names the stream in errors
/// (`the session events stream`).
pub(crate) async fn open_stream(
    js: &jetstream::Context,
    mut config: stream::Config,
    options: StreamOptions,
    what: &'static str,
) -> Result<(stream::Stream, stream::Config), BusError> {
    config.max_consumers = MAX_CONSUMERS;
    let (stream, existing) = open_replicated(js, config, options, what).await?;
    Ok((stream, allow_consumers(js, existing).await))
}

/// How many consumers each of lineage's streams allows. The inbox stream holds one durable
/// consumer per parent with children until its drain or purge, so its consumers number the
/// live parents of the whole cluster. nats-server 2.15 gives a stream that sets no limit of
/// its own a default of 1,000 (and takes -1 or 0 as "the default"): a cluster past 1,000
/// parents could not open another parent's inbox, whose children's notices then waited
/// unread (found by `lineage chaos`, issue 12). The limit is set when a stream is created,
/// and raised on an existing one when a node opens it.
pub const MAX_CONSUMERS: i32 = 1_000_000;

/// Raises `existing`'s consumer limit to [`MAX_CONSUMERS`] when it is lower (or the server's
/// default). A node whose NATS user may not update streams (a worker) logs what to run and
/// goes on: the voters, which may, raise it when they open the stream.
async fn allow_consumers(js: &jetstream::Context, existing: stream::Config) -> stream::Config {
    if existing.max_consumers >= MAX_CONSUMERS {
        return existing;
    }
    let name = existing.name.clone();
    let from = existing.max_consumers;
    let update = stream::Config {
        max_consumers: MAX_CONSUMERS,
        ..existing.clone()
    };
    match js.update_stream(&update).await {
        Ok(info) => {
            tracing::info!(stream = %name, from, to = MAX_CONSUMERS, "raised the stream's consumer limit");
            info.config
        }
        Err(e) => {
            tracing::warn!(
                stream = %name,
                error = %e,
                "cannot raise the stream's consumer limit (nats-server's default is 1,000); run `nats stream edit {name} --max-consumers {MAX_CONSUMERS}`"
            );
            existing
        }
    }
}

/// [`open_stream`] without the consumer limit: creation and the replica reconciliation.
async fn open_replicated(
    js: &jetstream::Context,
    mut config: stream::Config,
    options: StreamOptions,
    what: &'static str,
) -> Result<(stream::Stream, stream::Config), BusError> {
    let name = config.name.clone();
    options.check(&name)?;
    config.num_replicas = options.replicas;
    // Nodes start together: a replicated stream's creation (or a create raced by another
    // node's) can time out or meet "temporarily unavailable" while the JetStream cluster
    // places it; asked again, it is there or made.
    let started = Instant::now();
    let mut attempt = 0u32;
    let created = loop {
        match js.get_or_create_stream(config.clone()).await {
            Err(e) if admin_transient(&e) && started.elapsed() < OPEN_RETRY_FOR => {
                attempt += 1;
                tracing::info!(stream = %name, error = %e, attempt, "stream not ready yet; asking again");
                tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt.min(5)))).await;
            }
            other => break other,
        }
    };
    let mut stream = created.map_err(|e| {
        if options.replicas > 1 {
            BusError::StreamReplicas {
                stream: name.clone(),
                problem: format!(
                    "cannot be created with {} replicas: {e}; that needs a JetStream cluster of 3 or more servers (or set nats.stream_replicas = 1)",
                    options.replicas
                ),
            }
        } else {
            BusError::js(what, e)
        }
    })?;
    let existing = stream.cached_info().config.clone();
    let found = existing.num_replicas.max(1);
    let wanted = options.replicas;
    if found > wanted {
        tracing::info!(
            stream = %name,
            replicas = found,
            configured = wanted,
            "the stream has more replicas than configured; keeping them"
        );
        return Ok((stream, existing));
    }
    if found == wanted {
        return Ok((stream, existing));
    }
    if !options.update {
        return Err(BusError::StreamReplicas {
            stream: name.clone(),
            problem: format!(
                "has {found} replica{s} but nats.stream_replicas = {wanted}; set nats.update_streams = true or `nats stream edit {name} --replicas {wanted}`",
                s = if found == 1 { "" } else { "s" }
            ),
        });
    }
    let update = stream::Config {
        num_replicas: wanted,
        ..existing
    };
    let started = Instant::now();
    let updated = loop {
        match js.update_stream(&update).await {
            Err(e) if admin_transient(&e) && started.elapsed() < OPEN_RETRY_FOR => {
                tracing::info!(stream = %name, error = %e, "stream update not answered yet; asking again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            other => break other,
        }
    };
    let info = updated.map_err(|e| BusError::StreamReplicas {
            stream: name.clone(),
            problem: format!(
                "cannot be updated from {found} to {wanted} replicas: {e}; that needs a JetStream cluster of {wanted} or more servers"
            ),
        })?;
    tracing::warn!(
        stream = %name,
        from = found,
        to = wanted,
        "updated the stream's replicas (nats.update_streams = true)"
    );
    // The handle's cached info is the pre-update one; read it again.
    let _ = stream.info().await;
    Ok((stream, info.config))
}

/// How many subject purges [`purge_subjects`] keeps in flight.
pub const PURGE_CONCURRENCY: usize = 16;

/// Q5: removes every message of each of `subjects` from `stream` (a subject with none is not
/// an error), up to [`PURGE_CONCURRENCY`] at a time. The first failure is returned after every
/// purge was tried; purging again is harmless.
pub(crate) async fn purge_subjects(
    js: &jetstream::Context,
    stream: &str,
    subjects: Vec<String>,
    what: &'static str,
) -> Result<(), BusError> {
    use futures::StreamExt;
    if subjects.is_empty() {
        return Ok(());
    }
    let stream = js
        .get_stream(stream)
        .await
        .map_err(|e| BusError::js(what, e))?;
    let stream = &stream;
    let results: Vec<Result<(), BusError>> = futures::stream::iter(subjects)
        .map(|subject| async move {
            stream
                .purge()
                .filter(subject)
                .await
                .map(|_| ())
                .map_err(|e| BusError::js(what, e))
        })
        .buffer_unordered(PURGE_CONCURRENCY)
        .collect()
        .await;
    results
        .into_iter()
        .find_map(Result::err)
        .map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_or_three_replicas_are_accepted() {
        for ok in [1, 3] {
            assert!(StreamOptions {
                replicas: ok,
                update: false
            }
            .check("S")
            .is_ok());
        }
        for bad in [0, 2, 4, 5] {
            let e = StreamOptions {
                replicas: bad,
                update: true,
            }
            .check("LINEAGE_DEV_EVENTS")
            .unwrap_err()
            .to_string();
            assert!(e.contains("LINEAGE_DEV_EVENTS"), "{e}");
            assert!(e.contains(&format!("nats.stream_replicas = {bad}")), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn default_is_one_replica_without_update() {
        assert_eq!(
            StreamOptions::default(),
            StreamOptions {
                replicas: 1,
                update: false
            }
        );
    }
}
