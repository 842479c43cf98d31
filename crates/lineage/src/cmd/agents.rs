//! `lineage agents` (T4): the agent profiles each live node offers, from its per-node
//! `agents` endpoint: names, drivers, whether they get lineage's tools and are offered over
//! A2A (`lineage a2a`), descriptions. A node never tells its command lines, URLs or environment.

use std::time::Duration;

use lineage_bus::control::ControlError;
use lineage_registry::{Consistency, RegistryClient};
use serde_json::json;

use crate::client::{control, now_ms, print_json, registry_error};
use crate::global::cluster;
use crate::global::Global;

/// Prints, per node with a live lease, its profiles and whether it takes raw command lines.
pub(crate) async fn run(g: &Global) -> Result<(), ControlError> {
    let control = control(g).await?;
    let registry = RegistryClient::new(control.nats().clone(), cluster(g));
    let nodes = registry
        .nodes(Consistency::Linearizable)
        .await
        .map_err(registry_error)?;
    let per_node = control.with_timeout(Duration::from_millis(g.timeout_ms.min(5_000)));
    let now = now_ms();
    let mut rows = Vec::new();
    for n in nodes.iter().filter(|n| n.lease_expires_at_ms > now) {
        let reply = per_node.on(&n.node).agents().await;
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
                    // Offered over A2A by `lineage a2a` (issue 38).
                    let a2a = if p.a2a { "a2a" } else { "-" };
                    println!(
                        "  {:20} {:6} {:5} {:3}  {}",
                        p.name,
                        p.driver.as_str(),
                        tools,
                        a2a,
                        p.description
                    );
                }
            }
            Err(e) => println!("{node}  (no answer: {})", e.message),
        }
    }
    Ok(())
}
