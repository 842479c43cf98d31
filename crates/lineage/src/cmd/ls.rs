//! `lineage ls`: sessions listed and searched from the registry's indexes (Q4), paged.

use lineage_bus::control::ControlError;
use lineage_core::ids::NodeId;
use lineage_registry::listing::{label_of, ListCursor, ListFilter, LIST_PAGE_MAX};
use lineage_registry::{Consistency, RegistryClient, SessionRecord, SessionState};
use serde_json::json;

use super::tree::{age, shape_of};
use crate::client::{connect, now_ms, parse_session, print_json, registry_error};
use crate::global::cluster;
use crate::global::Global;
use crate::output::usage;

/// `ls` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only sessions of this tree (its root included).
    #[arg(long)]
    pub root: Option<String>,
    /// Only direct children of this session.
    #[arg(long)]
    pub parent: Option<String>,
    /// Only sessions in this state: starting, running, waiting, settled or disposed.
    #[arg(long)]
    pub state: Option<String>,
    /// Only sessions placed on this node.
    #[arg(long)]
    pub node: Option<String>,
    /// Only sessions whose descriptor's label is exactly this.
    #[arg(long)]
    pub label: Option<String>,
    /// Only sessions registered longer ago than this: a number with ms, s, m, h or d (`90s`,
    /// `10m`, `2h`).
    #[arg(long, value_name = "AGE")]
    pub older_than: Option<String>,
    /// At most this many sessions (1..=1000).
    #[arg(long, default_value_t = 50)]
    pub limit: u32,
    /// Go on from a previous page: its `next` cursor.
    #[arg(long, value_name = "CURSOR")]
    pub after: Option<String>,
    /// Every page, not just one (`--limit` is then the page size).
    #[arg(long)]
    pub all: bool,
}

/// Parses an age such as `90s`, `10m`, `2h`, `1d` or `1500ms` into ms; one line on error.
pub(crate) fn parse_age(raw: &str) -> Result<u64, String> {
    let bad = || {
        format!(
            "--older-than {raw:?} is not an age; write a number with ms, s, m, h or d, e.g. 10m"
        )
    };
    let split = raw.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = raw.split_at(split);
    let number: u64 = number.parse().map_err(|_| bad())?;
    let scale: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad()),
    };
    number.checked_mul(scale).ok_or_else(bad)
}

fn parse_state(raw: &str) -> Result<SessionState, String> {
    SessionState::ALL
        .into_iter()
        .find(|s| s.as_str() == raw)
        .ok_or_else(|| {
            format!("--state {raw:?} is not a state; use starting, running, waiting, settled or disposed")
        })
}

/// The filter the flags describe, with ages turned into times by `now`.
fn filter_of(args: &Args, now: u64) -> Result<ListFilter, ControlError> {
    Ok(ListFilter {
        root: args
            .root
            .as_deref()
            .map(|r| parse_session("--root", r))
            .transpose()?,
        parent: args
            .parent
            .as_deref()
            .map(|p| parse_session("--parent", p))
            .transpose()?,
        state: args
            .state
            .as_deref()
            .map(parse_state)
            .transpose()
            .map_err(usage)?,
        node: args
            .node
            .as_deref()
            .map(|n| NodeId::parse(n).map_err(|e| usage(format!("--node: {e}"))))
            .transpose()?,
        label: args.label.clone(),
        created_before_ms: args
            .older_than
            .as_deref()
            .map(parse_age)
            .transpose()
            .map_err(usage)?
            .map(|age| now.saturating_sub(age)),
    })
}

fn row(r: &SessionRecord, now: u64) -> String {
    let label = label_of(r).unwrap_or(std::borrow::Cow::Borrowed("-"));
    let node = r
        .placement
        .as_ref()
        .map(|p| p.node.to_string())
        .unwrap_or_else(|| "-".into());
    let parent = r
        .header
        .parent_session()
        .map(|p| p.to_string())
        .unwrap_or_else(|| "-".into());
    format!(
        "{}  {:<8}  {:<11}  depth={}  node={}  label={}  age={}  parent={}",
        r.header.id(),
        r.state.as_str(),
        shape_of(r),
        r.depth(),
        node,
        label,
        age(now.saturating_sub(r.created_at_ms)),
        parent
    )
}

fn item(r: &SessionRecord) -> serde_json::Value {
    json!({
        "session": r.header.id(),
        "root": r.header.root_session(),
        "parent": r.header.parent_session(),
        "shape": shape_of(r),
        "state": r.state.as_str(),
        "depth": r.depth(),
        "node": r.placement.as_ref().map(|p| p.node.to_string()),
        "label": label_of(r),
        "created_at_ms": r.created_at_ms,
        "updated_at_ms": r.updated_at_ms,
    })
}

/// One page of `args` (or, with `--all`, every page) as `lineage ls --json` prints it (and
/// `lineage ui` lists it).
pub(crate) async fn ls_json(g: &Global, args: &Args) -> Result<serde_json::Value, ControlError> {
    let (sessions, next) = read(g, args).await?;
    Ok(page_json(&sessions, next.as_ref()))
}

fn page_json(sessions: &[SessionRecord], next: Option<&ListCursor>) -> serde_json::Value {
    json!({
        "sessions": sessions.iter().map(item).collect::<Vec<_>>(),
        "next": next.map(ToString::to_string),
    })
}

/// Reads one page (or, with `--all`, every page) from the registry, linearizable.
async fn read(
    g: &Global,
    args: &Args,
) -> Result<(Vec<SessionRecord>, Option<ListCursor>), ControlError> {
    if args.limit == 0 || args.limit > LIST_PAGE_MAX {
        return Err(usage(format!(
            "--limit {} is out of range; use 1..={LIST_PAGE_MAX}",
            args.limit
        )));
    }
    let filter = filter_of(args, now_ms())?;
    let mut after = args
        .after
        .as_deref()
        .map(str::parse::<ListCursor>)
        .transpose()
        .map_err(|e| usage(format!("--after: {e}")))?;
    let registry = RegistryClient::new(connect(g).await?, cluster(g));
    let mut sessions = Vec::new();
    let next = loop {
        let (page, next) = registry
            .list_page(filter.clone(), after, args.limit, Consistency::Linearizable)
            .await
            .map_err(registry_error)?;
        sessions.extend(page);
        match next {
            Some(cursor) if args.all || sessions.is_empty() => after = Some(cursor),
            other => break other,
        }
    };
    Ok((sessions, next))
}

/// Reads and prints: one line per session and the cursor of the next page, or with `--json`
/// `{"sessions": [...], "next": cursor|null}`.
pub(crate) async fn run(g: &Global, args: Args) -> Result<(), ControlError> {
    let now = now_ms();
    let (sessions, next) = read(g, &args).await?;
    if g.json {
        print_json(&page_json(&sessions, next.as_ref()));
        return Ok(());
    }
    if sessions.is_empty() {
        println!("no session matches");
    }
    for r in &sessions {
        println!("{}", row(r, now));
    }
    if let Some(next) = next {
        println!("more: add --after {next}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_ages_are_parsed_with_their_unit_and_a_bad_one_is_one_line() {
        assert_eq!(parse_age("1500ms"), Ok(1_500));
        assert_eq!(parse_age("90s"), Ok(90_000));
        assert_eq!(parse_age("10m"), Ok(600_000));
        assert_eq!(parse_age("2h"), Ok(7_200_000));
        assert_eq!(parse_age("1d"), Ok(86_400_000));
        for bad in ["", "10", "m", "10x", "-5s", "1.5h", "99999999999999999999d"] {
            let err = parse_age(bad).unwrap_err();
            assert!(
                err.contains("write a number with ms, s, m, h or d"),
                "{err}"
            );
            assert!(!err.contains('\n'));
        }
    }

    #[test]
    fn q4_states_are_named_as_on_the_wire() {
        for state in SessionState::ALL {
            assert_eq!(parse_state(state.as_str()), Ok(state));
        }
        let err = parse_state("alive").unwrap_err();
        assert!(err.contains("use starting, running, waiting, settled or disposed"));
    }
}
