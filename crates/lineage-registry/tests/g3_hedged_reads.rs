//! G3, N3 (issue 12): a member that is stopped (SIGSTOP) keeps its queue subscription on the
//! read subject until nats-server drops its connection, so NATS still routes reads to it. A
//! read must be answered while any member serves: the client sends another copy of a read that
//! has no answer yet (hedging), so a read is lost only if every copy of every attempt went to a
//! silent member.
//!
//! Here two silent members (subscribed to `registry.read` in the members' queue group, never
//! answering) stand beside one serving member. Without hedging, each 2 s attempt went to a
//! silent one two times in three, so about one read in eight failed after its five attempts
//! (CI saw one: g3_stopped_node, 2026-12-03); with it, every read answers.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use lineage_registry::wire::{QueryResult, ReadReply};
use lineage_registry::{subjects, Consistency, RegistryClient};
use lineage_testkit::NatsServer;

const READS: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g3_a_read_is_answered_while_two_of_three_members_are_silent() {
    let server = NatsServer::start().expect("nats-server");
    let nats = async_nats::connect(server.url()).await.expect("connect");
    let cluster = "hedge";
    let subject = subjects::read(cluster);

    // Two silent members: subscribed in the queue group, they read and never answer.
    let mut silent = Vec::new();
    for _ in 0..2 {
        let conn = async_nats::connect(server.url()).await.expect("connect");
        let mut sub = conn
            .queue_subscribe(subject.clone(), subjects::QUEUE_GROUP.to_owned())
            .await
            .expect("subscribe");
        silent.push(tokio::spawn(async move {
            let mut swallowed = 0usize;
            while sub.next().await.is_some() {
                swallowed += 1;
            }
            drop(conn);
            swallowed
        }));
    }
    // One serving member.
    let serving = async_nats::connect(server.url()).await.expect("connect");
    let mut sub = serving
        .queue_subscribe(subject.clone(), subjects::QUEUE_GROUP.to_owned())
        .await
        .expect("subscribe");
    let answers = serving.clone();
    let server_task = tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            let counts = BTreeMap::from([("running".to_owned(), 7u64)]);
            let reply = ReadReply::Done {
                result: QueryResult::Counts(counts),
            };
            if let Some(inbox) = msg.reply {
                let body = serde_json::to_vec(&reply).expect("encode");
                answers.publish(inbox, body.into()).await.expect("reply");
            }
        }
    });
    nats.flush().await.expect("flush");
    serving.flush().await.expect("flush");

    let client = RegistryClient::new(nats.clone(), cluster);
    let mut slowest = Duration::ZERO;
    for i in 0..READS {
        let started = Instant::now();
        let counts = client
            .session_counts(Consistency::Stale)
            .await
            .unwrap_or_else(|e| panic!("read {i} with two silent members: {e}"));
        assert_eq!(counts.get("running"), Some(&7), "read {i}: {counts:?}");
        slowest = slowest.max(started.elapsed());
    }
    println!("{READS} reads, the slowest in {slowest:?}");
    server_task.abort();
    for task in silent {
        task.abort();
    }
}
