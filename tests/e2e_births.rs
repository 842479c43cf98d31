//! Births that never start (issue 10, faults 2 and 3; S1, X2): a spawn whose start fails leaves
//! no record that looks alive (none at all when its node cannot host it; a disposed one when
//! its launch fails after the birth), and a retry with the same request id is refused instead
//! of acknowledging the dead birth.

use lineage_testkit::prelude::Cluster;
use serde_json::json;

#[test]
fn s1_x2_a_birth_that_never_started_is_disposed_and_its_retry_is_refused() {
    // node-1 offers a profile whose program does not exist: its launch fails after the birth.
    let cluster = Cluster::start_with_toml(
        1,
        &[],
        "[agents.ghost]\ndriver = \"acp\"\ncommand = \"/nonexistent/lineage-ghost-agent\"\n",
    );
    let root = cluster.spawn_root(
        "node-1",
        &json!({"turns": [[{"do": "reply", "text": "hi"}]]}),
    );

    // A child placed on a node that does not exist, twice with one request id: nothing is
    // registered (the target's offer cannot be read), and the retry is refused the same way.
    let id = uuid::Uuid::now_v7().to_string();
    let args = [
        "spawn",
        "--parent",
        &root,
        "--node",
        "node-99",
        "--request-id",
        &id,
        "--prompt",
        "x",
    ];
    let (first, _, err1) = cluster.cli(&args);
    assert_eq!(first, 5, "the start on node-99 cannot happen: {err1}");
    let (second, out2, err2) = cluster.cli(&args);
    assert_eq!(
        second, 5,
        "a retry acknowledged a birth that never ran: {out2}"
    );
    assert!(!err2.trim().contains('\n'), "one line: {err2}");
    assert_eq!(
        cluster.tree(&root).len(),
        1,
        "no record for a birth nowhere"
    );

    // A child whose launch fails after its birth: disposed, and its retry refused for good.
    let id = uuid::Uuid::now_v7().to_string();
    let args = [
        "spawn",
        "--parent",
        &root,
        "--profile",
        "ghost",
        "--request-id",
        &id,
        "--prompt",
        "x",
    ];
    let (first, out1, err1) = cluster.cli(&args);
    assert_ne!(first, 0, "a launch of a missing program succeeded: {out1}");
    assert!(!err1.trim().contains('\n'), "one line: {err1}");
    let (second, out2, err2) = cluster.cli(&args);
    assert_ne!(
        second, 0,
        "a retry acknowledged a birth that never ran: {out2}"
    );
    assert!(
        err2.contains("never started") && err2.contains("new request id"),
        "{err2}"
    );
    assert!(!err2.trim().contains('\n'), "one line: {err2}");
    let tree = cluster.tree(&root);
    assert_eq!(tree.len(), 2, "the root and the dead birth: {tree:?}");
    for row in &tree {
        if row["session"] != root.as_str() {
            assert_eq!(row["state"], "disposed", "a dead birth looks alive: {row}");
        }
    }

    // Top-level sessions on a missing node, or whose program is missing: no live record.
    let (code, _, err) = cluster.cli(&["spawn", "--node", "node-99", "--prompt", "x"]);
    assert_eq!(code, 5, "{err}");
    let (code, _, err) = cluster.cli(&["spawn", "--profile", "ghost", "--prompt", "x"]);
    assert_ne!(code, 0, "{err}");
    let status = cluster.cli_json(&["status"]);
    let running = status["sessions"]["running"].as_u64().unwrap_or(0);
    let waiting = status["sessions"]["waiting"].as_u64().unwrap_or(0);
    assert!(
        running + waiting <= 1,
        "only the scripted root may be live: {}",
        status["sessions"]
    );
}

/// A registry client and a runtime of the test's own, writing as the trusted admin subject.
fn registry(cluster: &Cluster) -> (tokio::runtime::Runtime, lineage_registry::RegistryClient) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let nats = rt
        .block_on(async_nats::connect(cluster.nats.url()))
        .expect("connect");
    let client = lineage_registry::RegistryClient::new(nats, cluster.cluster.clone());
    (rt, client)
}

/// A one-node cluster, a root on node-1 with four turns to give, and a registry client.
fn cluster_with_root() -> (
    Cluster,
    String,
    tokio::runtime::Runtime,
    lineage_registry::RegistryClient,
) {
    let cluster = Cluster::start(1);
    let turns: Vec<serde_json::Value> = (0..4)
        .map(|_| json!([{"do": "reply", "text": "ok"}]))
        .collect();
    let root = cluster.spawn_root("node-1", &json!({ "turns": turns }));
    let (rt, client) = registry(&cluster);
    (cluster, root, rt, client)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[test]
fn s1_m2_x2_a_birth_no_node_starts_is_swept_and_its_parent_is_told_once() {
    use lineage_core::header::child_session_meta;
    use lineage_core::ids::{NodeId, RequestId, RunId, SessionId};
    use lineage_registry::client::NewSession;
    use lineage_registry::{Consistency, SessionState};
    use std::time::Duration;

    let (cluster, root, rt, client) = cluster_with_root();
    let root_id = SessionId::parse(&root).unwrap();

    // A normal spawn is registered by its hosting node once its creation window is durable:
    // `running` at once, with no start deadline (nothing for the sweeper).
    let reply = cluster.spawn(&[
        "--parent",
        &root,
        "--shape",
        "continuable",
        "--prompt",
        "wait",
        "--script",
        r#"{"turns":[[{"do":"sleep","ms":30000}]]}"#,
    ]);
    let normal = SessionId::parse(&lineage_testkit::prelude::id_of(&reply["session"])).unwrap();
    let record = rt
        .block_on(client.session(normal.clone(), Consistency::Linearizable))
        .unwrap()
        .unwrap();
    assert_eq!(record.state, SessionState::Running, "{record:?}");
    assert_eq!(
        record.start_deadline_ms, None,
        "a hosted birth has no start deadline"
    );

    // A registration no node confirms (what a registry client that does not host it may
    // write): a child of the live root, placed on the live node-1, due to start within 1.5 s.
    let parent = rt
        .block_on(client.session(root_id.clone(), Consistency::Linearizable))
        .unwrap()
        .unwrap();
    let child_id = SessionId::parse(&uuid::Uuid::now_v7().to_string()).unwrap();
    let header = child_session_meta(&parent.header, child_id.clone(), 1, 0, None).unwrap();
    let descriptor = serde_json::from_value(
        json!({"provider": "script", "label": "orphan", "mode": "continuable"}),
    )
    .unwrap();
    rt.block_on(client.register_session(
        RequestId::parse(&uuid::Uuid::now_v7().to_string()).unwrap(),
        now_ms(),
        header,
        NewSession {
            descriptor: Some(descriptor),
            node: Some(NodeId::parse("node-1").unwrap()),
            run: Some(RunId::parse(&uuid::Uuid::now_v7().to_string()).unwrap()),
            start_within_ms: Some(1_500),
            ..NewSession::default()
        },
    ))
    .expect("register the birth");
    let child = child_id.to_string();
    assert_eq!(
        cluster.row(&root, &child)["state"],
        "starting",
        "a birth no node hosts yet is shown as starting"
    );
    // Nothing may claim it meanwhile: a followup is told to retry, in one line.
    let (code, _, err) = cluster.cli(&["send", &child, "hello"]);
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("still starting") && err.contains("retry shortly"),
        "{err}"
    );
    assert!(!err.trim().contains('\n'), "one line: {err}");

    // Past its deadline the sweeper disposes it and tells the parent, once.
    cluster.wait_state(&root, &child, "disposed", Duration::from_secs(20));
    let log = cluster.wait_log(
        &root,
        Duration::from_secs(10),
        "the never-started notice",
        |log| !lineage_testkit::prelude::accepted(log, "subagent-settled", Some(&child)).is_empty(),
    );
    // Give a second sweep (lease period 2 s) the time to send it again, if it would.
    std::thread::sleep(Duration::from_millis(4_500));
    let log = {
        let later = cluster.log(&root);
        assert!(later.len() >= log.len());
        later
    };
    let notices = lineage_testkit::prelude::accepted(&log, "subagent-settled", Some(&child));
    assert_eq!(
        notices.len(),
        1,
        "{}",
        lineage_testkit::prelude::render_log(&log)
    );
    let message = &notices[0].data["message"];
    assert_eq!(
        message["summary"], "subagent orphan never started: no node hosted it within 1500ms",
        "{message}"
    );
    // Seq 1, deduplicated as the child itself would have been.
    assert_eq!(notices[0].data["dedup_id"], format!("{child}-1"));
    // The normal child is untouched by the sweep.
    assert_eq!(cluster.row(&root, normal.as_str())["state"], "running");
}

#[test]
fn s1_m2_x2_a_birth_cut_short_before_its_log_is_disposed_when_resumed_and_its_parent_told_once() {
    use lineage_core::header::child_session_meta;
    use lineage_core::ids::{NodeId, RequestId, RunId, SessionId};
    use lineage_registry::client::NewSession;
    use lineage_registry::{Consistency, SessionState};
    use std::time::Duration;

    let (cluster, root, rt, client) = cluster_with_root();
    let root_id = SessionId::parse(&root).unwrap();
    // The root has spawned before (its inbox consumer opens at its first child; a notice to a
    // parent that has none yet waits in the inbox stream until it does).
    cluster.spawn(&[
        "--parent",
        &root,
        "--shape",
        "continuable",
        "--prompt",
        "wait",
        "--script",
        r#"{"turns":[[{"do":"sleep","ms":30000}]]}"#,
    ]);

    // What a hosting node leaves when it stops between its two writes of a birth (the
    // creation window and the registration go at once): a `running` child, hosted by a node
    // that is gone, whose log is empty.
    let parent = rt
        .block_on(client.session(root_id.clone(), Consistency::Linearizable))
        .unwrap()
        .unwrap();
    let child_id = SessionId::parse(&uuid::Uuid::now_v7().to_string()).unwrap();
    let header = child_session_meta(&parent.header, child_id.clone(), 1, 0, None).unwrap();
    let descriptor = serde_json::from_value(
        json!({"provider": "script", "label": "halfborn", "mode": "continuable"}),
    )
    .unwrap();
    rt.block_on(client.register_session(
        RequestId::parse(&uuid::Uuid::now_v7().to_string()).unwrap(),
        now_ms(),
        header,
        NewSession {
            descriptor: Some(descriptor),
            node: Some(NodeId::parse("node-9").unwrap()),
            run: Some(RunId::parse(&uuid::Uuid::now_v7().to_string()).unwrap()),
            hosted: true,
            ..NewSession::default()
        },
    ))
    .expect("register the birth");
    let child = child_id.to_string();
    assert_eq!(cluster.row(&root, &child)["state"], "running");

    // A followup would cold-resume it: there is nothing to resume, so it is disposed, and the
    // sender is told in one line.
    let (code, _, err) = cluster.cli(&["send", &child, "hello"]);
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("is disposed") && err.contains("its node stopped before its log was written"),
        "{err}"
    );
    assert!(!err.trim().contains('\n'), "one line: {err}");
    let record = rt
        .block_on(client.session(child_id.clone(), Consistency::Linearizable))
        .unwrap()
        .unwrap();
    assert_eq!(record.state, SessionState::Disposed, "{record:?}");

    // The parent is told once, as the child would have told it (seq 1), with why.
    let log = cluster.wait_log(
        &root,
        Duration::from_secs(10),
        "the cut-short notice",
        |log| !lineage_testkit::prelude::accepted(log, "subagent-settled", Some(&child)).is_empty(),
    );
    // A second followup finds it disposed and tells nobody again.
    let (code, _, err) = cluster.cli(&["send", &child, "again"]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("is disposed"), "{err}");
    std::thread::sleep(Duration::from_millis(1_000));
    let log = {
        let later = cluster.log(&root);
        assert!(later.len() >= log.len());
        later
    };
    let notices = lineage_testkit::prelude::accepted(&log, "subagent-settled", Some(&child));
    assert_eq!(
        notices.len(),
        1,
        "{}",
        lineage_testkit::prelude::render_log(&log)
    );
    let message = &notices[0].data["message"];
    assert_eq!(
        message["summary"],
        "subagent halfborn never started: its node stopped before its log was written",
        "{message}"
    );
    assert_eq!(notices[0].data["dedup_id"], format!("{child}-1"));
}
