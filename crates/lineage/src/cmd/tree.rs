//! `lineage tree`: a subtree from the registry, with who is live where (R1, R2).

use std::collections::BTreeMap;
use std::time::Duration;

use lineage_bus::control::{ControlError, ErrorCode};
use lineage_bus::ControlClient;
use lineage_core::ids::{NodeId, SessionId};
use lineage_core::usage::UsageTotal;
use lineage_registry::listing::label_of;
use lineage_registry::{Consistency, RegistryClient, SessionRecord, SessionState};
use serde_json::json;

use crate::client::{control, now_ms, parse_session, print_json, registry_error};
use crate::global::cluster;
use crate::global::Global;

/// `tree` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The subtree's root.
    pub root: String,
}

/// What a hosting node says of one of its live agents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LiveView {
    /// Its runtime owner (R1, R2).
    pub owner: Option<SessionId>,
    /// Whether a turn runs now (issue 37: in a turn, or idle).
    pub in_turn: bool,
}

/// Asks every node in `nodes` for its live agents; returns session -> what its node says, for
/// live ones.
pub(crate) async fn live_owners(
    client: &ControlClient,
    nodes: impl IntoIterator<Item = NodeId>,
) -> BTreeMap<SessionId, LiveView> {
    let mut out = BTreeMap::new();
    let client = client.with_timeout(Duration::from_millis(1500));
    for node in nodes {
        let reply = client.on(&node).status().await;
        if let Ok(reply) = reply {
            for agent in reply.live {
                let view = LiveView {
                    owner: agent.owner,
                    in_turn: agent.in_turn,
                };
                out.insert(agent.session, view);
            }
        }
    }
    out
}

pub(crate) fn shape_of(record: &SessionRecord) -> String {
    record
        .descriptor
        .as_ref()
        .and_then(|d| d.mode())
        .map(std::borrow::Cow::into_owned)
        .unwrap_or_else(|| {
            if record.header.parent_session().is_none() {
                "root".into()
            } else {
                "-".into()
            }
        })
}

pub(crate) fn age(ms: u64) -> String {
    let s = ms / 1000;
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{}h{}m", s / 3600, (s % 3600) / 60)
    }
}

/// The usage of every session's subtree (itself included), summed from the records' usage
/// (Q3; a session with no report and no reporting descendant has none).
pub(crate) fn subtree_usage(records: &[SessionRecord]) -> BTreeMap<SessionId, UsageTotal> {
    let by_id: BTreeMap<&SessionId, &SessionRecord> =
        records.iter().map(|r| (r.header.id(), r)).collect();
    let mut totals: BTreeMap<SessionId, UsageTotal> = BTreeMap::new();
    for r in records {
        let Some(usage) = &r.usage else { continue };
        // Up the parent chain, within the records (bounded by their number).
        let mut at = Some(r);
        for _ in 0..records.len() {
            let Some(here) = at else { break };
            totals
                .entry(here.header.id().clone())
                .or_default()
                .add(usage);
            at = here
                .header
                .parent_session()
                .and_then(|p| by_id.get(p).copied());
        }
    }
    totals
}

/// Renders a subtree (parents before children) as indented lines.
pub(crate) fn render_tree(
    records: &[SessionRecord],
    owners: &BTreeMap<SessionId, LiveView>,
    now: u64,
) -> Vec<String> {
    let by_id: BTreeMap<&SessionId, &SessionRecord> =
        records.iter().map(|r| (r.header.id(), r)).collect();
    let mut lines = Vec::new();
    let usage = subtree_usage(records);
    let roots: Vec<&SessionRecord> = records
        .iter()
        .filter(|r| {
            r.header
                .parent_session()
                .is_none_or(|p| !by_id.contains_key(p))
        })
        .collect();
    struct View<'a> {
        by_id: BTreeMap<&'a SessionId, &'a SessionRecord>,
        owners: &'a BTreeMap<SessionId, LiveView>,
        usage: BTreeMap<SessionId, UsageTotal>,
        now: u64,
    }
    fn walk(r: &SessionRecord, prefix: &str, v: &View<'_>, lines: &mut Vec<String>) {
        let (by_id, owners, now) = (&v.by_id, v.owners, v.now);
        let live = owners.get(r.header.id());
        let owner = match live.and_then(|l| l.owner.as_ref()) {
            Some(o) => short(o.as_str()),
            None => "-".into(),
        };
        let activity = match live {
            Some(LiveView { in_turn: true, .. }) => "  activity=in-turn",
            Some(LiveView { in_turn: false, .. }) => "  activity=idle",
            None => "",
        };
        let node = r
            .placement
            .as_ref()
            .map(|p| format!("{}@{}", p.node, p.epoch))
            .unwrap_or_else(|| "-".into());
        let usage = v
            .usage
            .get(r.header.id())
            .map(|u| format!("  usage={}", u.render()))
            .unwrap_or_default();
        // Q2: how long it has left (only while it is not disposed).
        let deadline = match (r.header.deadline_at_ms(), r.state) {
            (Some(_), SessionState::Disposed) | (None, _) => String::new(),
            (Some(at), _) if at <= now => "  deadline=passed".to_owned(),
            (Some(at), _) => format!("  deadline=in {}", age(at - now)),
        };
        let label = label_of(r).unwrap_or(std::borrow::Cow::Borrowed("-"));
        // Why it ended, once settled or disposed (a drain's reason, or its settlement's).
        let stop = r
            .stop_reason
            .map(|s| format!("  stop={}", s.as_str()))
            .unwrap_or_default();
        lines.push(format!(
            "{prefix}{}  {}  {}  depth={}  node={}  owner={}  label={}  age={}{stop}{activity}{usage}{deadline}",
            r.header.id(),
            shape_of(r),
            r.state.as_str(),
            r.header.delegation_depth().unwrap_or(0),
            node,
            owner,
            label,
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
            walk(kid, &format!("{child_prefix}{branch}"), v, lines);
        }
    }
    let view = View {
        by_id,
        owners,
        usage,
        now,
    };
    for root in roots {
        walk(root, "", &view, &mut lines);
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

/// The subtree of `root` as `lineage tree --json` prints it (and `lineage ui` draws it).
pub(crate) async fn tree_json(g: &Global, root: &str) -> Result<serde_json::Value, ControlError> {
    let (records, owners) = read(g, root).await?;
    Ok(items(&records, &owners))
}

/// The subtree's records (linearizable) and who is live on their nodes.
async fn read(
    g: &Global,
    root: &str,
) -> Result<(Vec<SessionRecord>, BTreeMap<SessionId, LiveView>), ControlError> {
    let root = parse_session("root", root)?;
    let control = control(g).await?;
    let registry = RegistryClient::new(control.nats().clone(), cluster(g));
    let records = registry
        .subtree(root.clone(), Consistency::Linearizable)
        .await
        .map_err(registry_error)?;
    if records.is_empty() {
        return Err(ControlError::new(
            ErrorCode::NotFound,
            format!("session {root} is not in the registry of cluster {}; check the id (lineage ls lists the sessions) and --cluster", crate::global::cluster(g)),
        ));
    }
    let nodes: std::collections::BTreeSet<NodeId> = records
        .iter()
        .filter_map(|r| r.placement.as_ref().map(|p| p.node.clone()))
        .collect();
    let owners = live_owners(&control, nodes).await;
    Ok((records, owners))
}

fn items(records: &[SessionRecord], owners: &BTreeMap<SessionId, LiveView>) -> serde_json::Value {
    let usage = subtree_usage(records);
    let items: Vec<_> = records
        .iter()
        .map(|r| {
            json!({
                "session": r.header.id(),
                "parent": r.header.parent_session(),
                "shape": shape_of(r),
                "state": r.state.as_str(),
                "stop_reason": r.stop_reason.map(|s| s.as_str()),
                "label": label_of(r),
                "depth": r.header.delegation_depth().unwrap_or(0),
                "node": r.placement.as_ref().map(|p| p.node.to_string()),
                "epoch": r.placement.as_ref().map(|p| p.epoch),
                "live": owners.contains_key(r.header.id()),
                "owner": owners.get(r.header.id()).and_then(|l| l.owner.clone()),
                "in_turn": owners.get(r.header.id()).map(|l| l.in_turn),
                "admission": r.admission,
                "usage": r.usage,
                "subtree_usage": usage.get(r.header.id()),
                "created_at_ms": r.created_at_ms,
                "updated_at_ms": r.updated_at_ms,
                "deadline_at_ms": r.header.deadline_at_ms(),
            })
        })
        .collect();
    json!(items)
}

/// Reads the subtree from the registry (linearizable), asks the hosting nodes who is live, and
/// prints it.
pub(crate) async fn run(g: &Global, args: Args) -> Result<(), ControlError> {
    let (records, owners) = read(g, &args.root).await?;
    if g.json {
        print_json(&items(&records, &owners));
    } else {
        for line in render_tree(&records, &owners, now_ms()) {
            println!("{line}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lineage_core::header::{child_session_meta, SessionHeader};
    use lineage_core::lifecycle::SessionState;
    use lineage_core::usage::SessionUsage;

    use lineage_core::ids::sid;

    fn record(header: SessionHeader, usage: Option<(u64, u64)>) -> SessionRecord {
        SessionRecord {
            usage: usage.map(|(tokens, micros)| {
                Box::new(SessionUsage {
                    used_tokens: tokens,
                    size_tokens: None,
                    cost_micros: Some(micros),
                    currency: Some("USD".into()),
                })
            }),
            ..SessionRecord::new(header, SessionState::Running)
        }
    }

    #[test]
    fn q3_usage_is_summed_per_subtree_up_every_ancestor() {
        let root = SessionHeader::top_level(sid(1), None, None);
        let child = child_session_meta(&root, sid(2), 1, 0, None).unwrap();
        let grandchild = child_session_meta(&child, sid(3), 2, 0, None).unwrap();
        let sibling = child_session_meta(&root, sid(4), 1, 0, None).unwrap();
        let mut r1 = record(root, Some((100, 1_000)));
        r1.children = [sid(2), sid(4)].into_iter().collect();
        let mut r2 = record(child, None);
        r2.children = [sid(3)].into_iter().collect();
        let records = vec![
            r1,
            r2,
            record(grandchild, Some((30, 300))),
            record(sibling, Some((5, 50))),
        ];
        let totals = subtree_usage(&records);
        assert_eq!(totals[&sid(1)].used_tokens, 135);
        assert_eq!(totals[&sid(1)].cost_micros["USD"], 1_350);
        assert_eq!(totals[&sid(1)].sessions, 3);
        assert_eq!(
            totals[&sid(2)].used_tokens,
            30,
            "a child without a report sums its subtree"
        );
        assert_eq!(totals[&sid(3)].used_tokens, 30);
        assert_eq!(totals[&sid(4)].used_tokens, 5);
        let lines = render_tree(&records, &BTreeMap::new(), 0);
        assert!(lines[0].contains("  label=-  "), "no label: {lines:?}");
        assert!(
            lines[0].ends_with("usage=135 tokens, 0.001350 USD"),
            "{lines:?}"
        );
    }
}
