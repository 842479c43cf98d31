//! Stream options (Z3): how many replicas the events and inbox streams have, and what opening
//! them does when an existing stream has a different count.
//!
//! Both streams are created with [`StreamOptions::replicas`] replicas (1: one nats-server; 3: a
//! JetStream cluster of 3 or more servers, which keeps every acknowledged message on a quorum
//! of 2). An existing stream with fewer replicas is updated when [`StreamOptions::update`] is
//! set and refused otherwise (one line naming the stream, both counts and the fix); one with
//! more is kept as it is.

use async_nats::jetstream::{self, stream};

use crate::error::BusError;

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
    let name = config.name.clone();
    options.check(&name)?;
    config.num_replicas = options.replicas;
    let mut stream = js.get_or_create_stream(config).await.map_err(|e| {
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
    let info = js
        .update_stream(stream::Config {
            num_replicas: wanted,
            ..existing
        })
        .await
        .map_err(|e| BusError::StreamReplicas {
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
