//! Unit tests of [`FrontTree`]: each feeds observed events and asserts on what is emitted.

use super::*;

use lineage_core::ids::sid;

fn start(parent: u32, child: u32, label: Option<&str>) -> Observed {
    Observed::Start {
        parent: sid(parent),
        child: sid(child),
        label: label.map(str::to_owned),
        provider: "script".into(),
        node: None,
    }
}

fn chunk(session: u32, turn: u64, text: &str) -> Observed {
    Observed::Output(TurnOutput::Chunk {
        session_id: sid(session),
        turn,
        seq: 1,
        text: text.into(),
    })
}

fn turn_start(session: u32, turn: u64, ids: &[&str]) -> Observed {
    Observed::Output(TurnOutput::TurnStart {
        session_id: sid(session),
        turn,
        request_ids: ids.iter().map(|s| (*s).to_owned()).collect(),
        at_ms: 0,
    })
}

fn turn_end(session: u32, turn: u64, reply: Option<&str>) -> Observed {
    Observed::Output(TurnOutput::TurnEnd {
        usage: None,
        session_id: sid(session),
        turn,
        outcome: TurnEndOutcome::Completed,
        error: None,
        reply: reply.map(str::to_owned),
        at_ms: 0,
    })
}

#[test]
fn f1_a_roots_turn_is_started_streamed_and_ended_and_a_reply_not_streamed_is_shown_once() {
    let mut t = FrontTree::new(false);
    t.add_root(sid(1));
    assert_eq!(
        t.observe(turn_start(1, 0, &["p1"])),
        [Emit::RootTurnStarted {
            root: sid(1),
            turn: 0,
            request_ids: vec!["p1".into()]
        }]
    );
    assert_eq!(
        t.observe(chunk(1, 0, "hel")),
        [Emit::Text {
            session: sid(1),
            text: "hel".into()
        }]
    );
    // Streamed: the recorded reply is not shown again.
    assert_eq!(
        t.observe(turn_end(1, 0, Some("hello"))),
        [Emit::RootTurnEnded {
            root: sid(1),
            turn: 0,
            outcome: TurnEndOutcome::Completed,
            error: None
        }]
    );
    // Not streamed: shown at the end, before the end.
    t.observe(turn_start(1, 1, &[]));
    let end = t.observe(turn_end(1, 1, Some("whole")));
    assert_eq!(
        end[0],
        Emit::Text {
            session: sid(1),
            text: "whole".into()
        }
    );
    assert!(matches!(end[1], Emit::RootTurnEnded { turn: 1, .. }));
    // Another tree's output is not shown.
    assert_eq!(t.observe(chunk(9, 0, "other")), []);
}

#[test]
fn f2_descendants_are_announced_before_their_traffic_even_when_it_comes_first() {
    let mut t = FrontTree::new(true);
    t.add_root(sid(1));
    // A grandchild's output and start arrive before its parent's start: they wait.
    assert_eq!(t.observe(chunk(3, 0, "deep")), []);
    assert_eq!(t.observe(start(2, 3, None)), []);
    let out = t.observe(start(1, 2, Some("scout")));
    assert_eq!(
        out,
        [
            Emit::Announce {
                parent: sid(1),
                child: sid(2),
                title: "scout".into(),
                state: ChildState::Running
            },
            Emit::Announce {
                parent: sid(2),
                child: sid(3),
                title: format!("script {}", &sid(3).as_str()[..8]),
                state: ChildState::Running
            },
            Emit::Text {
                session: sid(3),
                text: "deep".into()
            },
        ]
    );
    // A child's turns move it between running and idle; its report appears under its own id.
    assert_eq!(
        t.observe(turn_end(2, 0, None)),
        [Emit::State {
            parent: sid(1),
            child: sid(2),
            state: ChildState::Idle,
            note: None
        }]
    );
    assert_eq!(
        t.observe(Observed::Report {
            parent: sid(1),
            child: sid(2),
            seq: 4,
            content: "found".into()
        }),
        [Emit::Report {
            child: sid(2),
            parent: sid(1),
            message_id: "report-4".into(),
            text: "found".into()
        }]
    );
    assert_eq!(
        t.observe(Observed::End {
            parent: sid(1),
            child: sid(2),
            stop_reason: StopReason::Completed
        }),
        [Emit::State {
            parent: sid(1),
            child: sid(2),
            state: ChildState::Idle,
            note: Some("ended: completed".into())
        }]
    );
}

#[test]
fn f2_a_client_without_the_subagents_capability_sees_only_its_roots() {
    let mut t = FrontTree::new(false);
    t.add_root(sid(1));
    assert_eq!(t.observe(start(1, 2, Some("scout"))), []);
    assert_eq!(t.observe(chunk(2, 0, "child text")), []);
    assert_eq!(
        t.observe(Observed::Report {
            parent: sid(1),
            child: sid(2),
            seq: 1,
            content: "r".into()
        }),
        []
    );
    // Still learned: the child's own child is known (not shown either).
    t.observe(start(2, 3, None));
    assert!(t.knows(&sid(3)));
}

#[test]
fn f3_a_loaded_tree_is_announced_from_the_registry_and_releases_what_waited() {
    let mut t = FrontTree::new(true);
    t.add_root(sid(1));
    assert_eq!(t.observe(chunk(2, 3, "late")), []);
    let out = t.add_known(sid(1), sid(2), "scout".into(), ChildState::Idle);
    assert_eq!(out.len(), 2, "{out:?}");
    assert!(matches!(
        &out[0],
        Emit::Announce {
            state: ChildState::Idle,
            ..
        }
    ));
    assert!(matches!(&out[1], Emit::Text { .. }));
    // Unknown parents are not announced; a known child is not announced twice.
    assert_eq!(
        t.add_known(sid(7), sid(8), "x".into(), ChildState::Idle),
        []
    );
    assert_eq!(
        t.add_known(sid(1), sid(2), "scout".into(), ChildState::Idle),
        []
    );
}

#[test]
fn f2_what_waits_is_bounded() {
    let mut t = FrontTree::new(true);
    t.add_root(sid(1));
    for n in 0..(MAX_WAITING as u32 + 10) {
        t.observe(chunk(100 + n, 0, "x"));
    }
    assert_eq!(t.waiting.len(), MAX_WAITING);
}

#[test]
fn f1_cancel_finds_the_root_of_a_descendant_and_close_forgets_the_tree() {
    let mut t = FrontTree::new(true);
    t.add_root(sid(1));
    t.observe(start(1, 2, None));
    t.observe(start(2, 3, None));
    assert_eq!(t.root_of(&sid(3)), Some(sid(1)));
    assert_eq!(t.root_of(&sid(2)), Some(sid(1)));
    assert_eq!(t.root_of(&sid(1)), None, "a root has no root above it");
    assert_eq!(t.root_of(&sid(9)), None);
    t.remove_root(&sid(1));
    assert!(!t.knows(&sid(1)) && !t.knows(&sid(2)) && !t.knows(&sid(3)));
}

#[test]
fn f2_a_childs_state_is_sent_once_per_change_and_a_new_run_is_not_a_second_announcement() {
    let mut t = FrontTree::new(true);
    t.add_root(sid(1));
    let announced = t.observe(start(1, 2, Some("scout")));
    assert!(matches!(
        announced.as_slice(),
        [Emit::Announce {
            state: ChildState::Running,
            ..
        }]
    ));
    // The announcement said `running`: its first turn's start adds nothing.
    assert_eq!(t.observe(turn_start(2, 0, &[])), []);
    let idle = Emit::State {
        parent: sid(1),
        child: sid(2),
        state: ChildState::Idle,
        note: None,
    };
    assert_eq!(t.observe(turn_end(2, 0, None)), std::slice::from_ref(&idle));
    // A resumed child starts a new run: running again, not announced again.
    let running = Emit::State {
        parent: sid(1),
        child: sid(2),
        state: ChildState::Running,
        note: None,
    };
    assert_eq!(t.observe(start(1, 2, Some("scout"))), [running]);
    assert_eq!(t.observe(turn_start(2, 1, &[])), []);
    assert_eq!(t.observe(turn_end(2, 1, None)), [idle]);
    // Its end is sent even though it is idle already: it says how the run ended.
    let ended = t.observe(Observed::End {
        parent: sid(1),
        child: sid(2),
        stop_reason: StopReason::Completed,
    });
    assert!(
        matches!(ended.as_slice(), [Emit::State { note: Some(_), .. }]),
        "{ended:?}"
    );
}

#[test]
fn f1_a_turns_usage_is_sent_at_its_end_when_the_window_is_known() {
    let mut t = FrontTree::new(false);
    t.add_root(sid(1));
    let end = |turn, usage| {
        Observed::Output(TurnOutput::TurnEnd {
            session_id: sid(1),
            turn,
            outcome: TurnEndOutcome::Completed,
            error: None,
            reply: None,
            usage,
            at_ms: 0,
        })
    };
    let usage = lineage_core::usage::SessionUsage {
        used_tokens: 100,
        size_tokens: Some(200_000),
        cost_micros: Some(500),
        currency: Some("USD".into()),
    };
    let out = t.observe(end(0, Some(usage.clone())));
    assert_eq!(
        out[0],
        Emit::Usage {
            session: sid(1),
            used: 100,
            size: 200_000,
            cost: Some((500, "USD".into()))
        }
    );
    assert!(matches!(out[1], Emit::RootTurnEnded { .. }));
    // Without its window's size (ACP requires one) nothing is sent.
    let unsized_usage = lineage_core::usage::SessionUsage {
        size_tokens: None,
        ..usage
    };
    let out = t.observe(end(1, Some(unsized_usage)));
    assert!(
        matches!(out.as_slice(), [Emit::RootTurnEnded { .. }]),
        "{out:?}"
    );
}

#[test]
fn a4_a_child_running_on_a_node_whose_lease_lapsed_is_unknown_once_until_it_resumes() {
    let mut t = FrontTree::new(true);
    t.add_root(sid(1));
    let on = |node: &str| Observed::Start {
        parent: sid(1),
        child: sid(2),
        label: Some("scout".into()),
        provider: "script".into(),
        node: Some(NodeId::parse(node).unwrap()),
    };
    let lapsed = |nodes: &[&str]| Observed::Lapsed {
        nodes: nodes.iter().map(|n| NodeId::parse(n).unwrap()).collect(),
    };
    assert_eq!(t.observe(on("node-2")).len(), 1, "announced running");
    assert!(t.observe(lapsed(&["node-3"])).is_empty(), "another node");
    let out = t.observe(lapsed(&["node-2"]));
    let [Emit::State {
        child, state, note, ..
    }] = out.as_slice()
    else {
        panic!("{out:?}")
    };
    assert_eq!((child, *state), (&sid(2), ChildState::Unknown));
    assert!(
        note.as_deref().unwrap_or_default().contains("node-2"),
        "{note:?}"
    );
    assert!(t.observe(lapsed(&["node-2"])).is_empty(), "sent once");
    // Resumed on node-3: running again; its node's lapse no longer concerns it.
    let out = t.observe(on("node-3"));
    assert!(
        matches!(
            out.as_slice(),
            [Emit::State {
                state: ChildState::Running,
                ..
            }]
        ),
        "{out:?}"
    );
    assert!(t.observe(lapsed(&["node-2"])).is_empty());
    // An idle child is not made unknown: nothing of it runs.
    t.observe(Observed::End {
        parent: sid(1),
        child: sid(2),
        stop_reason: StopReason::Completed,
    });
    assert!(t.observe(lapsed(&["node-3"])).is_empty());
}
