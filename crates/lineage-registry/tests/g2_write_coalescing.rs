//! Issue 35: writes issued at once through one `RegistryClient` go to the registry together
//! (one request, a JSON array), each with its own request id and its own response; a write
//! alone goes at once, as itself. A member older than arrays (played by a responder that reads
//! writes with the members' own `decode_command`, as every build before arrays did) gets them
//! one at a time.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use futures::StreamExt;
use lineage_registry::types::{Command, CommandResponse};
use lineage_registry::wire::{decode_command, WriteReply};
use lineage_registry::{Consistency, RegistryClient};
use lineage_testkit::NatsServer;

fn register(n: u32) -> Command {
    Command::RegisterSession {
        request_id: rid(format!("0190abcd-0000-7000-8000-{n:012}")),
        at_ms: 1,
        header: root_header(n),
        descriptor: None,
        max_depth: None,
        fan_out: Default::default(),
        budget: None,
        node: Some(node_id(1)),
        run: None,
        start_within_ms: None,
        hosted: true,
    }
}

/// Counts the write requests of the cluster by form: (arrays, single commands).
async fn count_requests(nats: &async_nats::Client) -> (Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let (arrays, singles) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut sub = nats
        .subscribe(format!("lineage.{CLUSTER}.registry.>"))
        .await
        .unwrap();
    let (a, s) = (arrays.clone(), singles.clone());
    tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            if !msg.subject.as_str().ends_with(".write") {
                continue;
            }
            match msg.payload.first() {
                Some(b'[') => a.fetch_add(1, Ordering::SeqCst),
                _ => s.fetch_add(1, Ordering::SeqCst),
            };
        }
    });
    nats.flush().await.unwrap();
    (arrays, singles)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g2_writes_issued_at_once_go_together_each_answered_and_applied_once() {
    let server = NatsServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let node = start(&server, config(1, &path(&dir))).await;
    assert!(node.initialize(members(&[1])).await.unwrap());
    agreed_leader(&[&node], Duration::from_secs(5)).await;
    let nats = connect(&server).await;
    let client = RegistryClient::new(nats.clone(), CLUSTER);
    let (arrays, singles) = count_requests(&nats).await;

    // One write with nothing else under way: sent at once, as itself.
    let first = client.write(&register(1)).await.unwrap();
    assert!(matches!(first, CommandResponse::Registered { .. }));
    wait_for_async(Duration::from_secs(5), "the request counted", || async {
        singles.load(Ordering::SeqCst) + arrays.load(Ordering::SeqCst) >= 1
    })
    .await;
    assert_eq!(arrays.load(Ordering::SeqCst), 0);

    // 300 at once: every one answered for itself, fewer requests than writes, some arrays.
    let writes = (2..302u32).map(|n| {
        let client = client.clone();
        async move { (n, client.write(&register(n)).await) }
    });
    let answers = futures::future::join_all(writes).await;
    for (n, answer) in &answers {
        match answer {
            Ok(CommandResponse::Registered { session, .. }) => assert_eq!(session, &sid(*n)),
            other => panic!("write {n}: {other:?}"),
        }
    }
    let counts = client
        .session_counts(Consistency::Linearizable)
        .await
        .unwrap();
    assert_eq!(counts.get("running"), Some(&301), "{counts:?}");
    // The same 300 again (a retry of each): recognised by their ids, nothing applied twice.
    let again = futures::future::join_all((2..302u32).map(|n| {
        let client = client.clone();
        async move { client.write(&register(n)).await }
    }))
    .await;
    assert!(again
        .iter()
        .all(|a| matches!(a, Ok(CommandResponse::Registered { .. }))));
    let counts = client
        .session_counts(Consistency::Linearizable)
        .await
        .unwrap();
    assert_eq!(counts.get("running"), Some(&301), "{counts:?}");
    let (a, s) = (
        arrays.load(Ordering::SeqCst),
        singles.load(Ordering::SeqCst),
    );
    assert!(a > 0, "no write went in an array ({s} single requests)");
    assert!(
        a + s < 601,
        "{a} arrays and {s} single requests for 601 writes"
    );
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g2_a_member_older_than_arrays_gets_the_commands_one_at_a_time() {
    let server = NatsServer::start().unwrap();
    let nats = connect(&server).await;
    // The older member: reads every write as one command, as builds before arrays did.
    let (arrays, singles) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut sub = nats
        .queue_subscribe(
            lineage_registry::subjects::write(CLUSTER),
            "registry".to_owned(),
        )
        .await
        .unwrap();
    let (a, s, responder) = (arrays.clone(), singles.clone(), nats.clone());
    tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            let reply = match decode_command(&msg.payload) {
                Ok(_) => {
                    s.fetch_add(1, Ordering::SeqCst);
                    WriteReply::Done {
                        response: CommandResponse::Noop,
                    }
                }
                Err(refusal) => {
                    a.fetch_add(1, Ordering::SeqCst);
                    WriteReply::Done {
                        response: CommandResponse::Refused(refusal),
                    }
                }
            };
            if let Some(to) = msg.reply {
                let body = serde_json::to_vec(&reply).unwrap();
                responder.publish(to, body.into()).await.unwrap();
            }
        }
    });
    nats.flush().await.unwrap();
    let client = RegistryClient::new(nats.clone(), CLUSTER).with_deadline(Duration::from_secs(5));

    let responses = client
        .write_many(&[register(1), register(2), register(3)])
        .await
        .unwrap();
    assert_eq!(responses, vec![CommandResponse::Noop; 3]);
    assert_eq!(
        (
            arrays.load(Ordering::SeqCst),
            singles.load(Ordering::SeqCst)
        ),
        (1, 3)
    );

    // Writes at once through the coalescing client: each answered, whatever went together.
    let answers = futures::future::join_all((10..60u32).map(|n| {
        let client = client.clone();
        async move { client.write(&register(n)).await }
    }))
    .await;
    assert!(
        answers
            .iter()
            .all(|a| matches!(a, Ok(CommandResponse::Noop))),
        "{answers:?}"
    );
    assert_eq!(singles.load(Ordering::SeqCst), 3 + 50);
}
