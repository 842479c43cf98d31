//! Issue 12 (N2, M2): durable inbox consumers do not pile up. Only a session with children gets
//! messages in its inbox, so only such a session has a durable consumer (`inbox-<session>`):
//! a leaf never opens one. Before, every live agent opened one at its start, and it was deleted
//! only by a drain (1,000 consumers left after 1,000 settled continuable children). The parent
//! still accepts every report and settlement notice exactly once, including those its children
//! sent before its consumer existed (the stream keeps them).

use std::time::Duration;

use lineage_testkit::prelude::*;
use serde_json::json;

const LEAVES: usize = 10;

/// How many consumers the inbox stream has.
fn inbox_consumers(c: &Cluster) -> usize {
    let bus = c.bus();
    let name = c.inbox_stream();
    bus.rt.block_on(async {
        let js = async_nats::jetstream::new(bus.client.clone());
        let mut stream = js.get_stream(&name).await.expect("inbox stream");
        stream
            .info()
            .await
            .expect("stream info")
            .state
            .consumer_count
    })
}

#[test]
fn n2_only_sessions_with_children_hold_a_durable_inbox_consumer() {
    let c = Cluster::start(3);
    let leaf = json!({"turns": [[{"do": "report", "content": "leaf here", "delivery": "quiet"},
        {"do": "reply", "content": "leaf done"}]]});
    let middle = json!({"turns": [[
        spawn_step("continuable", "node-3", "deeper", leaf.clone()),
        {"do": "wait_children"},
        {"do": "reply", "content": "middle done"}]]});
    let mut steps: Vec<_> = (0..LEAVES)
        .map(|i| {
            spawn_step(
                "continuable",
                ["node-2", "node-3"][i % 2],
                "work",
                leaf.clone(),
            )
        })
        .collect();
    steps.push(spawn_step("continuable", "node-2", "middle", middle));
    steps.push(json!({"do": "wait_children"}));
    let root = c.spawn_root(
        "node-1",
        &json!({"turns": [steps], "after": {"do": "echo"}}),
    );
    let tree = wait_for(Duration::from_secs(60), "every child settled", || {
        let tree = c.tree(&root);
        (tree.len() == LEAVES + 3
            && tree
                .iter()
                .filter(|r| r["session"] != root.as_str())
                .all(|r| r["state"] == "settled"))
        .then_some(tree)
    });
    // The root accepted each child's report and settlement once.
    let children = Cluster::children(&tree, &root);
    assert_eq!(children.len(), LEAVES + 1);
    wait_for(Duration::from_secs(30), "every notice accepted", || {
        let log = c.log(&root);
        children
            .iter()
            .all(|child| accepted(&log, "subagent-settled", Some(child)).len() == 1)
            .then_some(())
    });
    let log = c.log(&root);
    for child in &children {
        assert_eq!(
            accepted(&log, "subagent-settled", Some(child)).len(),
            1,
            "{child}"
        );
    }
    // The middle child accepted its own child's report and notice, though it opened its
    // consumer only at that birth.
    let middle = children
        .iter()
        .find(|child| !Cluster::children(&tree, child).is_empty())
        .expect("the middle child");
    let grandchild = &Cluster::children(&tree, middle)[0];
    let middle_log = c.log(middle);
    assert_eq!(
        accepted(&middle_log, "subagent-report", Some(grandchild)).len(),
        1
    );
    assert_eq!(
        accepted(&middle_log, "subagent-settled", Some(grandchild)).len(),
        1
    );
    // Two sessions have children (the root and the middle one): two consumers, not 13.
    assert_eq!(inbox_consumers(&c), 2, "consumers of {}", c.inbox_stream());
}
