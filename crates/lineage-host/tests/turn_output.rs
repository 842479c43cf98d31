//! A turn's output as it comes (F1; issue 11, the ACP front door's feed): a hosted session's
//! turns publish `turn-start` (naming the followups taken), the reply streamed in chunks, and
//! `turn-end` once the end is durable. Hosts on the in-memory twins, scripted agents.

mod common;

use std::time::Duration;

use common::*;
use lineage_bus::ports::TurnOutputFeed;
use lineage_bus::TurnOutputs;
use lineage_core::output::{TurnEndOutcome, TurnOutput};
use lineage_protocol::control::FollowupRequest;

async fn next(feed: &mut dyn TurnOutputFeed) -> TurnOutput {
    tokio::time::timeout(Duration::from_secs(10), feed.next())
        .await
        .expect("turn output within 10 s")
        .expect("the feed is open")
        .expect("a well-formed message")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn f1_a_top_level_session_without_a_prompt_starts_idle_and_streams_each_turn() {
    let cluster = MemCluster::start();
    let host = cluster.host("node-a").await;
    let root = host
        .spawn(root_request(
            script(r#"{"turns": [[{"do": "reply", "text": "one two three"}]], "after": {"do": "echo"}}"#),
            "",
        ))
        .await
        .expect("a root")
        .session;
    let mut feed = cluster.bus.output().watch(Some(&root)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = cluster.log(&root).await;
    assert_eq!(count_kind(&log, "turn/start"), 0, "idle: {:?}", kinds(&log));

    for (n, request_id, want) in [(0, "p1", "one two three"), (1, "p2", "second")] {
        host.followup(FollowupRequest {
            session: root.clone(),
            content: "second".into(),
            request_id: Some(lineage_core::ids::RequestId::parse(request_id).unwrap()),
        })
        .await
        .expect("followup");
        match next(feed.as_mut()).await {
            TurnOutput::TurnStart {
                turn, request_ids, ..
            } => {
                assert_eq!(turn, n);
                assert_eq!(request_ids, vec![request_id.to_owned()]);
            }
            other => panic!("expected a turn start, got {other:?}"),
        }
        let mut streamed = String::new();
        let end = loop {
            match next(feed.as_mut()).await {
                TurnOutput::Chunk { turn, text, .. } => {
                    assert_eq!(turn, n);
                    streamed.push_str(&text);
                }
                end @ TurnOutput::TurnEnd { .. } => break end,
                other => panic!("expected a chunk or the end, got {other:?}"),
            }
        };
        assert_eq!(streamed, want);
        match end {
            TurnOutput::TurnEnd {
                turn,
                outcome,
                reply,
                ..
            } => {
                assert_eq!((turn, outcome), (n, TurnEndOutcome::Completed));
                assert_eq!(reply.as_deref(), Some(want));
            }
            other => panic!("{other:?}"),
        }
        // The end is durable when it is announced.
        let log = cluster.log(&root).await;
        assert_eq!(
            count_kind(&log, "turn/end") as u64,
            n + 1,
            "{:?}",
            kinds(&log)
        );
    }
    host.shutdown().await;
}
