//! [`UserConn`]: an async-nats connection as one NATS user that records every error the
//! server sends it, and asserts on permission violations (Z2).

use std::time::Duration;

use crate::shipped::{SHIPPED_CLUSTER, USERS};
use crate::wait::poll_async;

/// An async-nats connection as one user that records every error the server sends it
/// (`-ERR 'Permissions Violation ...'` arrives as `Event::ServerError`).
pub struct UserConn {
    /// The user's name.
    pub user: String,
    /// The cluster its permissions are for (`dev`, or `<c>` for a user named `<c>-<user>`).
    pub cluster: String,
    /// The connection.
    pub client: async_nats::Client,
    errors: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl UserConn {
    /// Connects as `user` with `password` (or with no credentials when `None`).
    pub async fn connect(
        url: &str,
        user: &str,
        password: Option<&str>,
    ) -> Result<UserConn, async_nats::ConnectError> {
        Self::connect_with(url, user, password, async_nats::ConnectOptions::new()).await
    }

    /// [`UserConn::connect`] with extra options (TLS).
    pub async fn connect_with(
        url: &str,
        user: &str,
        password: Option<&str>,
        options: async_nats::ConnectOptions,
    ) -> Result<UserConn, async_nats::ConnectError> {
        let errors = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = errors.clone();
        let mut options = options
            .name(format!("z2-test-{user}"))
            .connection_timeout(Duration::from_secs(5))
            .event_callback(move |event| {
                let sink = sink.clone();
                async move {
                    if let async_nats::Event::ServerError(e) = event {
                        sink.lock().unwrap().push(e.to_string());
                    }
                }
            });
        if let Some(pw) = password {
            options = options.user_and_password(user.to_owned(), pw.to_owned());
        }
        let client = tokio::time::timeout(Duration::from_secs(8), options.connect(url))
            .await
            .unwrap_or_else(|_| panic!("connecting as {user} hung"))?;
        let cluster = match user.split_once('-') {
            Some((c, rest)) if USERS.iter().any(|(u, _)| *u == rest) => c,
            _ => SHIPPED_CLUSTER,
        };
        Ok(UserConn {
            user: user.to_owned(),
            cluster: cluster.to_owned(),
            client,
            errors,
        })
    }

    /// A round trip through the server on this connection: everything sent before (SUB, PUB)
    /// has been processed when it returns. (`flush` only writes the socket.) A request that
    /// nobody serves on a subject every role may publish (`lineage.<c>.node.*.status` for
    /// operators and observers, `node.*.*` for nodes) comes back as "no responders".
    pub async fn sync(&self) {
        let subject = format!("lineage.{}.node.sync-probe.status", self.cluster);
        match self.client.request(subject.clone(), "".into()).await {
            Err(e) if e.kind() == async_nats::client::RequestErrorKind::NoResponders => {}
            other => panic!("{}: sync request on {subject}: {other:?}", self.user),
        }
    }

    /// Server errors received so far.
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().unwrap().clone()
    }

    /// Waits (up to 3 s) for a permissions-violation error naming `subject`.
    pub async fn violation(&self, subject: &str, kind: &str) -> Option<String> {
        let needle =
            format!("permissions violation for {kind} to \"{subject}\"").to_ascii_lowercase();
        let needle = &needle;
        poll_async(Duration::from_secs(3), || async move {
            self.errors()
                .into_iter()
                .find(|e| e.to_ascii_lowercase().contains(needle))
        })
        .await
        .ok()
    }

    /// Asserts that publishing to `subject` is refused by the server.
    pub async fn assert_publish_refused(&self, subject: &str) {
        self.client
            .publish(subject.to_owned(), "{}".into())
            .await
            .expect("publish");
        self.sync().await;
        assert!(
            self.violation(subject, "publish").await.is_some(),
            "{} could publish to {subject}: no permissions violation; errors: {:?}",
            self.user,
            self.errors()
        );
    }

    /// Asserts that subscribing to `subject` is refused by the server.
    pub async fn assert_subscribe_refused(&self, subject: &str) {
        let _sub = self
            .client
            .subscribe(subject.to_owned())
            .await
            .expect("subscribe");
        self.sync().await;
        assert!(
            self.violation(subject, "subscription").await.is_some(),
            "{} could subscribe to {subject}: no permissions violation; errors: {:?}",
            self.user,
            self.errors()
        );
    }

    /// Asserts that nothing was refused so far.
    pub fn assert_no_errors(&self) {
        assert!(
            self.errors().is_empty(),
            "{} got server errors: {:?}",
            self.user,
            self.errors()
        );
    }
}
