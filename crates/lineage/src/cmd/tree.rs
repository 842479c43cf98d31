//! `lineage tree`: a subtree from the registry, with who is live where (R1, R2).

use std::collections::BTreeMap;
use std::time::Duration;

use lineage_bus::control::{ControlError, ErrorCode};
use lineage_bus::ControlClient;
use lineage_core::ids::{NodeId, SessionId};
use lineage_registry::{Consistency, RegistryClient, SessionRecord};
use serde_json::json;

use super::{cluster, control, now_ms, parse_session, print_json, registry_error};
use crate::cli::Global;

/// `tree` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The subtree's root.
    pub root: String,
}

/// Asks every node in `nodes` for its live agents; returns session -> (owner) for live ones.
pub(crate) async fn live_owners(
    client: &ControlClient,
    nodes: impl IntoIterator<Item = NodeId>,
) -> BTreeMap<SessionId, Option<SessionId>> {
    let mut out = BTreeMap::new();
    let client = client.with_timeout(Duration::from_millis(1500));
    for node in nodes {
        let reply = client.on(&node).status().await;
        if let Ok(reply) = reply {
            for agent in reply.live {
                out.insert(agent.session, agent.owner);
            }
        }
    }
    out
}

fn shape_of(record: &SessionRecord) -> String {
    record
        .descriptor
        .as_ref()
        .and_then(|d| d.get("mode"))
        .and_then(|m| m.as_str())
        .map(str::to_owned)
        .unwrap_or_else(|| {
            if record.header.parent_session().is_none() {
                "root".into()
            } else {
                "-".into()
            }
        })
}

fn age(ms: u64) -> String {
    let s = ms / 1000;
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{}h{}m", s / 3600, (s % 3600) / 60)
    }
}

/// Renders a subtree (parents before children) as indented lines.
pub(crate) fn render_tree(
    records: &[SessionRecord],
    owners: &BTreeMap<SessionId, Option<SessionId>>,
    now: u64,
) -> Vec<String> {
    let by_id: BTreeMap<&SessionId, &SessionRecord> =
        records.iter().map(|r| (r.header.id(), r)).collect();
    let mut lines = Vec::new();
    let roots: Vec<&SessionRecord> = records
        .iter()
        .filter(|r| {
            r.header
                .parent_session()
                .is_none_or(|p| !by_id.contains_key(p))
        })
        .collect();
    fn walk(
        r: &SessionRecord,
        prefix: &str,
        by_id: &BTreeMap<&SessionId, &SessionRecord>,
        owners: &BTreeMap<SessionId, Option<SessionId>>,
        now: u64,
        lines: &mut Vec<String>,
    ) {
        let owner = match owners.get(r.header.id()) {
            Some(Some(o)) => short(o.as_str()),
            Some(None) => "-".into(),
            None => "-".into(),
        };
        let node = r
            .placement
            .as_ref()
            .map(|p| format!("{}@{}", p.node, p.epoch))
            .unwrap_or_else(|| "-".into());
        lines.push(format!(
            "{prefix}{}  {}  {}  depth={}  node={}  owner={}  age={}",
            r.header.id(),
            shape_of(r),
            r.state.as_str(),
            r.header.delegation_depth().unwrap_or(0),
            node,
            owner,
            age(now.saturating_sub(r.created_at_ms))
        ));
        let child_prefix = format!("{}  ", prefix.replace("└─", "  ").replace("├─", "│ "));
        let kids: Vec<&&SessionRecord> = r.children.iter().filter_map(|c| by_id.get(c)).collect();
        for (i, kid) in kids.iter().enumerate() {
            let branch = if i + 1 == kids.len() {
                "└─ "
            } else {
                "├─ "
            };
            walk(
                kid,
                &format!("{child_prefix}{branch}"),
                by_id,
                owners,
                now,
                lines,
            );
        }
    }
    for root in roots {
        walk(root, "", &by_id, owners, now, &mut lines);
    }
    lines
}

fn short(id: &str) -> String {
    id.chars()
        .rev()
        .take(8)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect()
}

/// Reads the subtree from the registry (linearizable), asks the hosting nodes who is live, and
/// prints it.
pub(crate) async fn run(g: &Global, args: Args) -> Result<(), ControlError> {
    let root = parse_session("root", &args.root)?;
    let control = control(g).await?;
    let registry = RegistryClient::new(control.nats().clone(), cluster(g));
    let records = registry
        .subtree(root.clone(), Consistency::Linearizable)
        .await
        .map_err(registry_error)?;
    if records.is_empty() {
        return Err(ControlError::new(
            ErrorCode::NotFound,
            format!("session {root} is not in the registry; check the id with `lineage status`"),
        ));
    }
    let nodes: std::collections::BTreeSet<NodeId> = records
        .iter()
        .filter_map(|r| r.placement.as_ref().map(|p| p.node.clone()))
        .collect();
    let owners = live_owners(&control, nodes).await;
    if g.json {
        let items: Vec<_> = records
            .iter()
            .map(|r| {
                json!({
                    "session": r.header.id(),
                    "parent": r.header.parent_session(),
                    "shape": shape_of(r),
                    "state": r.state.as_str(),
                    "depth": r.header.delegation_depth().unwrap_or(0),
                    "node": r.placement.as_ref().map(|p| p.node.to_string()),
                    "epoch": r.placement.as_ref().map(|p| p.epoch),
                    "live": owners.contains_key(r.header.id()),
                    "owner": owners.get(r.header.id()).cloned().flatten(),
                    "admission": r.admission,
                    "created_at_ms": r.created_at_ms,
                    "updated_at_ms": r.updated_at_ms,
                })
            })
            .collect();
        print_json(&items);
    } else {
        for line in render_tree(&records, &owners, now_ms()) {
            println!("{line}");
        }
    }
    Ok(())
}
