//! Q4, issue 13 (bounded reads at scale): the undisposed sessions placed on a node, as
//! re-adoption and takeover read them (`RegistryClient::sessions_on_node`), against a real
//! nats-server and a registry member on disk.
//!
//! A node that hosts thousands of sessions is read whole: the client walks listing pages of
//! the node index, each reply bounded under NATS' max_payload (1 MB). Before, it was one
//! reply of every record, which past about 2,000 sessions exceeded max_payload, so a node
//! restarting with that many sessions could not re-adopt any (and the registry scanned every
//! session it held to answer); the test fails on that code (a timeout after 10 s). The
//! one-reply query now answers `too_large` (413) at once when its answer would not fit.

mod common;

use std::collections::BTreeSet;

use common::*;
use futures::stream::{self, StreamExt};
use lineage_core::header::SessionHeader;
use lineage_registry::client::NewSession;
use lineage_registry::{Consistency, RegistryClient};
use lineage_testkit::NatsServer;
use serde_json::json;

/// Sessions on the busy node: their records weigh well over 1 MB together.
const ON_NODE: u32 = 3_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q4_a_node_with_thousands_of_sessions_is_read_whole_in_bounded_pages() {
    let server = NatsServer::start().unwrap();
    let dirs = tempdirs(1);
    let member = one_voter(&server, &path(&dirs[0])).await;
    let client = RegistryClient::new(connect(&server).await, CLUSTER);

    // 3,000 on node-7 with a descriptor of some weight, 100 on node-8.
    let label = "x".repeat(400);
    let registered: Vec<(u32, u64)> = stream::iter(1..=ON_NODE + 100)
        .map(|n| {
            let (client, label) = (client.clone(), label.clone());
            async move {
                let node = node_id(if n <= ON_NODE { 7 } else { 8 });
                let new = NewSession {
                    node: Some(node),
                    descriptor: Some(
                        serde_json::from_value(
                            json!({"provider": "script", "mode": "continuable", "label": label}),
                        )
                        .unwrap(),
                    ),
                    ..Default::default()
                };
                let epoch = client
                    .register_session(
                        rid(format!("reg-{n}")),
                        1,
                        SessionHeader::top_level(sid(n), None, None),
                        new,
                    )
                    .await
                    .unwrap_or_else(|e| panic!("register {n}: {e}"));
                (n, epoch)
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    assert_eq!(registered.len(), (ON_NODE + 100) as usize);
    // Ten of node-7's are disposed: not on the node any more.
    for n in 1..=10 {
        let already = client
            .dispose(rid(format!("dispose-{n}")), 2, sid(n))
            .await
            .unwrap();
        assert!(!already, "disposed by this command");
    }

    let got = client
        .sessions_on_node(node_id(7), Consistency::Linearizable)
        .await
        .expect("the node's sessions are read");
    let ids: BTreeSet<String> = got.iter().map(|r| r.id().to_string()).collect();
    let want: BTreeSet<String> = (11..=ON_NODE).map(|n| sid(n).to_string()).collect();
    assert_eq!(ids.len(), got.len(), "each session once");
    assert_eq!(ids, want, "exactly node-7's undisposed sessions");
    let weight: usize = got
        .iter()
        .map(|r| serde_json::to_vec(r).unwrap().len())
        .sum();
    assert!(
        weight > 1_048_576,
        "the records weigh {weight} B: more than one reply may carry"
    );
    let other = client
        .sessions_on_node(node_id(8), Consistency::Linearizable)
        .await
        .unwrap();
    assert_eq!(other.len(), 100);
    let none = client
        .sessions_on_node(node_id(9), Consistency::Linearizable)
        .await
        .unwrap();
    assert!(none.is_empty());

    // The one-reply query, as any NATS client sends it: a clear `too_large` answer (413) at
    // once, not a reply NATS drops and a caller that waits out its deadline.
    let nats = connect(&server).await;
    let msg = read_sessions_on_node(&nats, "node-7").await;
    let reply: serde_json::Value = serde_json::from_slice(&msg.payload).unwrap();
    assert_eq!(reply["reply"], "too_large", "{reply}");
    let reason = reply["reason"].as_str().unwrap();
    assert!(
        reason.contains("max_payload")
            && reason.contains("list_sessions")
            && !reason.contains('\n'),
        "{reason}"
    );
    let code = msg
        .headers
        .as_ref()
        .and_then(|h| h.get("Nats-Service-Error-Code"))
        .map(|v| v.as_str().to_owned());
    assert_eq!(code.as_deref(), Some("413"));
    // Node-8's hundred fit in one answer.
    let msg = read_sessions_on_node(&nats, "node-8").await;
    let reply: serde_json::Value = serde_json::from_slice(&msg.payload).unwrap();
    assert_eq!(reply["reply"], "done", "{reply}");
    assert_eq!(reply["result"]["value"].as_array().map(Vec::len), Some(100));
    member.shutdown().await.unwrap();
}

/// The `sessions_on_node` query of `node`, sent as any NATS client sends it.
async fn read_sessions_on_node(nats: &async_nats::Client, node: &str) -> async_nats::Message {
    let body = json!({"consistency": "linearizable", "query": {"query": "sessions_on_node", "node": node}});
    nats.request(
        format!("lineage.{CLUSTER}.registry.read"),
        serde_json::to_vec(&body).unwrap().into(),
    )
    .await
    .expect("an answer")
}
