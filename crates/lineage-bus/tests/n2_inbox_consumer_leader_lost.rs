//! N2 (issue 12): a parent's durable inbox consumer is replicated (R3) and its pull requests
//! wait at the consumer's leader. When the nats-server leading it is SIGKILLed while the
//! parent's own connection (to another server) stays up, a report published right after the
//! kill still reaches the parent within [`WITHIN`] (6 s here), well before async-nats would
//! first report a missed heartbeat (30 s). This was the first suspect for the lost settlement
//! notice of `lineage chaos --seed 22 --duration 15m`; this test ruled it out (the notice was
//! lost on the publishing side: `tests/z3_nats_faults.rs`), and it stays as the regression
//! test of the reading side. Against a real 3-server JetStream cluster.

use std::time::{Duration, Instant};

use async_nats::jetstream;
use lineage_bus::conformance::{report, sid};
use lineage_bus::inbox::ParentInbox;
use lineage_bus::ports::InboxReader;
use lineage_bus::{StreamOptions, Subjects};
use lineage_testkit::NatsCluster;

/// How long after the publish the parent must have the report: well under the 30 s after which
/// async-nats's default pull would first report a missed heartbeat.
const WITHIN: Duration = Duration::from_secs(20);

/// The name of the server leading `consumer` of `stream`.
async fn consumer_leader(js: &jetstream::Context, stream: &str, consumer: &str) -> Option<String> {
    let stream = js.get_stream(stream).await.ok()?;
    let info = stream.consumer_info(consumer).await.ok()?;
    info.cluster.and_then(|c| c.leader)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n2_a_waiting_parent_gets_a_report_soon_after_its_consumer_leader_is_killed() {
    let mut cluster = tokio::task::block_in_place(NatsCluster::start).unwrap();
    // The parent's connection goes to server 0 only: the kill below never disconnects it.
    let client = lineage_bus::connect(&cluster.url(0), "n2-leader-lost")
        .await
        .unwrap();
    let js = jetstream::new(client.clone());
    let s = Subjects::new("n2lost").unwrap();
    let inbox = ParentInbox::open_with(
        client.clone(),
        s.clone(),
        StreamOptions {
            replicas: 3,
            update: false,
        },
    )
    .await
    .unwrap();
    let parent = sid(1);
    let name = s.inbox_consumer(&parent);
    let mut reader = lineage_bus::Inbox::consumer(&inbox, &parent).await.unwrap();

    // The consumer's leader on another server than the parent's (stepped down until it is).
    let local = cluster.server(0).name().to_owned();
    let mut leader = None;
    for _ in 0..20 {
        match consumer_leader(&js, &s.inbox_stream(), &name).await {
            Some(l) if l != local => {
                leader = Some(l);
                break;
            }
            Some(_) => {
                let subject = format!(
                    "$JS.API.CONSUMER.LEADER.STEPDOWN.{}.{name}",
                    s.inbox_stream()
                );
                let _ = client.request(subject, "".into()).await;
            }
            None => {}
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let leader = leader.expect("the consumer's leader moved off server 0");
    let victim = (0..3)
        .find(|&i| cluster.server(i).name() == leader)
        .expect("the leader is one of the cluster's servers");

    // The parent waits on its inbox (its pull sits at the leader)...
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let waiting = tokio::spawn(async move {
        while let Some(next) = InboxReader::next(reader.as_mut()).await {
            let _ = tx.send(next.map(|d| d.message));
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    // ...when the leader's server dies, and a report is published right after.
    tokio::task::block_in_place(|| cluster.kill(victim));
    let published = lineage_bus::Inbox::publish(&inbox, &report(1), None)
        .await
        .unwrap();
    let since = Instant::now();
    assert!(!published.duplicate);
    let mut errors = Vec::new();
    let got = loop {
        let left = WITHIN.saturating_sub(since.elapsed());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some(Ok(message))) => break message.unwrap(),
            Ok(Some(Err(e))) => errors.push(format!("{:.1} s: {e}", since.elapsed().as_secs_f64())),
            Ok(None) => panic!("the inbox reader ended; errors: {errors:?}"),
            Err(_) => panic!(
                "no report within {WITHIN:?} of the publish after killing the consumer's leader ({leader}); reader errors: {errors:?}"
            ),
        }
    };
    assert_eq!(got, report(1));
    eprintln!(
        "report delivered {:.1} s after the publish (leader {leader} killed); reader errors meanwhile: {errors:?}",
        since.elapsed().as_secs_f64()
    );
    waiting.abort();
}
