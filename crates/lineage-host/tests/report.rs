//! Reports (M1): quiet only queues, wakeup starts a parent turn; a restarted parent gets every
//! report queued while it was down exactly once (N2).
//!
//! M1 is host logic and runs on the in-memory bus twins and `MemoryRegistry`; N2 keeps a real
//! nats-server and Raft registry: it crosses nodes and republishes a raw JetStream copy.

mod common;

use std::time::Duration;

use common::*;
use lineage_core::descriptor::SubagentShape;
use lineage_host::control::{FollowupOutcome, FollowupRequest, ResumeOutcome};

fn turn_starts(log: &[lineage_core::log::SessionEvent]) -> usize {
    count_kind(log, "turn/start")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn m1_quiet_only_queues_and_wakeup_starts_a_parent_turn() {
    // Host logic: on the in-memory twins, no nats-server.
    let cluster = MemCluster::start();
    let host = cluster.host("node-a").await;
    let root = host
        .spawn(root_request(
            script(r#"{"turns": [], "after": {"do": "echo"}}"#),
            "hi",
        ))
        .await
        .unwrap();
    wait_for_async(Duration::from_secs(10), "the root's first turn", || async {
        count_kind(&cluster.log(&root.session).await, "turn/end") == 1
    })
    .await;
    let child = host
        .spawn(child_request(
            &root.session,
            SubagentShape::Continuable,
            script(
                r#"{"turns": [[{"do": "report", "content": "q1", "delivery": "quiet"},
                               {"do": "sleep", "ms": 1500},
                               {"do": "report", "content": "w1", "delivery": "wakeup"},
                               {"do": "sleep", "ms": 3000}]]}"#,
            ),
            "go",
        ))
        .await
        .unwrap();
    // The quiet report is accepted into the parent's log but starts no turn.
    wait_for_async(
        Duration::from_secs(10),
        "the quiet report to be accepted",
        || async { count_kind(&cluster.log(&root.session).await, "inbox/accepted") >= 2 },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        turn_starts(&cluster.log(&root.session).await),
        1,
        "quiet woke the parent"
    );
    // The wakeup report starts a turn that sees both reports, in order.
    wait_for_async(Duration::from_secs(10), "the wakeup turn", || async {
        turn_starts(&cluster.log(&root.session).await) == 2
    })
    .await;
    wait_for_async(
        Duration::from_secs(10),
        "the wakeup turn's reply",
        || async { count_kind(&cluster.log(&root.session).await, "turn/assistant") == 2 },
    )
    .await;
    let log = cluster.log(&root.session).await;
    let reply = log
        .iter()
        .filter(|e| e.kind == "turn/assistant")
        .nth(1)
        .unwrap()
        .data["text"]
        .as_str()
        .unwrap()
        .to_owned();
    let c = child.session.to_string();
    assert_eq!(reply, format!("report from {c}: q1\nreport from {c}: w1"));
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn n2_restarted_parent_gets_every_queued_report_exactly_once() {
    let cluster = Cluster::start().await;
    let a = cluster.host("node-a").await;
    let b = cluster.host("node-b").await;
    let root = a
        .spawn(root_request(
            script(r#"{"turns": [], "after": {"do": "echo"}}"#),
            "hi",
        ))
        .await
        .unwrap();
    let mut req = child_request(
        &root.session,
        SubagentShape::Continuable,
        script(
            r#"{"turns": [[{"do": "reply", "text": "ready"}],
                          [{"do": "report", "content": "r1", "delivery": "quiet"},
                           {"do": "report", "content": "r2", "delivery": "wakeup"}]]}"#,
        ),
        "start",
    );
    req.node = Some(node("node-b"));
    let child = a.spawn(req).await.unwrap();
    // The child settles after its first turn; the parent accepts the notice.
    wait_for_async(
        Duration::from_secs(10),
        "the first settlement to reach the parent",
        || async { count_kind(&cluster.log(&root.session).await, "inbox/accepted") == 2 },
    )
    .await;

    // The parent's node goes down.
    a.shutdown().await;
    drop(a);

    // Meanwhile the child is followed up (cold: resumed on node-b) and reports twice, then
    // settles again: three messages for the absent parent.
    let reply = b
        .followup(FollowupRequest {
            session: child.session.clone(),
            content: "go on".into(),
            request_id: None,
        })
        .await
        .unwrap();
    assert_eq!(reply.outcome, FollowupOutcome::ResumedAndDelivered);
    wait_for_async(
        Duration::from_secs(10),
        "the child to settle again",
        || async { count_kind(&cluster.log(&child.session).await, "outbox/settled") == 2 },
    )
    .await;
    // A redelivered copy (same payload, new message id) must not count twice.
    let subjects = lineage_bus::Subjects::new(CLUSTER).unwrap();
    let child_log = cluster.log(&child.session).await;
    assert_eq!(count_kind(&child_log, "outbox/report"), 2);
    let js = async_nats::jetstream::new(cluster.client.clone());
    let stream = js.get_stream(subjects.inbox_stream()).await.unwrap();
    let mut first_report = None;
    for seq in 1..=10u64 {
        if let Ok(raw) = stream.get_raw_message(seq).await {
            if String::from_utf8_lossy(&raw.payload).contains("\"r1\"") {
                first_report = Some(raw.payload.clone());
                break;
            }
        }
    }
    let copy = first_report.expect("r1 in the inbox stream");
    js.publish(subjects.parent_inbox(&root.session), copy)
        .await
        .unwrap()
        .await
        .unwrap();

    // The parent's node comes back and resumes the parent.
    let a2 = cluster.host("node-a").await;
    let resumed = a2.resume(root.session.clone()).await.unwrap();
    assert_eq!(resumed.outcome, ResumeOutcome::Resumed);
    wait_for_async(
        Duration::from_secs(10),
        "every queued message to be accepted",
        || async { count_kind(&cluster.log(&root.session).await, "inbox/accepted") == 5 },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let log = cluster.log(&root.session).await;
    let accepted: Vec<&serde_json::Value> = log
        .iter()
        .filter(|e| e.kind == "inbox/accepted")
        .map(|e| &e.data)
        .collect();
    assert_eq!(
        accepted.len(),
        5,
        "prompt, notice, r1, r2, notice: {accepted:?}"
    );
    let ids: std::collections::BTreeSet<&str> = accepted
        .iter()
        .filter_map(|a| a["dedup_id"].as_str())
        .collect();
    assert_eq!(ids.len(), 4, "each message exactly once");
    let contents: Vec<String> = accepted
        .iter()
        .map(|a| a["message"]["content"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(contents.iter().filter(|c| *c == "r1").count(), 1);
    assert_eq!(contents.iter().filter(|c| *c == "r2").count(), 1);
    a2.shutdown().await;
    b.shutdown().await;
}

/// An inbox whose first `fails` consumer opens fail, as they do while a nats-server restarts
/// or a node's link to NATS is down; everything else goes to the real (in-memory) inbox.
struct FlakyInbox {
    inner: std::sync::Arc<dyn lineage_bus::Inbox>,
    fails: std::sync::atomic::AtomicUsize,
}

impl lineage_bus::Inbox for FlakyInbox {
    fn publish<'a>(
        &'a self,
        message: &'a lineage_core::messages::InboxMessage,
        traceparent: Option<&'a str>,
    ) -> futures::future::BoxFuture<'a, Result<lineage_bus::inbox::Published, lineage_bus::BusError>>
    {
        self.inner.publish(message, traceparent)
    }

    fn consumer<'a>(
        &'a self,
        parent: &'a lineage_core::ids::SessionId,
    ) -> futures::future::BoxFuture<
        'a,
        Result<Box<dyn lineage_bus::ports::InboxReader>, lineage_bus::BusError>,
    > {
        use std::sync::atomic::Ordering;
        let failing = self
            .fails
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            return Box::pin(async {
                Err(lineage_bus::BusError::JetStream {
                    op: "create the parent inbox consumer",
                    reason: "no responders (a nats-server restarting)".into(),
                })
            });
        }
        self.inner.consumer(parent)
    }

    fn delete_consumer<'a>(
        &'a self,
        parent: &'a lineage_core::ids::SessionId,
    ) -> futures::future::BoxFuture<'a, Result<(), lineage_bus::BusError>> {
        self.inner.delete_consumer(parent)
    }

    fn delete_consumers<'a>(
        &'a self,
        parents: &'a [lineage_core::ids::SessionId],
    ) -> futures::future::BoxFuture<'a, Result<usize, lineage_bus::BusError>> {
        self.inner.delete_consumers(parents)
    }

    fn purge<'a>(
        &'a self,
        parents: &'a [lineage_core::ids::SessionId],
    ) -> futures::future::BoxFuture<'a, Result<(), lineage_bus::BusError>> {
        self.inner.purge(parents)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn x1_m2_a_parent_whose_inbox_consumer_failed_to_open_still_gets_its_childs_report() {
    // Issue 12 (`lineage chaos`, seed 13): a parent whose durable inbox consumer could not be
    // opened at its first child (NATS briefly unreachable) never read a notice again: its
    // children's reports and settlements waited in the stream. The consumer is now opened
    // again until it opens.
    let cluster = MemCluster::start();
    let host = cluster
        .host_with("node-a", |mut ports| {
            ports.inbox = std::sync::Arc::new(FlakyInbox {
                inner: ports.inbox,
                fails: std::sync::atomic::AtomicUsize::new(3),
            });
            ports
        })
        .await;
    let (root, child) = root_and_continuable_child(
        &host,
        r#"{"turns": [[{"do": "report", "content": "w1", "delivery": "wakeup"},
                       {"do": "reply", "content": "done"}]]}"#,
        "go",
    )
    .await;
    wait_for_async(
        Duration::from_secs(15),
        "the parent to accept its child's report and settlement",
        || async {
            let log = cluster.log(&root).await;
            let from_child = |kind: &str| {
                log.iter()
                    .filter(|e| {
                        e.kind == "inbox/accepted"
                            && e.data["message"]["kind"] == kind
                            && e.data["message"]["sender_session_id"] == child.to_string()
                    })
                    .count()
            };
            from_child("subagent-report") == 1
        },
    )
    .await;
}
