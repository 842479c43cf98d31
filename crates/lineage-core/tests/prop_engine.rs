//! Property test of the agent engine (issue 10): random event sequences, executed by a small
//! reference executor that tracks what is staged, what is durable and what was committed.
//!
//! Whatever the sequence: nothing is answered, published or born before the events it
//! depends on are durable; no notice or result goes out before the settlement commit; the
//! engine never settles while it owns a child (a drain's release disposes them first); each
//! dedup id and followup request id is accepted once; a top-level session never settles;
//! staged seqs are contiguous.

use std::collections::{BTreeMap, BTreeSet};

use lineage_core::descriptor::SubagentShape;
use lineage_core::engine::restore::fold;
use lineage_core::engine::{
    AgentEngine, Answer, Arrival, Barrier, EngineCommand, EngineEvent, EngineInit, TurnOutcome,
    WaitMode,
};
use lineage_core::ids::{NodeId, SessionId};
use lineage_core::journal::{JournalEvent, TurnMessage};
use lineage_core::messages::{Delivery, StopReason};
use proptest::prelude::*;

use lineage_core::ids::sid;

/// One generated step.
#[derive(Debug, Clone)]
enum Step {
    Deliver {
        wake: bool,
        dedup: Option<u8>,
        request: Option<u8>,
        settles: Option<u8>,
    },
    Adopt(u8),
    Stop,
    Release,
    Recover,
    Begin,
    Reply,
    Report,
    Spawn(u8, bool),
    End(u8),
    Abandon,
    Wait(bool),
    WaitExpire,
    Quiesce,
    HandOff,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (any::<bool>(), proptest::option::of(0u8..6), proptest::option::of(0u8..6),
              proptest::option::weighted(0.3, 0u8..4))
            .prop_map(|(wake, dedup, request, settles)| Step::Deliver { wake, dedup, request, settles }),
        1 => (0u8..4).prop_map(Step::Adopt),
        1 => Just(Step::Stop),
        1 => Just(Step::Release),
        1 => Just(Step::Recover),
        4 => Just(Step::Begin),
        2 => Just(Step::Reply),
        2 => Just(Step::Report),
        1 => ((0u8..4), any::<bool>()).prop_map(|(c, ok)| Step::Spawn(c, ok)),
        3 => (0u8..3).prop_map(Step::End),
        1 => Just(Step::Abandon),
        2 => any::<bool>().prop_map(Step::Wait),
        1 => Just(Step::WaitExpire),
        1 => Just(Step::Quiesce),
        1 => Just(Step::HandOff),
    ]
}

/// The reference executor's view.
#[derive(Default)]
struct Model {
    staged: u64,
    durable: u64,
    committed: bool,
    settled_commits: usize,
    owned: BTreeSet<SessionId>,
    stopping: bool,
    once: BTreeMap<String, usize>,
    reply: u64,
    /// Accepted seqs handed to a turn (at its start or while it waited).
    consumed: BTreeSet<u64>,
    /// The reply id of the last wait asked for.
    last_wait: u64,
}

impl Model {
    fn run(&mut self, engine: &AgentEngine, event: &EngineEvent, cmds: &[EngineCommand]) {
        let releasing = matches!(event, EngineEvent::Release(_));
        for cmd in cmds {
            // The barrier the real executor enforces agrees with this model: what a command
            // waits for is durable here by the time it comes (the engine asked in order).
            match cmd.barrier() {
                Barrier::None => {}
                Barrier::DurableThrough(seq) => {
                    assert!(seq <= self.durable, "{cmd:?} before seq {seq} is durable")
                }
                Barrier::WrittenWith(seq) => {
                    assert_eq!(seq, self.staged, "{cmd:?} does not write what is staged")
                }
            }
            match cmd {
                EngineCommand::Stage { seq, event } => {
                    assert_eq!(*seq, self.staged + 1, "seqs are contiguous");
                    self.staged = *seq;
                    if let JournalEvent::Accepted(a) = event {
                        for key in a.once_keys() {
                            *self.once.entry(key).or_default() += 1;
                        }
                    }
                    if let JournalEvent::TurnStart { inputs, .. }
                    | JournalEvent::TurnInputs { inputs, .. } = event
                    {
                        for seq in inputs {
                            assert!(
                                self.consumed.insert(*seq),
                                "seq {seq} handed to a turn twice"
                            );
                        }
                    }
                }
                EngineCommand::StageDescriptor { seq } => {
                    assert_eq!(*seq, self.staged + 1);
                    self.staged = *seq;
                }
                EngineCommand::Flush => self.durable = self.staged,
                EngineCommand::Answer {
                    answer, after_seq, ..
                } => {
                    assert!(*after_seq <= self.durable, "answered before durable");
                    if matches!(answer, Answer::Accepted) {
                        assert_eq!(self.durable, self.staged, "accepted, not durable");
                    }
                    if matches!(answer, Answer::Arrived { .. })
                        && engine.shape() != Some(SubagentShape::OneShot)
                    {
                        assert_eq!(self.durable, self.staged, "inputs handed over, not durable");
                    }
                }
                EngineCommand::PublishReport { after_seq, report } => {
                    assert!(*after_seq <= self.durable && report.seq > 0);
                    assert_eq!(self.durable, self.staged, "report published before durable");
                }
                EngineCommand::BeforeBirth { after_seq } => {
                    assert_eq!(*after_seq, self.durable);
                    assert_eq!(
                        self.durable, self.staged,
                        "a birth before the log is durable"
                    );
                }
                EngineCommand::CommitSettlement {
                    after_seq,
                    with_log,
                    dispose,
                    ..
                } => {
                    assert!(
                        engine.shape().is_some(),
                        "a top-level session never settles"
                    );
                    if *with_log {
                        // Only a dispose writes its log alongside; from here on it is durable.
                        assert!(*dispose, "a resumable settlement committed before its log");
                        self.durable = self.staged;
                    }
                    assert_eq!(*after_seq, self.durable);
                    assert_eq!(
                        self.durable, self.staged,
                        "commit before the notice is durable"
                    );
                    if !releasing {
                        assert!(
                            self.owned.is_empty(),
                            "settled with owned children {:?}",
                            self.owned
                        );
                    }
                    self.committed = true;
                    self.settled_commits += 1;
                    assert_eq!(self.settled_commits, 1, "settled twice");
                }
                EngineCommand::PublishNotice(_)
                | EngineCommand::ReturnResult { .. }
                | EngineCommand::PublishEnd { .. } => {
                    assert!(self.committed, "published before the commit");
                }
                EngineCommand::RunTurn { after_seq, .. } => {
                    assert!(*after_seq <= self.durable);
                    if engine.shape() != Some(SubagentShape::OneShot) {
                        assert_eq!(self.durable, self.staged, "turn start not durable");
                    }
                }
                EngineCommand::HandOff { after_seq, .. } => {
                    assert!(*after_seq <= self.durable, "handed off before durable");
                    assert_eq!(self.durable, self.staged, "handed off with events staged");
                }
                EngineCommand::TakeTurn
                | EngineCommand::CancelTurn
                | EngineCommand::RecordState(_)
                | EngineCommand::Leave => {}
            }
        }
        if releasing {
            self.owned.clear();
        }
    }
}

fn event_of(step: &Step, model: &mut Model) -> EngineEvent {
    model.reply += 1;
    let reply = model.reply;
    match step.clone() {
        Step::Deliver {
            wake,
            dedup,
            request,
            settles,
        } => {
            let settled_child = settles.map(|c| sid(10 + u32::from(c)));
            let message = match &settled_child {
                Some(child) => TurnMessage::SubagentSettled {
                    sender_session_id: child.clone(),
                    summary: "s".into(),
                    changed: None,
                },
                None => TurnMessage::User {
                    content: "m".into(),
                },
            };
            EngineEvent::Deliver {
                arrival: Arrival {
                    message,
                    wake: wake || settled_child.is_some(),
                    dedup_id: dedup.map(|d| format!("child-{d}")),
                    request_id: request.map(|r| format!("req-{r}")),
                    settled_child,
                },
                reply,
            }
        }
        Step::Adopt(c) => EngineEvent::Adopt(sid(10 + u32::from(c))),
        Step::Stop => EngineEvent::Stop(StopReason::Disposed),
        Step::Release => EngineEvent::Release(StopReason::Disposed),
        Step::Recover => EngineEvent::Recover,
        Step::Begin => EngineEvent::BeginTurn,
        Step::Reply => EngineEvent::Replied {
            text: "r".into(),
            reply,
        },
        Step::Report => EngineEvent::Report {
            content: "x".into(),
            delivery: Delivery::Wakeup,
            reply,
        },
        Step::Spawn(c, true) => EngineEvent::ChildBorn {
            child: sid(10 + u32::from(c)),
            shape: SubagentShape::Continuable,
            node: NodeId::parse("node-1").unwrap(),
            run: None,
            result: None,
            reply,
        },
        Step::Spawn(_, false) => EngineEvent::BirthRefused {
            error: "no".into(),
            reply,
        },
        Step::End(0) => EngineEvent::TurnEnded(TurnOutcome::Completed),
        Step::End(1) => EngineEvent::TurnEnded(TurnOutcome::Failed("f".into())),
        Step::End(_) => EngineEvent::TurnEnded(TurnOutcome::Cancelled),
        Step::Abandon => EngineEvent::TurnAbandoned(TurnOutcome::Cancelled),
        Step::Wait(any) => {
            model.last_wait = reply;
            EngineEvent::WaitChildren {
                children: None,
                mode: if any { WaitMode::Any } else { WaitMode::All },
                reply,
            }
        }
        Step::WaitExpire => EngineEvent::WaitExpired {
            reply: model.last_wait,
        },
        Step::Quiesce => EngineEvent::Quiesce,
        Step::HandOff => EngineEvent::HandOff,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn x2_m3_engine_keeps_its_promises_under_any_sequence(
        shape in prop_oneof![Just(None), Just(Some(SubagentShape::Continuable)), Just(Some(SubagentShape::OneShot))],
        steps in proptest::collection::vec(step(), 0..60),
    ) {
        let init = EngineInit { wake_on: Default::default(),
            session: sid(2),
            parent: shape.map(|_| sid(1)),
            shape,
            label: None,
            descriptor_pending: shape == Some(SubagentShape::OneShot),
        };
        let (mut engine, first) = fold(init, &[], 0, false, 0).unwrap();
        let mut model = Model::default();
        model.run(&engine, &EngineEvent::Recover, &first);
        let mut quiesced = false;
        for (i, s) in steps.iter().enumerate() {
            let event = event_of(s, &mut model);
            let left_before = engine.has_left();
            let cmds = engine.handle(event.clone(), i as u64);
            // K1, graceful shutdown: once quiesced, no turn starts (a one-shot is never
            // quiesced); a hand-off never comes with a settlement.
            quiesced |= matches!(event, EngineEvent::Quiesce) && shape != Some(SubagentShape::OneShot);
            let turn = cmds.iter().any(|c| matches!(c, EngineCommand::TakeTurn | EngineCommand::RunTurn { .. }));
            prop_assert!(!(quiesced && turn), "a turn after quiesce: {:?}", cmds);
            let handed_off = cmds.iter().any(|c| matches!(c, EngineCommand::HandOff { .. }));
            let commits = cmds.iter().any(|c| matches!(c, EngineCommand::CommitSettlement { .. }));
            prop_assert!(!(handed_off && commits), "a hand-off with a settlement: {:?}", cmds);
            prop_assert!(!handed_off || (!left_before && engine.has_left()));
            // The model's own account of owned children (not the engine's): what a live agent
            // that is not stopping adopts or spawns continuable, minus children whose
            // settlement notice it accepted.
            let accepted = cmds.iter().any(|c| matches!(c, EngineCommand::Stage { event: JournalEvent::Accepted(_), .. }));
            match &event {
                EngineEvent::Adopt(c)
                | EngineEvent::ChildBorn { child: c, shape: SubagentShape::Continuable, .. }
                    if !left_before && !model.stopping && shape.is_some() => {
                    model.owned.insert(c.clone());
                }
                EngineEvent::Deliver { arrival, .. } if accepted => {
                    if let Some(c) = &arrival.settled_child {
                        model.owned.remove(c);
                    }
                }
                EngineEvent::Stop(_) | EngineEvent::Release(_) => model.stopping = true,
                _ => {}
            }
            model.run(&engine, &event, &cmds);
        }
        for (key, n) in &model.once {
            prop_assert_eq!(*n, 1, "{} accepted {} times", key, n);
        }
        if shape.is_none() {
            prop_assert!(!model.committed);
        }
    }
}
