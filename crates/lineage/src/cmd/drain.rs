//! `lineage drain`: close admission, stop descendants, dispose leaves first (X1, H2), with
//! live per-wave bars on a terminal.

use std::time::Duration;

use lineage_bus::control::{ControlError, ErrorCode};
use lineage_bus::ControlClient;
use lineage_core::ids::{DrainId, SessionId};
use lineage_protocol::control::DrainReport;

use crate::client::{control, parse_session, print_json};
use crate::global::Global;

/// `drain` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Roots of the subtrees to drain.
    #[arg(required = true)]
    pub roots: Vec<String>,
}

/// Sends the drain (with live bars on a terminal) and prints the report.
pub(crate) async fn run(g: &Global, args: Args) -> Result<(), ControlError> {
    let roots: Vec<SessionId> = args
        .roots
        .iter()
        .map(|r| parse_session("root", r))
        .collect::<Result<_, _>>()?;
    let started = std::time::Instant::now();
    let client = control(g)
        .await?
        .with_timeout(Duration::from_millis(g.timeout_ms.max(60_000)));
    // Live bars only for a person watching: not with --json, not when stderr is a pipe or file.
    let live = !g.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let report = if live {
        drain_live(&client, roots).await?
    } else {
        client.drain(roots).await?
    };
    if g.json {
        print_json(&report);
    } else {
        // Per-wave counts come from the summary: they are complete even when the per-session
        // lists are capped (`truncated`).
        for (i, wave) in report.summary.iter().enumerate() {
            let total = wave.counts.total();
            let hosted: u64 = wave.by_node.values().sum();
            let mut nodes: Vec<String> = wave
                .by_node
                .iter()
                .map(|(n, c)| format!("{n}:{c}"))
                .collect();
            if total > hosted {
                nodes.push(format!("{} not hosted", total - hosted));
            }
            let bar = "#".repeat(usize::try_from(total).unwrap_or(usize::MAX).min(40));
            println!(
                "wave {i:>2} [{bar:<40}] {total:>5} disposed  {}",
                nodes.join(" ")
            );
        }
        let t = &report.totals;
        println!(
            "drained {} sessions in {} waves in {:.1?}: {} released by their nodes, {} not hosted (disposed in the registry), {} already disposed; {} closed to admission",
            t.released + t.registry_only,
            report.summary.len(),
            started.elapsed(),
            t.released,
            t.registry_only,
            t.already_disposed,
            report.closed_count,
        );
        if report.truncated {
            println!(
                "(the report lists the first {} disposals one by one; --json to see them)",
                report.listed()
            );
        }
        for w in &report.warnings {
            println!("warning: {w}");
        }
    }
    Ok(())
}

/// A new drain id, for a drain whose progress is followed (its progress subject's token).
pub(crate) fn new_drain_id() -> Result<DrainId, ControlError> {
    DrainId::parse(&uuid::Uuid::now_v7().to_string())
        .map_err(|e| ControlError::new(ErrorCode::Internal, format!("drain id: {e}")))
}

/// The drain with live progress: mints a drain id and draws each progress message on stderr
/// ([`crate::progress::LiveBars`]) until the reply arrives ([`ControlClient::drain_with_progress`]
/// subscribes first, and drains without progress when it cannot); then it ends an open line.
async fn drain_live(
    client: &ControlClient,
    roots: Vec<SessionId>,
) -> Result<DrainReport, ControlError> {
    use std::io::Write;
    let id = new_drain_id()?;
    let mut bars = crate::progress::LiveBars::new();
    let draw = |text: String| {
        if !text.is_empty() {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(text.as_bytes());
            let _ = err.flush();
        }
    };
    let outcome = client
        .drain_with_progress(roots, id, |msg| draw(bars.apply_decoded(msg)))
        .await;
    draw(bars.finish());
    outcome
}
