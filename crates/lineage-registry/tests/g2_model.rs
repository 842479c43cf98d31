//! G2: model-based test. Random command sequences go to the real `RegistryState` and to a tiny
//! reference model written separately here; both must agree on every result (accepted or
//! refused, and which rule) and on the final state, idempotency table included. The callers'
//! clock advances by steps around the retention window, so stored results are pruned and
//! retries after the window are evaluated as new commands.

use std::collections::{BTreeMap, BTreeSet};

use lineage_core::depth::MaxDepth;
use lineage_core::header::SessionHeader;
use lineage_core::ids::{NodeId, RequestId, RunId, SessionId};
use lineage_registry::state::{MIN_RESULTS_KEPT_MS, REQUEST_RETENTION_MS};
use lineage_registry::{Admission, Command, CommandResponse, RegistryState, SessionState};
use proptest::prelude::*;
use serde_json::json;

#[path = "g2_model/model.rs"]
mod model;
use model::*;

const IDS: u8 = 6;
/// The run a resuming claim records.
const RUN: &str = "01ARZ3NDEKTSV4RRFFQ69G5FAV";

fn sid(n: u8) -> SessionId {
    SessionId::parse(&format!("01936c1e-7a3b-7cde-8f00-{:012}", n)).unwrap()
}
fn node(n: u8) -> NodeId {
    NodeId::parse(&format!("n{n}")).unwrap()
}
fn req(n: u8) -> RequestId {
    RequestId::parse(&format!("q{n}")).unwrap()
}

#[derive(Debug, Clone)]
enum Op {
    Register {
        req: u8,
        id: u8,
        parent: Option<u8>,
        max: Option<u8>,
        bump: bool,
        wrong_root: Option<u8>,
    },
    Claim {
        req: u8,
        id: u8,
        node: u8,
        expected: u8,
        /// A cold resume's claim: also a new run and state `running`, in the same write.
        activate: bool,
    },
    SetState {
        req: u8,
        id: u8,
        state: u8,
        /// Fencing: the placement epoch the writer holds, if it says.
        fence: Option<u8>,
    },
    Close {
        req: u8,
        ids: Vec<u8>,
    },
    Dispose {
        req: u8,
        id: u8,
    },
    /// The hosting node confirms a start (`starting -> running`).
    Confirm {
        req: u8,
        id: u8,
        node: u8,
        expected: u8,
    },
    Heartbeat {
        req: u8,
        node: u8,
        at: u8,
        lease: u8,
    },
    /// The sweeper forgets the results kept longer than `KEPT[kept]`.
    Forget {
        req: u8,
        kept: u8,
    },
    /// The callers' clock moves on (no command).
    Advance {
        step: u8,
    },
}

/// Clock steps: none, 1 ms, half the window, exactly the window, just past it.
const STEPS: [u64; 5] = [
    0,
    1,
    REQUEST_RETENTION_MS / 2,
    REQUEST_RETENTION_MS,
    REQUEST_RETENTION_MS + 1,
];

/// What a forget keeps: too short (refused), the shortest window, a few hours.
const KEPT: [u64; 3] = [
    MIN_RESULTS_KEPT_MS - 1,
    MIN_RESULTS_KEPT_MS,
    REQUEST_RETENTION_MS / 5,
];

fn op() -> impl Strategy<Value = Op> {
    let r = 0u8..14;
    let id = 0u8..IDS;
    prop_oneof![
        4 => (r.clone(), id.clone(), proptest::option::weighted(0.8, 0u8..IDS), proptest::option::of(0u8..4), proptest::bool::weighted(0.15), proptest::option::weighted(0.1, 0u8..IDS))
            .prop_map(|(req, id, parent, max, bump, wrong_root)| Op::Register { req, id, parent, max, bump, wrong_root }),
        1 => (r.clone(), id.clone(), 0u8..3, 0u8..4, proptest::bool::ANY).prop_map(|(req, id, node, expected, activate)| Op::Claim { req, id, node, expected, activate }),
        1 => (r.clone(), id.clone(), 0u8..4, proptest::option::of(0u8..4)).prop_map(|(req, id, state, fence)| Op::SetState { req, id, state, fence }),
        1 => (r.clone(), proptest::collection::vec(id.clone(), 1..3)).prop_map(|(req, ids)| Op::Close { req, ids }),
        2 => (r.clone(), id.clone()).prop_map(|(req, id)| Op::Dispose { req, id }),
        3 => (r.clone(), id.clone(), 0u8..3, 0u8..3).prop_map(|(req, id, node, expected)| Op::Confirm { req, id, node, expected }),
        1 => (r.clone(), 0u8..3, 0u8..50, 0u8..50).prop_map(|(req, node, at, lease)| Op::Heartbeat { req, node, at, lease }),
        1 => (r, 0u8..KEPT.len() as u8).prop_map(|(req, kept)| Op::Forget { req, kept }),
        1 => (0u8..STEPS.len() as u8).prop_map(|step| Op::Advance { step }),
    ]
}

/// The `at_ms` the test gives each op: the clock plus a per-kind offset (a heartbeat's own
/// jitter, so heartbeats arrive out of order).
fn at_ms(clock: u64, op: &Op) -> u64 {
    clock
        + match op {
            Op::Register { .. } => 1,
            Op::Claim { .. } => 2,
            Op::SetState { .. } => 3,
            Op::Close { .. } => 4,
            Op::Dispose { .. } => 5,
            Op::Confirm { .. } => 6,
            Op::Heartbeat { at, .. } => u64::from(*at),
            Op::Forget { .. } => 7,
            Op::Advance { .. } => 0,
        }
}

// ----- driving the real state machine -----

fn to_command(model: &Model, op: &Op) -> Option<Command> {
    let at = at_ms(model.clock, op);
    Some(match op.clone() {
        Op::Register {
            req: r,
            id,
            parent,
            max,
            bump,
            wrong_root,
        } => {
            let (root, depth) = model.header_for(id, parent, bump, wrong_root)?;
            let header: SessionHeader = match parent {
                None => SessionHeader::top_level(sid(id), None, None),
                Some(p) => serde_json::from_value(json!({
                    "id": sid(id).as_str(), "parent_session": sid(p).as_str(),
                    "root_session": sid(root).as_str(), "origin": "subagent",
                    "delegation_depth": depth,
                }))
                .ok()?,
            };
            Command::RegisterSession {
                request_id: req(r),
                at_ms: at,
                header,
                descriptor: None,
                max_depth: max.map(|m| MaxDepth::new(u64::from(m)).unwrap()),
                fan_out: Default::default(),
                budget: None,
                node: Some(node(1)),
                run: None,
                start_within_ms: None,
                hosted: false,
            }
        }
        Op::Claim {
            req: r,
            id,
            node: n,
            expected,
            activate,
        } => Command::ClaimPlacement {
            request_id: req(r),
            at_ms: at,
            session: sid(id),
            node: node(n),
            expected_epoch: u64::from(expected),
            run: activate.then(|| RunId::parse(RUN).unwrap()),
            activate,
        },
        Op::SetState {
            req: r,
            id,
            state,
            fence,
        } => Command::SetState {
            stop_reason: None,
            request_id: req(r),
            at_ms: at,
            session: sid(id),
            state: [
                SessionState::Running,
                SessionState::Waiting,
                SessionState::Settled,
                SessionState::Disposed,
            ][state as usize],
            expected_epoch: fence.map(u64::from),
        },
        Op::Close { req: r, ids } => Command::CloseAdmission {
            request_id: req(r),
            at_ms: at,
            roots: ids.iter().map(|i| sid(*i)).collect(),
        },
        Op::Dispose { req: r, id } => Command::Dispose {
            stop_reason: None,
            request_id: req(r),
            at_ms: at,
            session: sid(id),
        },
        Op::Confirm {
            req: r,
            id,
            node: n,
            expected,
        } => Command::ConfirmStart {
            request_id: req(r),
            at_ms: at,
            session: sid(id),
            node: node(n),
            expected_epoch: u64::from(expected),
        },
        Op::Heartbeat {
            req: r,
            node: n,
            lease,
            ..
        } => Command::Heartbeat {
            request_id: req(r),
            at_ms: at,
            node: node(n),
            lease_ms: u64::from(lease),
            info: None,
        },
        Op::Forget { req: r, kept } => Command::ForgetResults {
            request_id: req(r),
            at_ms: at,
            kept_ms: KEPT[usize::from(kept)],
        },
        Op::Advance { .. } => return None,
    })
}

fn summarize(r: &CommandResponse) -> String {
    match r {
        CommandResponse::Noop => "noop".into(),
        CommandResponse::Registered { depth, .. } => format!("registered:{depth}"),
        CommandResponse::Started { placement, .. } => format!(
            "started:{}:{}",
            &placement.node.as_str()[1..],
            placement.epoch
        ),
        CommandResponse::Placed { placement, .. } => {
            format!(
                "placed:{}:{}",
                &placement.node.as_str()[1..],
                placement.epoch
            )
        }
        CommandResponse::Released { placement } => format!(
            "released:{}:{}",
            &placement.node.as_str()[1..],
            placement.epoch
        ),
        CommandResponse::StateSet { state, .. } => format!(
            "state:{}",
            match state {
                SessionState::Running => 0,
                SessionState::Waiting => 1,
                SessionState::Settled => 2,
                SessionState::Disposed => 3,
                SessionState::Starting => 4,
            }
        ),
        CommandResponse::AdmissionClosed { sessions } => format!("closed:{}", sessions.len()),
        CommandResponse::Disposed { already, .. } => format!("disposed:{already}"),
        CommandResponse::Purged { sessions } => format!("purged:{}", sessions.len()),
        CommandResponse::LeaseRenewed {
            lease_expires_at_ms,
            ..
        } => format!("lease:{lease_expires_at_ms}"),
        CommandResponse::RunAppended { runs, .. } => format!("runs:{runs}"),
        CommandResponse::DescriptorSet { .. } => "descriptor".into(),
        CommandResponse::UsageRecorded { .. } => "usage".into(),
        CommandResponse::ResultsForgotten { count, more } => format!("forgotten:{count}:{more}"),
        CommandResponse::Refused(r) => format!("refused:{}", r.kind()),
    }
}

fn index_of(s: &SessionId) -> u8 {
    (0..IDS).find(|i| &sid(*i) == s).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn g2_model_real_state_machine_agrees_with_reference_model(ops in proptest::collection::vec(op(), 1..60)) {
        let mut real = RegistryState::new();
        let mut model = Model::default();
        for op in &ops {
            if let Op::Advance { .. } = op {
                model.run(op);
                continue;
            }
            let Some(cmd) = to_command(&model, op) else { continue };
            // A round trip through JSON, as on the wire.
            let cmd: Command = serde_json::from_slice(&serde_json::to_vec(&cmd).unwrap()).unwrap();
            let before = real.digest();
            let got = summarize(&real.apply(&cmd));
            let want = model.run(op);
            prop_assert_eq!(&got, &want, "op {:?}", op);
            if got.starts_with("refused:") {
                prop_assert_eq!(real.digest(), before, "a refusal changed the state: {:?}", op);
            }
        }
        // Final states agree.
        prop_assert_eq!(real.session_count(), model.sessions.len());
        for rec in real.sessions() {
            let i = index_of(rec.id());
            let m = &model.sessions[&i];
            prop_assert_eq!(rec.header.parent_session().map(index_of), m.parent);
            prop_assert_eq!(index_of(rec.header.root_session()), m.root);
            prop_assert_eq!(rec.depth(), m.depth);
            prop_assert_eq!(rec.max_depth, m.max);
            prop_assert_eq!(rec.admission == Admission::Closed, m.closed);
            let state = match rec.state {
                SessionState::Running => 0,
                SessionState::Waiting => 1,
                SessionState::Settled => 2,
                SessionState::Disposed => 3,
                SessionState::Starting => 4,
            };
            prop_assert_eq!(state, m.state);
            prop_assert_eq!(
                rec.placement.as_ref().map(|p| (p.node.as_str()[1..].parse::<u8>().unwrap(), p.epoch)),
                m.placement
            );
            let children: BTreeSet<u8> = rec.children.iter().map(index_of).collect();
            prop_assert_eq!(&children, &m.children);
        }
        let leases: BTreeMap<u8, u64> = real.nodes().iter()
            .map(|n| (n.node.as_str()[1..].parse::<u8>().unwrap(), n.lease_expires_at_ms)).collect();
        prop_assert_eq!(leases, model.leases.clone());
        // The idempotency tables agree: same request ids, kinds, times and first results.
        prop_assert_eq!(real.request_count(), model.requests.len());
        for r in 0u8..14 {
            let got = real
                .request_outcome(&req(r))
                .map(|o| (o.kind.as_str().to_owned(), summarize(&o.response), o.at_ms));
            let want = model
                .requests
                .get(&r)
                .map(|(k, first, at)| ((*k).to_owned(), first.clone(), *at));
            prop_assert_eq!(got, want, "request q{}", r);
        }
        // A snapshot round trip keeps the state, the derived age index included.
        let restored: RegistryState = serde_json::from_slice(&serde_json::to_vec(&real).unwrap()).unwrap();
        prop_assert_eq!(&restored, &real);
        // Lineage invariants: every parent link is mirrored, depth = parent depth + 1 (D3, L4).
        for rec in real.sessions() {
            if let Some(p) = rec.header.parent_session() {
                let parent = real.session(p).unwrap();
                prop_assert!(parent.children.contains(rec.id()));
                prop_assert_eq!(rec.depth(), parent.depth() + 1);
                prop_assert!(real.is_ancestor(rec.header.root_session(), rec.id()));
            }
        }
    }
}
