//! Q1: fan-out caps on the pure state machine. A root records the caps it was born with; every
//! birth under it is checked at apply time against the live (not disposed) children of its
//! parent and the live descendants of its root; a spawn may tighten the caps, never loosen
//! them; a disposed child frees its slot; a refusal carries the numbers and changes nothing.

use lineage_core::fanout::{FanOut, FanOutExceeded};
use lineage_core::header::{child_session_meta, SessionHeader};
use lineage_core::ids::{NodeId, RequestId};
use lineage_registry::{Command, CommandResponse, RegistryRefusal, RegistryState};

use lineage_core::ids::sid;

fn register(n: u32, header: SessionHeader, fan_out: FanOut) -> Command {
    Command::RegisterSession {
        request_id: RequestId::parse(&format!("reg-{n}")).unwrap(),
        at_ms: u64::from(n),
        header,
        descriptor: None,
        max_depth: None,
        fan_out,
        budget: None,
        node: Some(NodeId::parse("n1").unwrap()),
        run: None,
        start_within_ms: None,
        hosted: true,
    }
}

fn root(s: &mut RegistryState, n: u32, fan_out: FanOut) {
    let cmd = register(n, SessionHeader::top_level(sid(n), None, None), fan_out);
    assert!(matches!(s.apply(&cmd), CommandResponse::Registered { .. }));
}

fn child_cmd(s: &RegistryState, parent: u32, n: u32, fan_out: FanOut) -> Command {
    let p = s.session(&sid(parent)).unwrap();
    let header = child_session_meta(&p.header, sid(n), p.depth() + 1, 0, None).unwrap();
    register(n, header, fan_out)
}

fn child(s: &mut RegistryState, parent: u32, n: u32) {
    let cmd = child_cmd(s, parent, n, FanOut::NONE);
    let got = s.apply(&cmd);
    assert!(
        matches!(got, CommandResponse::Registered { .. }),
        "{n}: {got:?}"
    );
}

fn refused(s: &mut RegistryState, parent: u32, n: u32, fan_out: FanOut) -> RegistryRefusal {
    let cmd = child_cmd(s, parent, n, fan_out);
    let before = s.digest();
    match s.apply(&cmd) {
        CommandResponse::Refused(r) => {
            assert_eq!(s.digest(), before, "a refusal changed the state");
            assert!(
                s.session(&sid(n)).is_none(),
                "no record of the refused birth"
            );
            r
        }
        other => panic!("{n} was not refused: {other:?}"),
    }
}

fn dispose(s: &mut RegistryState, n: u32) {
    let got = s.apply(&Command::Dispose {
        stop_reason: None,
        request_id: RequestId::parse(&format!("dispose-{n}")).unwrap(),
        at_ms: 1_000,
        session: sid(n),
    });
    assert!(
        matches!(got, CommandResponse::Disposed { .. }),
        "{n}: {got:?}"
    );
}

fn caps(children: Option<u32>, descendants: Option<u32>) -> FanOut {
    FanOut {
        max_children: children,
        max_descendants: descendants,
    }
}

#[test]
fn q1_a_parent_at_max_children_is_refused_with_the_numbers_until_a_child_is_disposed() {
    let mut s = RegistryState::new();
    root(&mut s, 1, caps(Some(2), None));
    child(&mut s, 1, 2);
    child(&mut s, 1, 3);
    let refusal = refused(&mut s, 1, 4, FanOut::NONE);
    assert_eq!(
        refusal,
        RegistryRefusal::FanOutExceeded {
            parent: sid(1),
            exceeded: FanOutExceeded::MaxChildren { live: 2, max: 2 },
        }
    );
    assert_eq!(
        refusal.to_string(),
        "fan-out cap: this parent already has 2 live children (max_children 2); wait for one to finish (wait_for_children) or raise limits.max_children"
    );
    // The cap is the tree's: a child's own children are capped too.
    child(&mut s, 2, 5);
    child(&mut s, 2, 6);
    assert!(matches!(
        refused(&mut s, 2, 7, FanOut::NONE),
        RegistryRefusal::FanOutExceeded { .. }
    ));
    // A disposed child frees its slot.
    dispose(&mut s, 3);
    child(&mut s, 1, 4);
}

#[test]
fn q1_max_descendants_counts_the_live_sessions_of_the_whole_tree() {
    let mut s = RegistryState::new();
    root(&mut s, 1, caps(None, Some(3)));
    child(&mut s, 1, 2);
    child(&mut s, 2, 3);
    child(&mut s, 3, 4);
    // Three live below the root, at depths 1-3: a fourth anywhere in the tree is refused.
    assert_eq!(
        refused(&mut s, 1, 5, FanOut::NONE),
        RegistryRefusal::FanOutExceeded {
            parent: sid(1),
            exceeded: FanOutExceeded::MaxDescendants { live: 3, max: 3 },
        }
    );
    assert!(matches!(
        refused(&mut s, 4, 5, FanOut::NONE),
        RegistryRefusal::FanOutExceeded { .. }
    ));
    // Another tree is not affected.
    root(&mut s, 10, FanOut::NONE);
    child(&mut s, 10, 11);
    // The leaf disposed: one slot.
    dispose(&mut s, 4);
    child(&mut s, 1, 5);
}

#[test]
fn q1_a_spawn_can_tighten_the_trees_caps_but_not_loosen_them() {
    let mut s = RegistryState::new();
    root(&mut s, 1, caps(Some(3), None));
    child(&mut s, 1, 2);
    // Asking for more than the tree allows: the tree's cap holds.
    let loosen = child_cmd(&s, 1, 3, caps(Some(100), None));
    assert!(matches!(
        s.apply(&loosen),
        CommandResponse::Registered { .. }
    ));
    assert_eq!(s.session(&sid(3)).unwrap().fan_out, caps(Some(3), None));
    // Asking for less: refused at its own, stricter cap, and recorded for its subtree.
    assert_eq!(
        refused(&mut s, 1, 4, caps(Some(2), None)),
        RegistryRefusal::FanOutExceeded {
            parent: sid(1),
            exceeded: FanOutExceeded::MaxChildren { live: 2, max: 2 },
        }
    );
    let tight = child_cmd(&s, 2, 5, caps(Some(1), Some(9)));
    assert!(matches!(
        s.apply(&tight),
        CommandResponse::Registered { .. }
    ));
    assert_eq!(s.session(&sid(5)).unwrap().fan_out, caps(Some(1), Some(9)));
}

#[test]
fn q1_no_caps_means_no_limit() {
    let mut s = RegistryState::new();
    root(&mut s, 1, FanOut::NONE);
    for n in 2..60 {
        child(&mut s, 1, n);
    }
    assert_eq!(s.session(&sid(1)).unwrap().children.len(), 58);
}
