//! `lineage agents` (T4): the agent profiles each live node offers, from its per-node
//! `agents` endpoint. Names, drivers and descriptions only: a node never tells its command
//! lines or environment.

use std::time::Duration;

use lineage_bus::control::{self, ControlError};
use lineage_host::control::{ops, AgentsReply, AgentsRequest};
use lineage_registry::{Consistency, RegistryClient};
use serde_json::json;

use crate::cli::Global;
use crate::commands::{cluster, connect, now_ms, print_json, registry_error, subjects};

/// Prints, per node with a live lease, its profiles and whether it takes raw command lines.
pub(crate) async fn agents(g: &Global) -> Result<(), ControlError> {
    let client = connect(g).await?;
    let registry = RegistryClient::new(client.clone(), cluster(g));
    let nodes = registry
        .nodes(Consistency::Linearizable)
        .await
        .map_err(registry_error)?;
    let subjects = subjects(g)?;
    let now = now_ms();
    let mut rows = Vec::new();
    for n in nodes.iter().filter(|n| n.lease_expires_at_ms > now) {
        let reply: Result<AgentsReply, ControlError> = control::request(
            &client,
            subjects.node_control(&n.node, ops::AGENTS),
            &AgentsRequest {},
            Duration::from_millis(g.timeout_ms.min(5_000)),
        )
        .await;
        rows.push((n.node.to_string(), reply));
    }
    if g.json {
        let items: Vec<_> = rows
            .iter()
            .map(|(node, reply)| match reply {
                Ok(r) => json!({"node": node, "allow_raw_commands": r.allow_raw_commands, "profiles": r.profiles}),
                Err(e) => json!({"node": node, "error": e}),
            })
            .collect();
        print_json(&items);
        return Ok(());
    }
    for (node, reply) in rows {
        match reply {
            Ok(r) => {
                let raw = if r.allow_raw_commands {
                    "   (takes raw command lines: development only)"
                } else {
                    ""
                };
                println!("{node}{raw}");
                for p in r.profiles {
                    let tools = if p.tools { "tools" } else { "-" };
                    println!(
                        "  {:20} {:6} {:5}  {}",
                        p.name,
                        p.driver.as_str(),
                        tools,
                        p.description
                    );
                }
            }
            Err(e) => println!("{node}  (no answer: {})", e.message),
        }
    }
    Ok(())
}
