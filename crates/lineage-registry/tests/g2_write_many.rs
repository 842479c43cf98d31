//! Issue 35 (a drain's disposals in a few requests): several commands in one write request
//! (a JSON array on any write subject). Each is applied in the array's order and on its own
//! (a refusal leaves the others), a request sent again is recognised command by command by the
//! request ids, and bad input is refused with one line (per command, or for the request as a
//! whole) and changes nothing else. A group of one voter on a real nats-server. A member older
//! than arrays (played by a responder that reads writes with the members' own
//! `decode_command`, as every build before arrays did) gets the commands one at a time.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use futures::StreamExt;
use lineage_registry::types::{Command, CommandResponse};
use lineage_registry::wire::{decode_command, WriteReply, WRITE_MANY_MAX};
use lineage_registry::{Consistency, RegistryClient, RegistryError, SessionState};
use lineage_testkit::NatsServer;

fn register(n: u32, request: &str) -> Command {
    Command::RegisterSession {
        request_id: rid(request),
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

fn dispose(n: u32, request: &str) -> Command {
    Command::Dispose {
        stop_reason: None,
        request_id: rid(request),
        at_ms: 2,
        session: sid(n),
    }
}

async fn raw(nats: &async_nats::Client, body: &str) -> WriteReply {
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        nats.request(
            lineage_registry::subjects::write(CLUSTER),
            body.to_owned().into(),
        ),
    )
    .await
    .expect("an answer in time")
    .expect("an answer");
    serde_json::from_slice(&reply.payload).expect("a write reply")
}

fn one_line_refusal(response: &CommandResponse) -> String {
    match response {
        CommandResponse::Refused(r) => {
            let line = r.to_string();
            assert!(!line.contains('\n'), "{line}");
            format!("{}: {line}", r.kind())
        }
        other => panic!("not refused: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g2_a_write_of_several_commands_applies_each_in_order_and_once() {
    let server = NatsServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let node = one_voter(&server, &path(&dir)).await;
    let nats = connect(&server).await;
    let client = RegistryClient::new(nats.clone(), CLUSTER);

    // In order: two roots, the first again under another id (refused, alone), then a
    // dispose of the first (it sees the registration before it).
    let commands = vec![
        register(1, "a"),
        register(2, "b"),
        register(1, "c"),
        dispose(1, "d"),
    ];
    let first = client.write_many(&commands).await.unwrap();
    assert_eq!(first.len(), 4);
    assert!(
        matches!(first[0], CommandResponse::Registered { .. }),
        "{first:?}"
    );
    assert!(
        matches!(first[1], CommandResponse::Registered { .. }),
        "{first:?}"
    );
    assert!(one_line_refusal(&first[2]).starts_with("duplicate_session"));
    assert!(
        matches!(first[3], CommandResponse::Disposed { already: false, .. }),
        "{first:?}"
    );
    let state = |n| {
        let client = client.clone();
        async move {
            client
                .session(sid(n), Consistency::Linearizable)
                .await
                .unwrap()
                .expect("registered")
                .state
        }
    };
    assert_eq!(state(1).await, SessionState::Disposed);
    assert_eq!(state(2).await, SessionState::Running);
    let digest = client.digest(Consistency::Linearizable).await.unwrap();

    // Sent again (a client retrying after a lost reply): every command recognised by its id,
    // the same answers, nothing applied twice.
    let again = client.write_many(&commands).await.unwrap();
    assert_eq!(again, first);
    assert_eq!(
        client.digest(Consistency::Linearizable).await.unwrap(),
        digest
    );

    // A command the members cannot read is refused alone, with one line; the others apply.
    let valid = serde_json::to_string(&dispose(2, "e")).unwrap();
    let reply = raw(&nats, &format!(r#"[{{"cmd": "explode"}}, {valid}]"#)).await;
    let WriteReply::DoneMany { responses } = reply else {
        panic!("not answered per command: {reply:?}");
    };
    assert!(one_line_refusal(&responses[0]).starts_with("malformed"));
    assert!(matches!(
        responses[1],
        CommandResponse::Disposed { already: false, .. }
    ));
    assert_eq!(state(2).await, SessionState::Disposed);
    let digest = client.digest(Consistency::Linearizable).await.unwrap();

    // Refused as a whole, with one line, changing nothing: an array cut short, too many.
    let reply = raw(&nats, r#"[{"cmd": "dispose""#).await;
    let WriteReply::Done { response } = reply else {
        panic!("not refused as a whole: {reply:?}");
    };
    let line = one_line_refusal(&response);
    assert!(line.contains("JSON array of commands"), "{line}");
    let too_many: Vec<Command> = (0..=WRITE_MANY_MAX as u32)
        .map(|n| register(100 + n, &format!("many-{n}")))
        .collect();
    match client.write_many(&too_many).await {
        Err(RegistryError::Refused(r)) => {
            let line = r.to_string();
            assert!(
                line.contains(&format!("at most {WRITE_MANY_MAX}")),
                "{line}"
            );
            assert!(!line.contains('\n'));
        }
        other => panic!(
            "{} commands in one write were not refused: {other:?}",
            too_many.len()
        ),
    }
    assert_eq!(
        client.digest(Consistency::Linearizable).await.unwrap(),
        digest
    );
    // Nothing to write is an empty answer, not a request.
    assert!(client.write_many(&[]).await.unwrap().is_empty());

    // Z2: on a node's own write subject, every command of the array is checked against the
    // sender: node-4 renews its own lease, not node-1's.
    let node4 = lineage_core::ids::NodeId::parse("node-4").unwrap();
    let heartbeat = |node: lineage_core::ids::NodeId, request: &str| Command::Heartbeat {
        request_id: rid(request),
        at_ms: 3,
        node,
        lease_ms: 60_000,
        info: None,
    };
    let as_node4 = RegistryClient::new(nats.clone(), CLUSTER).as_node(&node4);
    let beats = as_node4
        .write_many(&[heartbeat(node_id(1), "h1"), heartbeat(node4.clone(), "h4")])
        .await
        .unwrap();
    assert!(one_line_refusal(&beats[0]).starts_with("sender_mismatch"));
    assert!(
        matches!(beats[1], CommandResponse::LeaseRenewed { .. }),
        "{beats:?}"
    );
    let nodes = client.nodes(Consistency::Linearizable).await.unwrap();
    assert_eq!(
        nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(),
        ["node-4"]
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
        .write_many(&[register(1, "o1"), register(2, "o2"), register(3, "o3")])
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
}
