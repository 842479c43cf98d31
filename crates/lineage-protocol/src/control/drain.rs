//! The `drain` bodies (X1, H2): the request ([`DrainRequest`]), the live progress messages a
//! drain publishes ([`DrainProgress`]), and what it did ([`DrainReport`]: disposals wave by
//! wave, counted, the lists capped at [`DRAIN_REPORT_CAP`]).

use lineage_core::ids::{DrainId, NodeId, SessionId};
use serde::{Deserialize, Serialize};

/// `drain` (X1, H2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DrainRequest {
    /// The parents whose subtrees to drain (they are disposed too, last).
    pub roots: Vec<SessionId>,
    /// When set, the serving node publishes [`DrainProgress`] messages on
    /// `lineage.<cluster>.drain.<progress>.progress` while it drains (core NATS, best effort:
    /// subscribe before sending the request). It must be a safe subject token (ASCII letters,
    /// digits, `-`, `_`; at most 64), else the request is refused as `bad_request` and changes
    /// nothing. Absent (the default, and never serialized when `None`): no progress messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<DrainId>,
}

/// Wire version of [`DrainProgress`] messages (`"v"`).
pub const DRAIN_PROGRESS_VERSION: u64 = 1;

/// What a [`DrainProgress`] message reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DrainPhase {
    /// The plan is ready: `waves` waves of `sizes[i]` sessions, `total` in all (`wave` and
    /// `done` are 0). Sent once, before anything is stopped or disposed.
    Planned,
    /// Wave `wave` is being disposed: `done` of its `total` sessions so far. Sent when the wave
    /// starts (`done` 0), then at most once per progress interval of the serving node.
    Disposing,
    /// Wave `wave` is complete: every one of its `total` sessions is disposed (`done == total`).
    /// Sent once per wave; the next wave starts after it. A wave that fails has none (the drain's
    /// reply carries the error).
    WaveDone,
}

/// One live progress message of a drain, published on `lineage.<cluster>.drain.<drain>.progress`
/// when the [`DrainRequest`] named `progress`:
///
/// ```json
/// {"v":1,"drain":"…","phase":"planned","wave":0,"waves":3,"done":0,"total":13,"sizes":[9,3,1]}
/// {"v":1,"drain":"…","phase":"disposing","wave":0,"waves":3,"done":4,"total":9}
/// {"v":1,"drain":"…","phase":"wave_done","wave":0,"waves":3,"done":9,"total":9}
/// ```
///
/// Waves are numbered from 0 (the leaves), as in [`DrainReport::waves`]; messages of a drain
/// are published in order, all before its reply, on the serving node's connection. Best effort:
/// a message may be lost, and a drain without subscribers costs nothing but the publishes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DrainProgress {
    /// Always [`DRAIN_PROGRESS_VERSION`].
    pub v: u64,
    /// The drain, as named in the request.
    pub drain: DrainId,
    /// What this message reports.
    pub phase: DrainPhase,
    /// The wave (0 = leaves); 0 for [`DrainPhase::Planned`].
    pub wave: usize,
    /// How many waves the drain has.
    pub waves: usize,
    /// Sessions of the wave disposed so far (0 for [`DrainPhase::Planned`]).
    pub done: u64,
    /// Sessions of the wave; for [`DrainPhase::Planned`], of the whole drain.
    pub total: u64,
    /// [`DrainPhase::Planned`] only: the sessions of each wave, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sizes: Vec<u64>,
}

impl DrainProgress {
    /// The plan-ready message: one entry of `sizes` per wave.
    pub fn planned(drain: DrainId, sizes: Vec<u64>) -> Self {
        DrainProgress {
            v: DRAIN_PROGRESS_VERSION,
            drain,
            phase: DrainPhase::Planned,
            wave: 0,
            waves: sizes.len(),
            done: 0,
            total: sizes.iter().sum(),
            sizes,
        }
    }

    /// Wave `wave` of `waves` is under way: `done` of `total`.
    pub fn disposing(drain: DrainId, wave: usize, waves: usize, done: u64, total: u64) -> Self {
        DrainProgress {
            v: DRAIN_PROGRESS_VERSION,
            drain,
            phase: DrainPhase::Disposing,
            wave,
            waves,
            done,
            total,
            sizes: Vec::new(),
        }
    }

    /// Wave `wave` of `waves` is complete: all `total` disposed.
    pub fn wave_done(drain: DrainId, wave: usize, waves: usize, total: u64) -> Self {
        DrainProgress {
            v: DRAIN_PROGRESS_VERSION,
            drain,
            phase: DrainPhase::WaveDone,
            wave,
            waves,
            done: total,
            total,
            sizes: Vec::new(),
        }
    }
}

/// How one session was disposed by a drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DisposalKind {
    /// Live on a node: released there (turn cancelled, settled), then disposed in the registry.
    Released,
    /// Cold, or its node is dead (lease expired): disposed straight from the registry.
    RegistryOnly,
    /// It was already disposed (idempotent outcome).
    AlreadyDisposed,
}

/// One disposal of a drain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Disposal {
    /// The session.
    pub session: SessionId,
    /// The node that hosted it, if it was live.
    pub node: Option<NodeId>,
    /// How.
    pub kind: DisposalKind,
}

/// The most disposals a [`DrainReport`] lists one by one (and the most closed ids it lists):
/// past it, the report carries counts only, so the control reply stays far below NATS'
/// max_payload (1 MiB) whatever the size of the drained trees (1,000 disposals are ~120 KB).
pub const DRAIN_REPORT_CAP: usize = 1_000;

/// Disposals of a drain (or of one wave), by kind.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct DisposalCounts {
    /// [`DisposalKind::Released`].
    pub released: u64,
    /// [`DisposalKind::RegistryOnly`].
    pub registry_only: u64,
    /// [`DisposalKind::AlreadyDisposed`].
    pub already_disposed: u64,
}

impl DisposalCounts {
    /// Every disposal counted.
    pub fn total(&self) -> u64 {
        self.released + self.registry_only + self.already_disposed
    }

    /// Counts one disposal.
    pub fn add(&mut self, kind: DisposalKind) {
        match kind {
            DisposalKind::Released => self.released += 1,
            DisposalKind::RegistryOnly => self.registry_only += 1,
            DisposalKind::AlreadyDisposed => self.already_disposed += 1,
        }
    }
}

/// One disposal wave of a drain, counted.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WaveSummary {
    /// The wave's disposals by kind.
    pub counts: DisposalCounts,
    /// The wave's sessions per hosting node (released there first); cold ones are not here.
    pub by_node: std::collections::BTreeMap<NodeId, u64>,
}

/// What a drain did, wave by wave (leaves first).
///
/// Counts are always complete ([`DrainReport::summary`], [`DrainReport::totals`],
/// [`DrainReport::closed_count`]); the per-session lists ([`DrainReport::closed`],
/// [`DrainReport::waves`]) stop after [`DRAIN_REPORT_CAP`] entries each, and
/// [`DrainReport::truncated`] says so.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DrainReport {
    /// Sessions whose admission was closed (sorted; the first [`DRAIN_REPORT_CAP`]).
    pub closed: Vec<SessionId>,
    /// How many sessions had their admission closed.
    #[serde(default)]
    pub closed_count: u64,
    /// Disposal waves; wave 0 holds the leaves. One list per wave, in disposal order (a wave's
    /// sessions were disposed concurrently: within a wave the order is the order of
    /// acknowledgement); in all, at most the first [`DRAIN_REPORT_CAP`] disposals: the lists of
    /// later waves are cut short or empty when [`DrainReport::truncated`].
    pub waves: Vec<Vec<Disposal>>,
    /// Per wave (as many as `waves`), complete counts.
    #[serde(default)]
    pub summary: Vec<WaveSummary>,
    /// Every disposal of the drain, by kind.
    #[serde(default)]
    pub totals: DisposalCounts,
    /// True when `closed` or `waves` leave sessions out (counts are still complete).
    #[serde(default)]
    pub truncated: bool,
    /// Problems that did not stop the drain (an unreachable node: its sessions were disposed
    /// from the registry), one line each.
    pub warnings: Vec<String>,
}

impl DrainReport {
    /// How many sessions the drain disposed (or found disposed), every wave.
    pub fn disposed(&self) -> u64 {
        self.totals.total()
    }

    /// How many disposals `waves` lists one by one.
    pub fn listed(&self) -> usize {
        self.waves.iter().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = "01936c1e-7a3b-7cde-8f00-000000000001";

    #[test]
    fn x1_n3_drain_request_progress_is_optional_and_a_subject_token() {
        let old: DrainRequest = serde_json::from_str(&format!(r#"{{"roots":["{ROOT}"]}}"#))
            .expect("a request without progress");
        assert_eq!(old.progress, None);
        // Not serialized when absent: the bytes are what older nodes accept.
        assert_eq!(
            serde_json::to_string(&old).unwrap(),
            format!(r#"{{"roots":["{ROOT}"]}}"#)
        );
        let with: DrainRequest =
            serde_json::from_str(&format!(r#"{{"roots":["{ROOT}"],"progress":"d-1"}}"#)).unwrap();
        assert_eq!(with.progress.as_ref().map(DrainId::as_str), Some("d-1"));
        for bad in ["a.b", "*", ">", "", "a b"] {
            let body = serde_json::json!({"roots": [ROOT], "progress": bad}).to_string();
            let err = crate::envelope::decode_request::<DrainRequest>("drain", body.as_bytes())
                .unwrap_err();
            assert_eq!(err.code, crate::envelope::ErrorCode::BadRequest);
            assert!(err.message.contains("drain id"), "{}", err.message);
            assert!(!err.message.contains('\n'), "{}", err.message);
        }
    }

    #[test]
    fn x1_n3_drain_progress_messages_are_pinned() {
        let d = DrainId::parse("d-1").unwrap();
        assert_eq!(
            serde_json::to_string(&DrainProgress::planned(d.clone(), vec![9, 3, 1])).unwrap(),
            r#"{"v":1,"drain":"d-1","phase":"planned","wave":0,"waves":3,"done":0,"total":13,"sizes":[9,3,1]}"#
        );
        assert_eq!(
            serde_json::to_string(&DrainProgress::disposing(d.clone(), 0, 3, 4, 9)).unwrap(),
            r#"{"v":1,"drain":"d-1","phase":"disposing","wave":0,"waves":3,"done":4,"total":9}"#
        );
        let done = DrainProgress::wave_done(d, 2, 3, 1);
        let text = serde_json::to_string(&done).unwrap();
        assert_eq!(
            text,
            r#"{"v":1,"drain":"d-1","phase":"wave_done","wave":2,"waves":3,"done":1,"total":1}"#
        );
        assert_eq!(serde_json::from_str::<DrainProgress>(&text).unwrap(), done);
    }
}
