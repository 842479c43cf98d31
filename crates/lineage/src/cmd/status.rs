//! `lineage status`: leader, voters, nodes with lease age and live agents, sessions by state.

use std::collections::BTreeMap;
use std::time::Duration;

use lineage_bus::control::ControlError;
use lineage_registry::{Consistency, RegistryClient};
use serde_json::json;

use crate::client::{control, now_ms, print_json, registry_error};
use crate::global::cluster;
use crate::global::Global;

/// What `lineage status` reads: the registry's status, nodes and session counts, and what each
/// node hosts.
struct Status {
    cluster: String,
    raft: lineage_registry::wire::RegistryStatus,
    nodes: Vec<lineage_registry::types::NodeRecord>,
    counts: BTreeMap<String, u64>,
    /// Per node: (live agents, of which in a turn), when it answered.
    live: BTreeMap<String, Option<(usize, usize)>>,
    now: u64,
}

impl Status {
    fn json(&self) -> serde_json::Value {
        let (now, live) = (self.now, &self.live);
        json!({
            "cluster": self.cluster,
            "registry": self.raft,
            "nodes": self.nodes.iter().map(|n| json!({
                "node": n.node,
                "lease_expires_at_ms": n.lease_expires_at_ms,
                "last_heartbeat_age_ms": now.saturating_sub(n.last_heartbeat_ms),
                "lease_live": n.lease_expires_at_ms > now,
                "live_agents": live.get(n.node.as_str()).cloned().flatten().map(|(all, _)| all),
                "in_turn": live.get(n.node.as_str()).cloned().flatten().map(|(_, busy)| busy),
            })).collect::<Vec<_>>(),
            "sessions": self.counts,
        })
    }
}

/// `lineage status --json`'s answer (what `lineage ui`'s cluster page shows).
pub(crate) async fn status_json(g: &Global) -> Result<serde_json::Value, ControlError> {
    Ok(read(g).await?.json())
}

async fn read(g: &Global) -> Result<Status, ControlError> {
    let control = control(g).await?;
    let registry = RegistryClient::new(control.nats().clone(), cluster(g));
    let raft = registry
        .status(Consistency::Linearizable)
        .await
        .map_err(registry_error)?;
    let nodes = registry
        .nodes(Consistency::Linearizable)
        .await
        .map_err(registry_error)?;
    let counts = registry
        .session_counts(Consistency::Linearizable)
        .await
        .map_err(registry_error)?;
    let now = now_ms();
    let subjects = control.subjects().clone();
    let per_node = control.with_timeout(Duration::from_millis(1000));
    let mut live = BTreeMap::new();
    for n in &nodes {
        let reply = per_node.on(&n.node).status().await;
        let counts = reply.map(|r| (r.live.len(), r.live.iter().filter(|a| a.in_turn).count()));
        live.insert(n.node.to_string(), counts.ok());
    }
    Ok(Status {
        cluster: subjects.cluster().to_owned(),
        raft,
        nodes,
        counts,
        live,
        now,
    })
}

/// Reads the status and prints it.
pub(crate) async fn run(g: &Global) -> Result<(), ControlError> {
    let status = read(g).await?;
    if g.json {
        print_json(&status.json());
    } else {
        let Status {
            cluster,
            raft,
            nodes,
            counts,
            live,
            now,
        } = status;
        println!("cluster   {cluster}");
        println!(
            "leader    {}   term {}   applied {}",
            raft.leader
                .map(|l| l.to_string())
                .unwrap_or_else(|| "none".into()),
            raft.term,
            raft.last_applied
                .map(|a| a.to_string())
                .unwrap_or_else(|| "-".into())
        );
        println!("voters    {:?}", raft.voters);
        println!("learners  {:?}", raft.learners);
        println!("nodes");
        for n in &nodes {
            let lease = if n.lease_expires_at_ms > now {
                "live"
            } else {
                "expired"
            };
            println!(
                "  {:12} lease {:7}  last heartbeat {:>6} ms ago  live agents {}",
                n.node.as_str(),
                lease,
                now.saturating_sub(n.last_heartbeat_ms),
                live.get(n.node.as_str())
                    .cloned()
                    .flatten()
                    .map(|(all, busy)| format!("{all} ({busy} in a turn, {} idle)", all - busy))
                    .unwrap_or_else(|| "?".into())
            );
        }
        let line: Vec<String> = counts.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("sessions  {}", line.join(" "));
    }
    Ok(())
}
