//! Q3: budgets on the pure state machine. A session born with a budget has its subtree's
//! reported usage summed as it is recorded (a replaced report replaces its share); once the sum
//! reaches the budget, the holder is listed as spent and every birth under it (at any depth)
//! is refused with the numbers, changing nothing; the sums and the list survive a snapshot
//! round trip; a disposed holder is no longer listed.

use lineage_core::budget::{Budget, BudgetSpent};
use lineage_core::fanout::FanOut;
use lineage_core::header::{child_session_meta, SessionHeader};
use lineage_core::ids::{NodeId, RequestId, SessionId};
use lineage_core::usage::SessionUsage;
use lineage_registry::{Command, CommandResponse, RegistryRefusal, RegistryState};

use lineage_core::ids::sid;

fn register(n: u32, header: SessionHeader, budget: Option<Budget>) -> Command {
    Command::RegisterSession {
        request_id: RequestId::parse(&format!("reg-{n}")).unwrap(),
        at_ms: u64::from(n),
        header,
        descriptor: None,
        max_depth: None,
        fan_out: FanOut::NONE,
        budget,
        node: Some(NodeId::parse("n1").unwrap()),
        run: None,
        start_within_ms: None,
        hosted: true,
    }
}

fn child_cmd(s: &RegistryState, parent: u32, n: u32) -> Command {
    let p = s.session(&sid(parent)).unwrap();
    let header = child_session_meta(&p.header, sid(n), p.depth() + 1, 0, None).unwrap();
    register(n, header, None)
}

fn ok(s: &mut RegistryState, cmd: Command) {
    let got = s.apply(&cmd);
    assert!(
        matches!(
            got,
            CommandResponse::Registered { .. } | CommandResponse::UsageRecorded { .. }
        ),
        "{got:?}"
    );
}

fn usage(s: &mut RegistryState, n: u32, round: u32, tokens: u64) {
    ok(
        s,
        Command::RecordUsage {
            request_id: RequestId::parse(&format!("use-{n}-{round}")).unwrap(),
            at_ms: 100,
            session: sid(n),
            usage: SessionUsage {
                used_tokens: tokens,
                ..Default::default()
            },
            expected_epoch: None,
        },
    );
}

fn spent(s: &RegistryState) -> Vec<SessionId> {
    s.spent_budgets(256)
        .iter()
        .map(|r| r.id().clone())
        .collect()
}

#[test]
fn q3_a_tree_past_its_budget_refuses_a_spawn_with_the_numbers_and_changes_nothing() {
    let mut s = RegistryState::new();
    let budget = Budget {
        max_tokens: Some(250),
        max_cost_micros: None,
    };
    ok(
        &mut s,
        register(
            1,
            SessionHeader::top_level(sid(1), None, None),
            Some(budget),
        ),
    );
    let c = child_cmd(&s, 1, 2);
    ok(&mut s, c);
    let c = child_cmd(&s, 2, 3);
    ok(&mut s, c);
    usage(&mut s, 1, 1, 100);
    usage(&mut s, 3, 1, 100);
    assert_eq!(s.subtree_usage(&sid(1)).used_tokens, 200);
    assert_eq!(s.subtree_usage(&sid(2)).used_tokens, 100);
    assert!(spent(&s).is_empty());
    // A replaced report replaces its share: 3 now holds 120, not 220.
    usage(&mut s, 3, 2, 120);
    assert_eq!(s.subtree_usage(&sid(1)).used_tokens, 220);
    let c = child_cmd(&s, 3, 4);
    ok(&mut s, c);
    usage(&mut s, 4, 1, 30);
    assert_eq!(spent(&s), vec![sid(1)]);

    // Under the holder, at any depth: refused with the numbers; nothing changes.
    for (parent, n) in [(1, 10), (3, 11), (4, 12)] {
        let cmd = child_cmd(&s, parent, n);
        let before = s.digest();
        let got = s.apply(&cmd);
        let CommandResponse::Refused(refusal) = got else {
            panic!("a birth under a spent budget was accepted: {got:?}");
        };
        assert_eq!(
            refusal,
            RegistryRefusal::BudgetSpent(BudgetSpent {
                holder: sid(1),
                used_tokens: 250,
                max_tokens: Some(250),
                cost_micros: 0,
                max_cost_micros: None,
            })
        );
        assert_eq!(refusal.kind(), "budget_spent");
        assert!(refusal
            .to_string()
            .contains("has used 250 tokens of its budget of 250 tokens"));
        assert_eq!(s.digest(), before);
        assert!(s.session(&sid(n)).is_none());
    }

    // A snapshot round trip rebuilds the sums and the list.
    let back: RegistryState = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(back.subtree_usage(&sid(1)), s.subtree_usage(&sid(1)));
    assert_eq!(spent(&back), spent(&s));

    // Disposed (children first), the holder is no longer listed.
    for n in [4, 3, 2, 1] {
        let got = s.apply(&Command::Dispose {
            stop_reason: None,
            request_id: RequestId::parse(&format!("dispose-{n}")).unwrap(),
            at_ms: 1_000,
            session: sid(n),
        });
        assert!(matches!(got, CommandResponse::Disposed { .. }), "{got:?}");
    }
    assert!(spent(&s).is_empty());
}

#[test]
fn q3_a_tree_without_a_budget_is_never_spent() {
    let mut s = RegistryState::new();
    ok(
        &mut s,
        register(1, SessionHeader::top_level(sid(1), None, None), None),
    );
    usage(&mut s, 1, 1, u64::MAX);
    assert!(spent(&s).is_empty());
    let c = child_cmd(&s, 1, 2);
    ok(&mut s, c);
}
