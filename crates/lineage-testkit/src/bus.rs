//! [`Bus`]: the test's own NATS connection (its own tokio runtime, independent of the code
//! under test): a session's log read straight from JetStream ([`Cluster::log`],
//! [`Cluster::wait_log`]), raw control requests ([`Cluster::request`], [`Cluster::ctl`]), and
//! helpers over a log ([`of_kind`], [`accepted`], [`turns_consuming`], [`render_log`]).

use std::time::Duration;

use crate::cluster::TEST_ADMIN;
use crate::{wait_for, Cluster};

/// A test-side NATS connection (its own tokio runtime): reads session logs from JetStream,
/// sends raw control requests, subscribes to subjects. Independent of the code under test.
pub struct Bus {
    /// The runtime the connection runs on (`bus.rt.block_on(...)` in a sync test).
    pub rt: tokio::runtime::Runtime,
    /// The connection.
    pub client: async_nats::Client,
}

/// One event of a session log (`lineage.<cluster>.session.<id>.events`).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Event {
    /// Its sequence number in the session log.
    pub seq: u64,
    /// `turn/start`, `inbox/accepted`, ...
    pub kind: String,
    /// The event's body.
    pub data: serde_json::Value,
    /// When it was appended (ms since the epoch; 0 when absent).
    #[serde(default)]
    pub at_ms: u64,
}

/// The bus connection's own runtime: two workers.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("test runtime")
}

impl Bus {
    /// The test's own connection as `user` with `password`.
    pub fn connect_as(url: &str, user: &str, password: &str) -> Bus {
        let rt = runtime();
        let client = rt
            .block_on(
                async_nats::ConnectOptions::new()
                    .user_and_password(user.to_owned(), password.to_owned())
                    .connect(url),
            )
            .expect("test NATS connection");
        Bus { rt, client }
    }

    /// The test's own connection to any of `urls` (it fails over between them).
    pub fn connect(urls: &[String]) -> Bus {
        let rt = runtime();
        let addrs: Vec<async_nats::ServerAddr> = urls
            .iter()
            .map(|u| u.parse().expect("a NATS URL"))
            .collect();
        let client = rt
            .block_on(async_nats::connect(addrs))
            .expect("test NATS connection");
        Bus { rt, client }
    }
}

/// Creates the events and inbox streams of `cluster` with `replicas` replicas, as a node
/// configured with `nats.stream_replicas = replicas` would.
pub(crate) fn precreate_streams(urls: &[String], cluster: &str, replicas: usize) {
    let bus = Bus::connect(urls);
    let subjects = lineage_bus::Subjects::new(cluster).expect("cluster name");
    let options = lineage_bus::StreamOptions {
        replicas,
        update: false,
    };
    bus.rt.block_on(async {
        lineage_bus::events::EventLogStore::open_with(
            bus.client.clone(),
            subjects.clone(),
            options,
        )
        .await
        .expect("create the events stream");
        lineage_bus::inbox::ParentInbox::open_with(bus.client.clone(), subjects, options)
            .await
            .expect("create the inbox stream");
    });
}

impl Cluster {
    /// The test's own NATS connection (made on first use).
    pub fn bus(&self) -> &Bus {
        self.bus.get_or_init(|| match &self.secured {
            None => Bus::connect(&self.nats.url_list()),
            Some(s) => Bus::connect_as(&self.nats.url(), TEST_ADMIN, &s.admin_password),
        })
    }

    /// `LINEAGE_<CLUSTER>_EVENTS`.
    pub fn events_stream(&self) -> String {
        format!("LINEAGE_{}_EVENTS", self.cluster.to_ascii_uppercase())
    }

    /// `LINEAGE_<CLUSTER>_INBOX`.
    pub fn inbox_stream(&self) -> String {
        format!("LINEAGE_{}_INBOX", self.cluster.to_ascii_uppercase())
    }

    /// How many messages a stream holds now (its state, from `$JS.API.STREAM.INFO`).
    pub fn stream_messages(&self, stream: &str) -> u64 {
        let bus = self.bus();
        bus.rt.block_on(async {
            let js = async_nats::jetstream::new(bus.client.clone());
            let mut stream = js
                .get_stream(stream)
                .await
                .unwrap_or_else(|e| panic!("stream {stream}: {e}"));
            stream.info().await.expect("stream info").state.messages
        })
    }

    /// One line on a parent's durable inbox consumer (`inbox-<parent>`) as the server sees it
    /// (delivered and ack floor stream sequences, pending, waiting for an ack, redelivered, pull
    /// requests waiting) and how many messages the inbox stream holds for that parent: what
    /// tells a notice that was never delivered from one delivered and never acknowledged.
    pub fn inbox_consumer_state(&self, parent: &str) -> String {
        let bus = self.bus();
        let stream = self.inbox_stream();
        let subject = format!("lineage.{}.parent.{parent}.inbox", self.cluster);
        bus.rt.block_on(async {
            let js = async_nats::jetstream::new(bus.client.clone());
            let stream = match js.get_stream(&stream).await {
                Ok(s) => s,
                Err(e) => return format!("stream {stream}: {e}"),
            };
            let held = match stream
                .info_with_subjects(subject.clone())
                .await
            {
                Ok(mut subjects) => {
                    use futures::TryStreamExt;
                    let mut n = 0u64;
                    while let Ok(Some((_, count))) = subjects.try_next().await {
                        n += count as u64;
                    }
                    n
                }
                Err(_) => 0,
            };
            let consumer = format!("inbox-{parent}");
            match stream
                .get_consumer::<async_nats::jetstream::consumer::pull::Config>(&consumer)
                .await
            {
                Ok(mut c) => match c.info().await {
                    Ok(i) => format!(
                        "consumer {consumer}: delivered stream seq {}, ack floor {}, pending {}, ack pending {}, redelivered {}, waiting pulls {}; the stream holds {held} message(s) for it",
                        i.delivered.stream_sequence,
                        i.ack_floor.stream_sequence,
                        i.num_pending,
                        i.num_ack_pending,
                        i.num_redelivered,
                        i.num_waiting
                    ),
                    Err(e) => format!("consumer {consumer}: {e}"),
                },
                Err(e) => format!("consumer {consumer}: {e}; the stream holds {held} message(s) for it"),
            }
        })
    }

    /// Reads a session's whole event log straight from JetStream (ordered consumer).
    pub fn log(&self, session: &str) -> Vec<Event> {
        use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
        let bus = self.bus();
        let subject = format!("lineage.{}.session.{session}.events", self.cluster);
        let stream_name = self.events_stream();
        bus.rt.block_on(async {
            let js = async_nats::jetstream::new(bus.client.clone());
            let stream = js.get_stream(&stream_name).await.expect("events stream");
            // Read up to the subject's last message as it is now. Not a pending count: a
            // compaction's purge (issue 35) may remove messages the consumer counted before it
            // delivers them, but never the last one without a later one to take its place.
            let last = match stream.get_last_raw_message_by_subject(&subject).await {
                Ok(last) => last.sequence,
                Err(e)
                    if e.kind()
                        == async_nats::jetstream::stream::LastRawMessageErrorKind::NoMessageFound =>
                {
                    return Vec::new()
                }
                Err(e) => panic!("the last message of {subject}: {e}"),
            };
            let mut consumer = stream
                .create_consumer(OrderedConfig {
                    filter_subject: subject.clone(),
                    deliver_policy: DeliverPolicy::All,
                    ..Default::default()
                })
                .await
                .expect("ordered consumer");
            let name = consumer.info().await.expect("consumer info").name.clone();
            let events = read_log(consumer, last, &subject, session).await;
            // Not left for the server's inactivity timer: a run that reads thousands of logs
            // would hold as many consumers (nats-server refuses more past its limit).
            let _ = stream.delete_consumer(&name).await;
            events
        })
    }

    /// A raw NATS request (what `nats req` would send); the reply parsed as JSON.
    pub fn request(&self, subject: &str, body: &[u8]) -> serde_json::Value {
        let bus = self.bus();
        let reply = bus.rt.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(20),
                bus.client.request(subject.to_owned(), body.to_vec().into()),
            )
            .await
            .unwrap_or_else(|_| panic!("no reply on {subject} within 20 s"))
            .unwrap_or_else(|e| panic!("request on {subject} failed: {e}"))
        });
        serde_json::from_slice(&reply.payload).unwrap_or_else(|e| {
            panic!(
                "reply on {subject} is not JSON ({e}): {}",
                String::from_utf8_lossy(&reply.payload)
            )
        })
    }

    /// A raw request to the cluster-wide control op `lineage.<cluster>.ctl.<op>`.
    pub fn ctl(&self, op: &str, body: &[u8]) -> serde_json::Value {
        self.request(&format!("lineage.{}.ctl.{op}", self.cluster), body)
    }

    /// A raw request to one node's control op `lineage.<cluster>.node.<node>.<op>`.
    pub fn node_ctl(&self, node: &str, op: &str, body: &[u8]) -> serde_json::Value {
        self.request(&format!("lineage.{}.node.{node}.{op}", self.cluster), body)
    }

    /// Polls `session`'s log until `pred` holds; returns that log.
    pub fn wait_log(
        &self,
        session: &str,
        limit: Duration,
        what: &str,
        pred: impl Fn(&[Event]) -> bool,
    ) -> Vec<Event> {
        wait_for(
            limit,
            format_args!("{what} in the log of {session}"),
            || {
                let log = self.log(session);
                if pred(&log) {
                    Ok(log)
                } else {
                    Err(LogSeen(self, log))
                }
            },
        )
    }
}

/// A log that did not hold yet, and every node's log, for the timeout message of
/// [`Cluster::wait_log`].
struct LogSeen<'a>(&'a Cluster, Vec<Event>);

impl std::fmt::Display for LogSeen<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "log:\n{}\nnode logs:\n{}",
            render_log(&self.1),
            self.0.logs()
        )
    }
}

/// Reads `subject` (session `session`'s log) from an ordered consumer, up to stream sequence `last`.
async fn read_log(
    consumer: async_nats::jetstream::consumer::Consumer<
        async_nats::jetstream::consumer::pull::OrderedConfig,
    >,
    last: u64,
    subject: &str,
    session: &str,
) -> Vec<Event> {
    use futures::StreamExt;
    let mut events = Vec::new();
    let mut messages = consumer.messages().await.expect("messages");
    loop {
        let next = tokio::time::timeout(Duration::from_secs(5), messages.next())
            .await
            .unwrap_or_else(|_| panic!("reading {subject} timed out"));
        let Some(msg) = next else { break };
        let msg = msg.expect("log message");
        let at = msg.info().map(|i| i.stream_sequence).unwrap_or(u64::MAX);
        // The envelope `{"v":1,"events":[...]}`; logs written before it hold one
        // event (an object) or a batch appended together (an array).
        let value: serde_json::Value = serde_json::from_slice(&msg.payload)
            .unwrap_or_else(|e| panic!("log message of {session} is not JSON: {e}"));
        let batch = match value {
            serde_json::Value::Array(items) => items,
            serde_json::Value::Object(mut envelope) if envelope.contains_key("v") => {
                assert_eq!(envelope["v"], 1, "log message version of {session}");
                match envelope.remove("events") {
                    Some(serde_json::Value::Array(items)) => items,
                    other => panic!("log envelope of {session} has no events: {other:?}"),
                }
            }
            one => vec![one],
        };
        // A compaction (issue 35) restates the log from its first event in one message, until
        // the messages before it are purged: each event is kept once, and a restated one must
        // be the same event.
        for item in batch {
            let event: Event = serde_json::from_value(item)
                .unwrap_or_else(|e| panic!("log event of {session} is malformed: {e}"));
            let known = events.iter().find(|e: &&Event| e.seq == event.seq);
            match known {
                Some(first) => assert!(
                    first.kind == event.kind && first.data == event.data,
                    "log of {session} restates event {} as another: {first:?} then {event:?}",
                    event.seq
                ),
                None => events.push(event),
            }
        }
        if at >= last {
            break;
        }
    }
    events
}

/// A log as one line per event, for failure messages.
pub fn render_log(log: &[Event]) -> String {
    log.iter()
        .map(|e| format!("  {:>3} {:<24} {}", e.seq, e.kind, e.data))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Events of one kind.
pub fn of_kind<'a>(log: &'a [Event], kind: &str) -> Vec<&'a Event> {
    log.iter().filter(|e| e.kind == kind).collect()
}

/// `inbox/accepted` events whose message is of `kind` (`subagent-report`, `subagent-settled`,
/// `user`) and, when given, from `sender`.
pub fn accepted<'a>(log: &'a [Event], kind: &str, sender: Option<&str>) -> Vec<&'a Event> {
    log.iter()
        .filter(|e| e.kind == "inbox/accepted")
        .filter(|e| e.data["message"]["kind"] == kind)
        .filter(|e| sender.is_none_or(|s| e.data["message"]["sender_session_id"] == s))
        .collect()
}

/// `turn/start` events whose inputs include log sequence `seq`.
pub fn turns_consuming(log: &[Event], seq: u64) -> Vec<&Event> {
    log.iter()
        .filter(|e| e.kind == "turn/start")
        .filter(|e| {
            e.data["inputs"]
                .as_array()
                .is_some_and(|a| a.iter().any(|v| v.as_u64() == Some(seq)))
        })
        .collect()
}
