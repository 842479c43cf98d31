//! The demo workload `lineage dev` runs: a tree of scripted agents spread over the nodes,
//! reports and settlements flowing to the parent, one node killed and its continuable child
//! cold-resumed elsewhere, then a drain. It prints the tree as it goes.

use std::time::Duration;

use futures::StreamExt;
use lineage_bus::control::{ControlError, ErrorCode};
use lineage_bus::ControlClient;
use lineage_core::descriptor::SubagentShape;
use lineage_core::ids::{NodeId, SessionId};
use lineage_protocol::control::{FollowupRequest, SpawnRequest};
use lineage_protocol::AgentSpec;
use lineage_registry::{Consistency, RegistryClient, SessionRecord};
use serde_json::json;

use super::cluster::DevCluster;
use crate::client::control;
use crate::cmd::script::read_script;
use crate::cmd::tree::{live_owners, render_tree};
use crate::global::Global;

/// The root's script: three continuable children on three nodes, then it answers every turn
/// (a report or a settlement waking it) with what it received.
fn root_script() -> serde_json::Value {
    let leaf = json!({"turns": [[{"do": "reply", "content": "leaf: counted 42 files"}]]});
    let analyst = json!({"turns": [[
        {"do": "report", "content": "analyst: started, delegating the count to a one-shot leaf", "delivery": "wakeup"},
        {"do": "spawn", "shape": "one-shot", "node": "node-3", "prompt": "count the files", "label": "leaf",
         "agent": {"driver": "script", "script": leaf}},
        {"do": "reply", "content": "analyst: 42 files"}
    ]]});
    let long_worker = json!({"turns": [
        [
            {"do": "report", "content": "worker: on a long task", "delivery": "quiet"},
            {"do": "sleep", "ms": 600000},
            {"do": "reply", "content": "worker: finished the long task"}
        ],
        [{"do": "reply", "content": "worker: resumed on a new node, picking up where the log left off"}]
    ]});
    let sleeper =
        json!({"turns": [[{"do": "sleep", "ms": 600000}, {"do": "reply", "content": "never"}]]});
    let supervisor = json!({"turns": [[
        {"do": "spawn", "shape": "continuable", "node": "node-1", "prompt": "watch the build", "label": "watcher",
         "agent": {"driver": "script", "script": sleeper}},
        {"do": "report", "content": "supervisor: watcher started", "delivery": "quiet"},
        {"do": "reply", "content": "supervisor: waiting on the watcher"}
    ]]});
    json!({"turns": [[
        {"do": "spawn", "shape": "continuable", "node": "node-2", "prompt": "analyse", "label": "analyst",
         "agent": {"driver": "script", "script": analyst}},
        {"do": "spawn", "shape": "continuable", "node": "node-3", "prompt": "long task", "label": "worker",
         "agent": {"driver": "script", "script": long_worker}},
        {"do": "spawn", "shape": "continuable", "node": "node-2", "prompt": "supervise", "label": "supervisor",
         "agent": {"driver": "script", "script": supervisor}},
        {"do": "reply", "content": "root: three children spawned"}
    ]], "after": {"do": "echo"}})
}

async fn print_tree(
    control: &ControlClient,
    registry: &RegistryClient,
    root: &SessionId,
    title: &str,
) -> Vec<SessionRecord> {
    println!();
    println!("── {title}");
    match registry
        .subtree(root.clone(), Consistency::Linearizable)
        .await
    {
        Ok(records) => {
            let nodes: std::collections::BTreeSet<NodeId> = records
                .iter()
                .filter_map(|r| r.placement.as_ref().map(|p| p.node.clone()))
                .collect();
            let owners = live_owners(control, nodes).await;
            for line in render_tree(&records, &owners, crate::client::now_ms()) {
                println!("   {line}");
            }
            records
        }
        Err(e) => {
            println!("   (tree unavailable: {e})");
            Vec::new()
        }
    }
}

fn label_of<'a>(records: &'a [SessionRecord], label: &str) -> Option<&'a SessionRecord> {
    records
        .iter()
        .find(|r| r.descriptor.as_ref().and_then(|d| d.label()).as_deref() == Some(label))
}

/// Runs the demo against a freshly started dev cluster.
pub async fn run(g: &Global, cluster: &mut DevCluster) -> Result<(), ControlError> {
    let control = control(g).await?;
    let client = control.nats().clone();
    let subjects = control.subjects().clone();
    let registry = RegistryClient::new(client.clone(), subjects.cluster().to_owned());
    let script = read_script(&root_script().to_string())?;

    println!();
    println!("── demo: a root agent on node-1 delegates to three continuable children on node-2 and node-3");
    let node1 = NodeId::parse("node-1")
        .map_err(|e| ControlError::new(ErrorCode::Internal, e.to_string()))?;
    let root = control
        .spawn(&SpawnRequest {
            shape: Some(SubagentShape::Continuable),
            node: Some(node1),
            max_depth: Some(lineage_core::depth::MaxDepth::from_u32(3)),
            ..SpawnRequest::new(AgentSpec::Script { script }, "plan the release")
        })
        .await?;
    let root_id = root.session.clone();
    println!("   root {root_id} on {}", root.node);

    // Everything addressed to the root, live: lifecycle events and its inbox.
    let watch_subject = format!("lineage.{}.parent.{root_id}.*", subjects.cluster());
    let mut sub = client.subscribe(watch_subject.clone()).await.map_err(|e| {
        ControlError::new(
            ErrorCode::Unavailable,
            format!("cannot watch {watch_subject}: {e}"),
        )
    })?;
    println!("   watching {watch_subject} (what `nats sub` would show):");
    let watcher = tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            let body: serde_json::Value = serde_json::from_slice(&msg.payload).unwrap_or_default();
            let kind = msg.subject.rsplit('.').next().unwrap_or("?").to_owned();
            let (what, who, detail) = crate::cmd::watch::describe_event(&kind, &body);
            println!("   ⟶ {what:16} {who}  {detail}");
        }
    });

    tokio::time::sleep(Duration::from_secs(3)).await;
    let records = print_tree(
        &control,
        &registry,
        &root_id,
        "the tree after the first turns",
    )
    .await;
    let Some(worker) = label_of(&records, "worker").cloned() else {
        watcher.abort();
        return Err(ControlError::new(
            ErrorCode::Internal,
            "demo: the worker child did not appear",
        ));
    };
    let worker_id = worker.header.id().clone();
    let worker_node = worker
        .placement
        .as_ref()
        .map(|p| p.node.to_string())
        .unwrap_or_default();

    println!();
    println!("── killing {worker_node} (SIGKILL), which hosts the worker mid-turn");
    if let Some(node) = cluster.nodes.iter_mut().find(|n| n.id == worker_node) {
        node.kill();
    }
    println!("   waiting for its lease to expire ...");
    tokio::time::sleep(Duration::from_millis(3000)).await;

    println!();
    println!("── followup to the worker: a surviving node claims it (epoch +1) and resumes it from its log");
    let reply = control
        .followup(&FollowupRequest {
            session: worker_id.clone(),
            content: "please wrap up".into(),
            request_id: None,
        })
        .await?;
    println!(
        "   worker now on {}: {}",
        reply.node,
        crate::output::followup_words(&reply)
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    print_tree(
        &control,
        &registry,
        &root_id,
        "after the cold resume: worker on a new node, its settlement delivered to the root",
    )
    .await;

    println!();
    println!("── restarting {worker_node}");
    let url = cluster.nats.url();
    if let Some(node) = cluster.nodes.iter_mut().find(|n| n.id == worker_node) {
        node.start(&url)?;
    }
    cluster.wait_ready(Duration::from_secs(60)).await?;

    println!();
    println!(
        "── drain the root: admission closed for the subtree, leaves disposed first, across nodes"
    );
    let report = control
        .with_timeout(Duration::from_secs(60))
        .drain(vec![root_id.clone()])
        .await?;
    for (i, wave) in report.waves.iter().enumerate() {
        let items: Vec<String> = wave
            .iter()
            .map(|d| {
                format!(
                    "{}@{}",
                    &d.session.as_str()[d.session.as_str().len().saturating_sub(6)..],
                    d.node.as_ref().map(|n| n.as_str()).unwrap_or("-")
                )
            })
            .collect();
        println!("   wave {i}: {}", items.join("  "));
    }
    if report.truncated {
        println!(
            "   ({} disposals in all; the first {} listed)",
            report.disposed(),
            report.listed()
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    watcher.abort();
    print_tree(&control, &registry, &root_id, "after the drain").await;
    println!();
    println!("demo done: root {root_id}");
    Ok(())
}
