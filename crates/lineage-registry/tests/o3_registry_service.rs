//! O3 (issue 15): the registry's read side is the NATS micro service `lineage-registry`, one
//! instance per member, against a real nats-server and a group of three members:
//! - `$SRV.PING.lineage-registry` answers once per member, with its cluster, Raft id and node;
//! - `$SRV.INFO.lineage-registry.<id>` lists the endpoints `read` (`registry.read`, queue group
//!   `registry`) and `read-direct` (`registry.<raft_id>.read`) with their descriptions, and no
//!   write or Raft subject;
//! - a read sent to the endpoint subjects answers (any member; the named member);
//! - a malformed read is answered with its JSON body and the `Nats-Service-Error` headers (400)
//!   and counted in `$SRV.STATS.lineage-registry`;
//! - a member that shuts down leaves the service.

mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use lineage_testkit::NatsServer;
use serde_json::{json, Value};

/// Every reply to one request to `subject` within 500 ms.
async fn gather(
    client: &async_nats::Client,
    subject: &str,
    body: &[u8],
) -> Vec<async_nats::Message> {
    let inbox = client.new_inbox();
    let mut sub = client.subscribe(inbox.clone()).await.unwrap();
    client
        .publish_with_reply(subject.to_owned(), inbox, body.to_vec().into())
        .await
        .unwrap();
    let mut got = Vec::new();
    let end = tokio::time::Instant::now() + Duration::from_millis(500);
    while let Ok(Some(msg)) = tokio::time::timeout_at(end, sub.next()).await {
        got.push(msg);
    }
    got
}

async fn request(client: &async_nats::Client, subject: &str, body: &[u8]) -> async_nats::Message {
    client
        .request(subject.to_owned(), body.to_vec().into())
        .await
        .unwrap_or_else(|e| panic!("{subject}: {e}"))
}

fn json_of(msg: &async_nats::Message) -> Value {
    serde_json::from_slice(&msg.payload)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", msg.payload))
}

fn header(msg: &async_nats::Message, name: &str) -> Option<String> {
    msg.headers
        .as_ref()
        .and_then(|h| h.get(name))
        .map(|v| v.as_str().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o3_the_registry_read_side_is_the_lineage_registry_micro_service() {
    let server = NatsServer::start().unwrap();
    let dirs = tempdirs(3);
    let mut nodes = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        nodes.push(start(&server, config(i as u64 + 1, &path(dir))).await);
    }
    assert!(nodes[0].initialize(members(&[1, 2, 3])).await.unwrap());
    let refs: Vec<_> = nodes.iter().collect();
    let leader = agreed_leader(&refs, Duration::from_secs(10)).await;
    let client = connect(&server).await;

    // One instance per member, named by its metadata.
    let pongs = gather(&client, "$SRV.PING.lineage-registry", b"").await;
    let mut members: Vec<(String, String, String)> = pongs
        .iter()
        .map(|m| {
            let v = json_of(m);
            assert_eq!(v["name"], "lineage-registry", "{v}");
            let meta = &v["metadata"];
            (
                meta["cluster"].as_str().unwrap_or("?").to_owned(),
                meta["raft_id"].as_str().unwrap_or("?").to_owned(),
                meta["node"].as_str().unwrap_or("?").to_owned(),
            )
        })
        .collect();
    members.sort();
    let expected: Vec<(String, String, String)> = (1..=3)
        .map(|i| (CLUSTER.to_owned(), i.to_string(), format!("node-{i}")))
        .collect();
    assert_eq!(members, expected);

    // INFO of each instance: the two read endpoints, described; nothing else.
    let infos = gather(&client, "$SRV.INFO.lineage-registry", b"").await;
    assert_eq!(infos.len(), 3);
    for info in &infos {
        let info = json_of(info);
        let raft_id = info["metadata"]["raft_id"].as_str().unwrap().to_owned();
        assert!(
            info["description"]
                .as_str()
                .unwrap()
                .contains(&format!("cluster {CLUSTER}, member {raft_id}")),
            "{info:#}"
        );
        let mut endpoints: Vec<(String, String, String, Value)> = info["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_owned(),
                    e["subject"].as_str().unwrap().to_owned(),
                    e["queue_group"].as_str().unwrap().to_owned(),
                    e["metadata"].clone(),
                )
            })
            .collect();
        endpoints.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(endpoints.len(), 2, "{info:#}");
        assert_eq!(
            (
                &endpoints[0].0[..],
                &endpoints[0].1[..],
                &endpoints[0].2[..]
            ),
            ("read", "lineage.test.registry.read", "registry")
        );
        assert_eq!(endpoints[1].0, "read-direct");
        assert_eq!(
            endpoints[1].1,
            format!("lineage.test.registry.{raft_id}.read")
        );
        assert_eq!(
            endpoints[0].3["description"],
            "a registry query; any member answers"
        );
        assert_eq!(
            endpoints[1].3["description"],
            format!("a registry query to member {raft_id} only")
        );
        for (name, _, _, meta) in &endpoints {
            // Short enough for natscli's table, which cuts a value past ~60 characters.
            assert!(meta["description"].as_str().unwrap().len() <= 60, "{name}");
            assert!(
                meta["request"]
                    .as_str()
                    .unwrap()
                    .contains(r#""consistency":"stale"|"linearizable""#),
                "{name}: {meta}"
            );
            let queries = meta["queries"].as_str().unwrap();
            for kind in [
                "session",
                "subtree_page",
                "list_sessions",
                "session_counts",
                "status",
            ] {
                assert!(queries.split(", ").any(|q| q == kind), "{name}: {queries}");
            }
            assert!(
                meta["reply"].as_str().unwrap().contains("not_leader"),
                "{name}: {meta}"
            );
        }
    }

    // Reads through the service subjects answer.
    let status = request(
        &client,
        "lineage.test.registry.read",
        json!({"consistency": "stale", "query": {"query": "status"}})
            .to_string()
            .as_bytes(),
    )
    .await;
    let status = json_of(&status);
    assert_eq!(status["reply"], "done", "{status}");
    assert_eq!(status["result"]["result"], "status", "{status}");
    assert_eq!(status["result"]["value"]["leader"], leader, "{status}");
    let nodes_read = request(
        &client,
        &format!("lineage.test.registry.{leader}.read"),
        json!({"consistency": "linearizable", "query": {"query": "session_counts"}})
            .to_string()
            .as_bytes(),
    )
    .await;
    assert_eq!(json_of(&nodes_read)["reply"], "done", "{:?}", nodes_read);
    assert_eq!(header(&nodes_read, "Nats-Service-Error-Code"), None);

    // A malformed read: its JSON body, the error headers, counted.
    let leader_id = leader.to_string();
    let bad = request(
        &client,
        &format!("lineage.test.registry.{leader}.read"),
        b"not json",
    )
    .await;
    assert_eq!(json_of(&bad)["reply"], "malformed", "{:?}", bad);
    assert_eq!(
        header(&bad, "Nats-Service-Error-Code").as_deref(),
        Some("400")
    );
    let description = header(&bad, "Nats-Service-Error").unwrap();
    assert!(
        description.starts_with("malformed registry read: "),
        "{description}"
    );
    let stats = request(
        &client,
        &format!(
            "$SRV.STATS.lineage-registry.{}",
            json_of(
                &gather(&client, "$SRV.PING.lineage-registry", b"")
                    .await
                    .into_iter()
                    .find(|m| json_of(m)["metadata"]["raft_id"] == leader_id.as_str())
                    .unwrap()
            )["id"]
                .as_str()
                .unwrap()
        ),
        b"",
    )
    .await;
    let stats = json_of(&stats);
    let direct = stats["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "read-direct")
        .unwrap_or_else(|| panic!("{stats:#}"));
    assert_eq!(direct["num_requests"], 2, "{stats:#}");
    assert_eq!(direct["num_errors"], 1, "{stats:#}");
    assert_eq!(direct["last_error"], format!("400:{description}"));

    // The registry's own client reads as before.
    let client_reads = lineage_registry::RegistryClient::new(connect(&server).await, CLUSTER);
    let counts = client_reads
        .session_counts(lineage_registry::Consistency::Linearizable)
        .await
        .unwrap();
    assert_eq!(counts.values().sum::<u64>(), 0);

    // A member that shuts down leaves the service.
    let last = nodes.pop().unwrap();
    last.shutdown().await.unwrap();
    let pongs = gather(&client, "$SRV.PING.lineage-registry", b"").await;
    assert_eq!(pongs.len(), 2, "{pongs:?}");
    assert!(pongs
        .iter()
        .all(|m| json_of(m)["metadata"]["raft_id"] != "3"));
}
