//! Z3: the events and inbox streams' replicas, against real nats-servers: a 3-server JetStream
//! cluster (routes, R3) and a single server. What `nats stream info` would show is read with
//! async-nats (`$JS.API.STREAM.INFO`).

use std::time::{Duration, Instant};

use async_nats::jetstream;
use lineage_bus::events::EventLogStore;
use lineage_bus::inbox::ParentInbox;
use lineage_bus::{BusError, StreamOptions, Subjects};
use lineage_core::log::SessionEvent;
use lineage_core::messages::{Delivery, InboxMessage, SubagentReport};
use lineage_testkit::NatsCluster;
use lineage_testkit::NatsServer;

const R3: StreamOptions = StreamOptions {
    replicas: 3,
    update: false,
};
const R3_UPDATE: StreamOptions = StreamOptions {
    replicas: 3,
    update: true,
};

fn subjects() -> Subjects {
    Subjects::new("z3").unwrap()
}

use lineage_core::ids::sid;

fn event(seq: u64) -> SessionEvent {
    SessionEvent {
        seq,
        kind: "turn/user".into(),
        data: serde_json::json!({"text": format!("e{seq}")}),
        at_ms: 1,
    }
}

fn report(seq: u64) -> InboxMessage {
    InboxMessage::Report(SubagentReport {
        sender_session_id: sid(2),
        parent_session_id: sid(1),
        seq,
        content: format!("r{seq}"),
        delivery: Delivery::Quiet,
        at_ms: 1,
    })
}

/// `nats stream info NAME`: the configured replicas and the cluster's view (leader + peers).
async fn stream_info(client: &async_nats::Client, name: &str) -> jetstream::stream::Info {
    let js = jetstream::new(client.clone());
    let mut stream = js
        .get_stream(name)
        .await
        .unwrap_or_else(|e| panic!("stream {name}: {e}"));
    stream.info().await.unwrap().clone()
}

/// Waits until `name` has a leader and `peers` other replicas, all current.
async fn wait_replicated(client: &async_nats::Client, name: &str, peers: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info = stream_info(client, name).await;
        let cluster = info.cluster.clone().unwrap_or_default();
        if cluster.leader.is_some()
            && cluster.replicas.len() == peers
            && cluster.replicas.iter().all(|p| p.current && !p.offline)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} not replicated on {} servers within 20 s: {:?}",
            peers + 1,
            info.cluster
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn connect(url: &str) -> async_nats::Client {
    lineage_bus::connect(url, "z3-streams-test").await.unwrap()
}

#[tokio::test]
async fn z3_streams_are_created_with_three_replicas_on_a_nats_cluster() {
    let cluster = NatsCluster::start().unwrap();
    let client = connect(&cluster.url(0)).await;
    let s = subjects();
    let events = EventLogStore::open_with(client.clone(), s.clone(), R3)
        .await
        .unwrap();
    let inbox = ParentInbox::open_with(client.clone(), s.clone(), R3)
        .await
        .unwrap();
    for name in [s.events_stream(), s.inbox_stream()] {
        let info = stream_info(&client, &name).await;
        assert_eq!(info.config.num_replicas, 3, "{name}: {:?}", info.config);
        wait_replicated(&client, &name, 2).await;
    }
    // Both work: an append and a publish are acknowledged and read back.
    events.append(&sid(7), &event(1), None).await.unwrap();
    let (log, _) = events.read(&sid(7)).await.unwrap();
    assert_eq!(log, vec![event(1)]);
    let published = inbox.publish(&report(1), None).await.unwrap();
    assert!(!published.duplicate);
    // Opened again with the same options (a second node): nothing to change.
    EventLogStore::open_with(client.clone(), s.clone(), R3)
        .await
        .unwrap();
    ParentInbox::open_with(client, s, R3).await.unwrap();
}

#[tokio::test]
async fn z3_an_r1_stream_is_refused_when_three_replicas_are_configured() {
    let cluster = NatsCluster::start().unwrap();
    let client = connect(&cluster.url(1)).await;
    let s = subjects();
    // Found at start: both streams with one replica (what every node made before Z3).
    EventLogStore::open(client.clone(), s.clone())
        .await
        .unwrap();
    ParentInbox::open(client.clone(), s.clone()).await.unwrap();
    let events = EventLogStore::open_with(client.clone(), s.clone(), R3).await;
    let inbox = ParentInbox::open_with(client.clone(), s.clone(), R3).await;
    for (name, outcome) in [
        (s.events_stream(), events.err()),
        (s.inbox_stream(), inbox.err()),
    ] {
        let e = outcome.unwrap_or_else(|| panic!("{name}: R1 accepted with replicas = 3"));
        assert!(matches!(e, BusError::StreamReplicas { .. }), "{e:?}");
        let line = e.to_string();
        assert_eq!(
            line,
            format!(
                "stream {name} has 1 replica but nats.stream_replicas = 3; set nats.update_streams = true or `nats stream edit {name} --replicas 3`"
            )
        );
        assert!(!line.contains('\n'));
        // Refused: the stream is left as it was.
        assert_eq!(stream_info(&client, &name).await.config.num_replicas, 1);
    }
}

#[tokio::test]
async fn z3_an_r1_stream_is_updated_to_three_replicas_when_update_streams_is_set() {
    let cluster = NatsCluster::start().unwrap();
    let client = connect(&cluster.url(2)).await;
    let s = subjects();
    let old_events = EventLogStore::open(client.clone(), s.clone())
        .await
        .unwrap();
    let old_inbox = ParentInbox::open(client.clone(), s.clone()).await.unwrap();
    old_events.append(&sid(7), &event(1), None).await.unwrap();
    old_inbox.publish(&report(1), None).await.unwrap();
    let events = EventLogStore::open_with(client.clone(), s.clone(), R3_UPDATE)
        .await
        .unwrap();
    let inbox = ParentInbox::open_with(client.clone(), s.clone(), R3_UPDATE)
        .await
        .unwrap();
    for name in [s.events_stream(), s.inbox_stream()] {
        let info = stream_info(&client, &name).await;
        assert_eq!(info.config.num_replicas, 3, "{name}: {:?}", info.config);
        wait_replicated(&client, &name, 2).await;
        assert_eq!(info.state.messages, 1, "{name} kept its message");
    }
    let events_config = stream_info(&client, &s.events_stream()).await.config;
    assert!(events_config.allow_direct, "the update kept allow_direct");
    assert_eq!(
        stream_info(&client, &s.inbox_stream())
            .await
            .config
            .duplicate_window,
        lineage_bus::inbox::DUPLICATE_WINDOW,
        "the update kept the duplicate window"
    );
    // What was there before the update is still read, and the stream keeps working.
    let (log, cursor) = events.read(&sid(7)).await.unwrap();
    assert_eq!(log, vec![event(1)]);
    events
        .append(&sid(7), &event(2), Some(cursor))
        .await
        .unwrap();
    let retry = inbox.publish(&report(1), None).await.unwrap();
    assert!(retry.duplicate, "dedup state survived the update");
    // The consumer's own (R3) group may need a moment for a leader: a pull before that is
    // answered "no responders", which the host's inbox loop skips, as this one does.
    let mut consumer = inbox.consumer(&sid(1)).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let first = loop {
        let next = tokio::time::timeout_at(deadline.into(), consumer.next())
            .await
            .expect("the report from before the update within 10 s")
            .expect("the consumer stays open");
        match next {
            Ok(delivery) => break delivery,
            Err(e) => eprintln!("inbox pull: {e}"),
        }
    };
    assert_eq!(first.message.unwrap().dedup_id(), format!("{}-1", sid(2)));
}

#[tokio::test]
async fn z3_a_stream_with_more_replicas_than_configured_is_kept() {
    let cluster = NatsCluster::start().unwrap();
    let client = connect(&cluster.url(0)).await;
    let s = subjects();
    EventLogStore::open_with(client.clone(), s.clone(), R3)
        .await
        .unwrap();
    ParentInbox::open_with(client.clone(), s.clone(), R3)
        .await
        .unwrap();
    // A node configured with the default (1) opens them and leaves them at 3.
    EventLogStore::open(client.clone(), s.clone())
        .await
        .unwrap();
    ParentInbox::open(client.clone(), s.clone()).await.unwrap();
    for name in [s.events_stream(), s.inbox_stream()] {
        assert_eq!(stream_info(&client, &name).await.config.num_replicas, 3);
    }
}

#[tokio::test]
async fn z3_replicas_other_than_one_or_three_are_refused_before_any_stream_is_made() {
    let server = NatsServer::start().unwrap();
    let client = connect(&server.url()).await;
    let s = subjects();
    for replicas in [0, 2, 5] {
        let options = StreamOptions {
            replicas,
            update: true,
        };
        let events = EventLogStore::open_with(client.clone(), s.clone(), options).await;
        let inbox = ParentInbox::open_with(client.clone(), s.clone(), options).await;
        for (name, outcome) in [
            (s.events_stream(), events.err()),
            (s.inbox_stream(), inbox.err()),
        ] {
            let line = outcome.expect("refused").to_string();
            assert_eq!(
                line,
                format!("stream {name} cannot have {replicas} replicas (nats.stream_replicas = {replicas}); use 1 (one nats-server) or 3 (a JetStream cluster of 3 or more servers)")
            );
        }
    }
    let js = jetstream::new(client);
    assert!(js.get_stream(s.events_stream()).await.is_err());
    assert!(js.get_stream(s.inbox_stream()).await.is_err());
}

#[tokio::test]
async fn z3_three_replicas_on_a_single_server_is_refused_with_one_line() {
    let server = NatsServer::start().unwrap();
    let client = connect(&server.url()).await;
    let s = subjects();
    let e = EventLogStore::open_with(client.clone(), s.clone(), R3)
        .await
        .err()
        .expect("R3 on one server refused");
    let line = e.to_string();
    assert!(
        line.starts_with(&format!(
            "stream {} cannot be created with 3 replicas: ",
            s.events_stream()
        )),
        "{line}"
    );
    assert!(
        line.ends_with(
            "that needs a JetStream cluster of 3 or more servers (or set nats.stream_replicas = 1)"
        ),
        "{line}"
    );
    assert!(!line.contains('\n'), "{line}");
}

/// A client given one server's URL learns the others from the cluster (INFO `connect_urls`)
/// and fails over to them: what a node with `nats_url` naming one server of the cluster gets.
/// The server killed is the one leading both streams, so the appends and publishes right after
/// the kill meet a reconnect and a stream leader election: each call still succeeds once, by
/// itself (the same message sent again while the outcome is unknown), with no retry here.
#[tokio::test]
async fn z3_appends_and_publishes_ride_out_the_kill_of_the_stream_leader_and_the_clients_server() {
    let mut cluster = NatsCluster::start().unwrap();
    let setup = connect(&cluster.url(0)).await;
    let s = subjects();
    EventLogStore::open_with(setup.clone(), s.clone(), R3)
        .await
        .unwrap();
    ParentInbox::open_with(setup.clone(), s.clone(), R3)
        .await
        .unwrap();
    wait_replicated(&setup, &s.events_stream(), 2).await;
    wait_replicated(&setup, &s.inbox_stream(), 2).await;
    // Both streams led by one server, and the client on that server.
    let leader = stream_info(&setup, &s.events_stream())
        .await
        .cluster
        .unwrap()
        .leader
        .unwrap();
    let victim = (0..cluster.len())
        .find(|&i| cluster.server(i).name() == leader)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while stream_info(&setup, &s.inbox_stream())
        .await
        .cluster
        .unwrap()
        .leader
        .as_deref()
        != Some(leader.as_str())
    {
        // Ask the inbox stream's leader to step down until it is the events stream's.
        let _ = setup
            .request(
                format!("$JS.API.STREAM.LEADER.STEPDOWN.{}", s.inbox_stream()),
                "".into(),
            )
            .await;
        assert!(
            Instant::now() < deadline,
            "cannot co-locate the stream leaders"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let client = connect(&cluster.url(victim)).await;
    let events = EventLogStore::open_with(client.clone(), s.clone(), R3)
        .await
        .unwrap();
    let inbox = ParentInbox::open_with(client.clone(), s.clone(), R3)
        .await
        .unwrap();
    let mut cursor = events.append(&sid(9), &event(1), None).await.unwrap();
    cluster.kill(victim);
    let killed = Instant::now();
    for seq in 2..=5 {
        cursor = events
            .append(&sid(9), &event(seq), Some(cursor))
            .await
            .unwrap_or_else(|e| panic!("append {seq} {:?} after the kill: {e}", killed.elapsed()));
        let published = inbox
            .publish(&report(seq), None)
            .await
            .unwrap_or_else(|e| panic!("publish {seq} {:?} after the kill: {e}", killed.elapsed()));
        assert!(!published.duplicate);
    }
    let (log, _) = events.read(&sid(9)).await.unwrap();
    assert_eq!(log, (1..=5).map(event).collect::<Vec<_>>());
    assert_ne!(
        client.server_info().port,
        cluster.server(victim).port(),
        "the client moved to another server"
    );
    let js = jetstream::new(client.clone());
    let mut stream = js.get_stream(s.inbox_stream()).await.unwrap();
    assert_eq!(
        stream.info().await.unwrap().state.messages,
        4,
        "one copy each"
    );
    eprintln!(
        "4 appends and 4 publishes done {:?} after the kill",
        killed.elapsed()
    );
}
