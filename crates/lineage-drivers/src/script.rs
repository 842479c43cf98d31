//! The deterministic scripted agent (H1): for demos, tests and benchmarks.
//!
//! A [`Script`] is a list of turns, each a list of [`Step`]s, plus what to do once the turns run
//! out ([`AfterScript`], by default: reply `"done"`). Interpretation is pure: turn `i` gives the
//! same [`DriverAction`]s every time ([`ScriptActions::actions_for`]), so a cold-resumed scripted agent
//! continues exactly where it left off (the turn index counts every turn ever taken).
//!
//! JSON (TOML is the same shape):
//!
//! ```json
//! {"turns": [
//!    [{"do": "reply", "content": "starting"},
//!     {"do": "spawn", "shape": "continuable", "prompt": "dig",
//!      "agent": {"driver": "script", "script": {"turns": [[{"do": "report", "content": "found it", "delivery": "wakeup"}]]}}},
//!     {"do": "wait_children"}],
//!    [{"do": "echo"}]
//!  ],
//!  "after": {"do": "reply", "content": "done"}}
//! ```

use crate::driver::{
    ActionOutcome, AgentDriver, AgentSpec, BoxFuture, ChildSpec, DriverAction, DriverStart,
    TurnAction, TurnCtx, TurnInput, TurnMessage,
};
use crate::error::DriverError;
use lineage_core::ids::SessionId;

pub use lineage_protocol::script::{AfterScript, Script, Step, SCRIPT_PROVIDER};

/// The interpretation of a [`Script`] (its data is `lineage_protocol::script`).
pub trait ScriptActions {
    /// The actions of one turn: pure, deterministic.
    fn actions_for(&self, input: &TurnInput) -> Vec<DriverAction>;
    /// The steps of one turn (what is done after the script's turns run out, as steps).
    fn steps_for(&self, input: &TurnInput) -> Vec<Step>;
}

impl ScriptActions for Script {
    fn steps_for(&self, input: &TurnInput) -> Vec<Step> {
        let index = usize::try_from(input.turn_index).unwrap_or(usize::MAX);
        match self.turns.get(index) {
            Some(steps) => steps.clone(),
            None => match &self.after {
                AfterScript::Reply { content } => vec![Step::Reply {
                    content: content.clone(),
                }],
                AfterScript::Echo => vec![Step::Echo],
                AfterScript::RepeatLast => match self.turns.last() {
                    Some(steps) => steps.clone(),
                    None => vec![Step::Reply {
                        content: "done".to_owned(),
                    }],
                },
                AfterScript::Fail { reason } => vec![Step::Fail {
                    reason: reason.clone(),
                }],
            },
        }
    }

    fn actions_for(&self, input: &TurnInput) -> Vec<DriverAction> {
        let index = usize::try_from(input.turn_index).unwrap_or(usize::MAX);
        match self.turns.get(index) {
            Some(steps) => steps.iter().filter_map(|s| step_action(s, input)).collect(),
            None => match &self.after {
                AfterScript::Reply { content } => vec![DriverAction::Reply(content.clone())],
                AfterScript::Echo => vec![DriverAction::Reply(echo(input))],
                AfterScript::RepeatLast => match self.turns.last() {
                    Some(steps) => steps.iter().filter_map(|s| step_action(s, input)).collect(),
                    None => vec![DriverAction::Reply("done".to_owned())],
                },
                AfterScript::Fail { reason } => vec![DriverAction::Fail(reason.clone())],
            },
        }
    }
}

/// The text of a turn's input, one message a line.
fn echo(input: &TurnInput) -> String {
    input
        .messages
        .iter()
        .map(TurnMessage::render)
        .collect::<Vec<_>>()
        .join("\n")
}

/// A step as data; `None` for the steps that act only during a turn (followup, interrupt,
/// list, await: see [`ScriptDriver`]'s `turn_with`).
fn step_action(step: &Step, input: &TurnInput) -> Option<DriverAction> {
    Some(match step {
        Step::Reply { content } => DriverAction::Reply(content.clone()),
        Step::Echo => DriverAction::Reply(echo(input)),
        Step::Report { content, delivery } => DriverAction::Report {
            content: content.clone(),
            delivery: *delivery,
        },
        Step::Spawn {
            shape,
            agent,
            prompt,
            node,
            label,
            persona,
            tool_filter,
            timeout_ms,
            workspace,
            wait: _,
        } => DriverAction::Spawn(Box::new(ChildSpec {
            shape: *shape,
            agent: agent.as_deref().cloned().unwrap_or(AgentSpec::Script {
                script: Script::done(),
            }),
            prompt: prompt.clone(),
            node: node.clone(),
            label: label.clone(),
            persona: persona.clone(),
            tool_filter: tool_filter.clone(),
            timeout_ms: *timeout_ms,
            budget: None,
            workspace: workspace.clone(),
            session: None,
        })),
        // Only meaningful during a turn (see `ScriptDriver::turn_with`); as data it is the reply
        // a turn without a spawn gives.
        Step::ReplyResult => DriverAction::Reply("no spawn".to_owned()),
        Step::WaitChildren => DriverAction::WaitChildren,
        Step::Sleep { ms } => DriverAction::SleepMs(*ms),
        Step::Fail { reason } => DriverAction::Fail(reason.clone()),
        Step::Followup { .. }
        | Step::Interrupt { .. }
        | Step::ListChildren
        | Step::Usage { .. }
        | Step::AwaitChildren { .. } => return None,
    })
}

/// The action of a step that acts only during a turn, given the last child born in it.
fn turn_action(step: &Step, last_child: Option<&SessionId>) -> Option<Result<TurnAction, String>> {
    let child = |named: &Option<SessionId>| {
        named
            .clone()
            .or_else(|| last_child.cloned())
            .ok_or_else(|| "no child named and none spawned in this turn".to_owned())
    };
    Some(match step {
        Step::Followup {
            child: named,
            content,
        } => child(named).map(|child| TurnAction::Followup {
            child,
            content: content.clone(),
        }),
        Step::Interrupt { child: named } => {
            child(named).map(|child| TurnAction::Interrupt { child })
        }
        Step::ListChildren => Ok(TurnAction::ListChildren),
        Step::Usage {
            tokens,
            cost_micros,
            currency,
        } => Ok(TurnAction::Usage(lineage_core::usage::SessionUsage {
            used_tokens: *tokens,
            size_tokens: None,
            cost_micros: *cost_micros,
            currency: currency.clone(),
        })),
        Step::AwaitChildren {
            children,
            mode,
            timeout_ms,
        } => Ok(TurnAction::WaitChildren {
            children: children.clone(),
            mode: *mode,
            timeout_ms: *timeout_ms,
        }),
        _ => return None,
    })
}

/// The text a `reply_result` step replies with: the outcome of the turn's last action step.
/// Waits for the spawns asked with `"await": false` (side by side) and renders each answer as
/// one line: `<child>: <its result>` for a one-shot child, `spawned <child>`, or `refused: ...`.
async fn collect(
    spawning: Vec<BoxFuture<'static, ActionOutcome>>,
    last_child: &mut Option<SessionId>,
) -> Vec<String> {
    let outcomes = futures::future::join_all(spawning).await;
    outcomes
        .iter()
        .map(|outcome| {
            let text = outcome_text(Some(outcome));
            match outcome {
                ActionOutcome::Born {
                    child,
                    result: Some(_),
                } => {
                    *last_child = Some(child.clone());
                    format!("{child}: {text}")
                }
                ActionOutcome::Born { child, .. } => {
                    *last_child = Some(child.clone());
                    text
                }
                _ => text,
            }
        })
        .collect()
}

/// An await's outcome as `reply_result` says it, after the collected spawns' lines.
fn with_collected(collected: Vec<String>, outcome: &ActionOutcome) -> String {
    let text = outcome_text(Some(outcome));
    if collected.is_empty() {
        return text;
    }
    let mut lines = collected;
    if text != "(nothing arrived)" {
        lines.push(text);
    }
    lines.join("\n")
}

fn outcome_text(outcome: Option<&ActionOutcome>) -> String {
    match outcome {
        None => "no spawn".to_owned(),
        Some(ActionOutcome::Born {
            result: Some(result),
            ..
        }) => result
            .output
            .clone()
            .unwrap_or_else(|| result.stop_reason.as_str().to_owned()),
        Some(ActionOutcome::Born {
            child,
            result: None,
        }) => format!("spawned {child}"),
        Some(ActionOutcome::Refused(e)) => format!("refused: {e}"),
        Some(ActionOutcome::Done) => "done".to_owned(),
        Some(ActionOutcome::ChildTask(view)) => format!(
            "{} {}",
            view.session,
            view.stop_reason
                .map_or(view.state.as_str(), |stop| stop.as_str())
        ),
        Some(ActionOutcome::Applied { changed, already }) => {
            format!("applied {} change(s), {already} already so", changed.len())
        }
        Some(ActionOutcome::Arrived { messages, complete }) => {
            let mut lines: Vec<String> = messages.iter().map(TurnMessage::render).collect();
            if lines.is_empty() {
                lines.push("(nothing arrived)".to_owned());
            }
            if !complete {
                lines.push("(timed out)".to_owned());
            }
            lines.join("\n")
        }
        Some(ActionOutcome::Children(children)) => children
            .iter()
            .map(|c| {
                format!(
                    "{} {} {}",
                    c.label.as_deref().unwrap_or("-"),
                    c.state.as_str(),
                    c.last_report.as_deref().unwrap_or("-")
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// The scripted [`AgentDriver`]: interprets a [`Script`].
#[derive(Debug, Clone)]
pub struct ScriptDriver {
    script: Script,
    started: bool,
}

impl ScriptDriver {
    /// A driver for `script`.
    pub fn new(script: Script) -> Self {
        ScriptDriver {
            script,
            started: false,
        }
    }
}

impl AgentDriver for ScriptDriver {
    fn start<'a>(&'a mut self, _start: DriverStart) -> BoxFuture<'a, Result<(), DriverError>> {
        self.started = true;
        Box::pin(async { Ok(()) })
    }

    fn turn<'a>(
        &'a mut self,
        input: TurnInput,
    ) -> BoxFuture<'a, Result<Vec<DriverAction>, DriverError>> {
        let actions = self.script.actions_for(&input);
        Box::pin(async move { Ok(actions) })
    }

    /// Runs the turn's actions through `ctx`, in order, so a step sees the outcome of the ones
    /// before it (a `reply_result` after a spawn); a `fail` step ends the turn there. A reply is
    /// streamed to the context's output word by word before it is recorded.
    fn turn_with<'a>(
        &'a mut self,
        input: TurnInput,
        ctx: TurnCtx,
    ) -> BoxFuture<'a, Result<Vec<DriverAction>, DriverError>> {
        let steps = self.script.steps_for(&input);
        Box::pin(async move {
            // What `reply_result` says: the last action step's outcome.
            let mut last_outcome: Option<String> = None;
            let mut last_child: Option<SessionId> = None;
            // Spawns asked with `"await": false`, whose answers the next await collects.
            let mut spawning: Vec<BoxFuture<'static, ActionOutcome>> = Vec::new();
            for step in steps {
                if let Step::Spawn { wait: false, .. } = &step {
                    if let Some(DriverAction::Spawn(spec)) = step_action(&step, &input) {
                        spawning.push(Box::pin(ctx.act_later(TurnAction::Spawn(spec))));
                        last_outcome =
                            Some("spawning (the next await_children collects it)".into());
                    }
                    continue;
                }
                if let Some(action) = turn_action(&step, last_child.as_ref()) {
                    let collected = match &step {
                        Step::AwaitChildren { .. } => {
                            collect(std::mem::take(&mut spawning), &mut last_child).await
                        }
                        _ => Vec::new(),
                    };
                    let outcome = match action {
                        Ok(action) => ctx.act(action).await,
                        Err(e) => ActionOutcome::Refused(e),
                    };
                    last_outcome = Some(with_collected(collected, &outcome));
                    continue;
                }
                let action = match &step {
                    Step::ReplyResult => DriverAction::Reply(
                        last_outcome.clone().unwrap_or_else(|| outcome_text(None)),
                    ),
                    other => match step_action(other, &input) {
                        Some(action) => action,
                        None => continue,
                    },
                };
                let outcome = match action {
                    DriverAction::Reply(text) => {
                        // Streamed word by word as it is "written" (F1), then recorded.
                        for word in text.split_inclusive(' ') {
                            ctx.output(word);
                        }
                        ctx.act(TurnAction::Reply(text)).await
                    }
                    DriverAction::Report { content, delivery } => {
                        ctx.act(TurnAction::Report { content, delivery }).await
                    }
                    DriverAction::Spawn(spec) => {
                        let outcome = ctx.act(TurnAction::Spawn(spec)).await;
                        if let ActionOutcome::Born { child, .. } = &outcome {
                            last_child = Some(child.clone());
                        }
                        last_outcome = Some(outcome_text(Some(&outcome)));
                        continue;
                    }
                    DriverAction::WaitChildren => continue,
                    DriverAction::SleepMs(ms) => {
                        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                        continue;
                    }
                    DriverAction::Fail(reason) => return Ok(vec![DriverAction::Fail(reason)]),
                };
                if let ActionOutcome::Refused(e) = outcome {
                    return Ok(vec![DriverAction::Fail(e)]);
                }
            }
            // What no await collected is seen through before the turn ends.
            collect(spawning, &mut last_child).await;
            Ok(Vec::new())
        })
    }

    fn cancel<'a>(&'a mut self) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    fn shutdown<'a>(&'a mut self) -> BoxFuture<'a, ()> {
        self.started = false;
        Box::pin(async {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lineage_core::descriptor::SubagentShape;
    use lineage_core::messages::Delivery;

    fn input(turn_index: u64, texts: &[&str]) -> TurnInput {
        TurnInput {
            turn_index,
            messages: texts
                .iter()
                .map(|t| TurnMessage::User {
                    content: (*t).to_owned(),
                })
                .collect(),
        }
    }

    #[test]
    fn h1_script_turns_map_to_actions_in_order() {
        let script = Script::from_json(
            r#"{"turns": [
                [{"do": "reply", "text": "a"}, {"do": "report", "content": "r", "delivery": "wakeup"},
                 {"do": "sleep", "ms": 5}],
                [{"do": "report", "content": "q"}, {"do": "wait_children"}, {"do": "fail", "reason": "x"}]
            ]}"#,
        )
        .unwrap();
        assert_eq!(
            script.actions_for(&input(0, &[])),
            vec![
                DriverAction::Reply("a".into()),
                DriverAction::Report {
                    content: "r".into(),
                    delivery: Delivery::Wakeup
                },
                DriverAction::SleepMs(5),
            ]
        );
        assert_eq!(
            script.actions_for(&input(1, &[])),
            vec![
                DriverAction::Report {
                    content: "q".into(),
                    delivery: Delivery::Quiet
                },
                DriverAction::WaitChildren,
                DriverAction::Fail("x".into()),
            ]
        );
    }

    #[test]
    fn h1_exhausted_script_replies_done_by_default() {
        let script = Script::done();
        assert_eq!(
            script.actions_for(&input(0, &[])),
            vec![DriverAction::Reply("done".into())]
        );
        assert_eq!(
            script.actions_for(&input(u64::MAX, &[])),
            vec![DriverAction::Reply("done".into())]
        );
    }

    #[test]
    fn h1_after_variants() {
        let mut script = Script {
            turns: vec![vec![Step::Reply {
                content: "x".into(),
            }]],
            after: AfterScript::RepeatLast,
        };
        assert_eq!(
            script.actions_for(&input(3, &[])),
            vec![DriverAction::Reply("x".into())]
        );
        script.after = AfterScript::Echo;
        assert_eq!(
            script.actions_for(&input(3, &["one", "two"])),
            vec![DriverAction::Reply("one\ntwo".into())]
        );
        script.after = AfterScript::Fail {
            reason: "no".into(),
        };
        assert_eq!(
            script.actions_for(&input(1, &[])),
            vec![DriverAction::Fail("no".into())]
        );
    }

    #[test]
    fn h1_spawn_step_defaults_to_a_done_script_child() {
        let script = Script::from_json(
            r#"{"turns": [[{"do": "spawn", "shape": "one-shot", "prompt": "go", "label": "L",
                 "node": "node-2", "tool_filter": ["read"]}]]}"#,
        )
        .unwrap();
        let actions = script.actions_for(&input(0, &[]));
        let [DriverAction::Spawn(spec)] = actions.as_slice() else {
            panic!("one spawn: {actions:?}");
        };
        assert_eq!(spec.shape, SubagentShape::OneShot);
        assert_eq!(spec.prompt, "go");
        assert_eq!(spec.label.as_deref(), Some("L"));
        assert_eq!(spec.node.as_ref().map(|n| n.as_str()), Some("node-2"));
        assert_eq!(spec.tool_filter, Some(vec!["read".to_owned()]));
        assert_eq!(
            spec.agent,
            AgentSpec::Script {
                script: Script::done()
            }
        );
    }

    #[test]
    fn h1_nested_script_round_trips() {
        let text = r#"{"turns":[[{"do":"spawn","shape":"continuable","agent":{"driver":"script","script":{"turns":[[{"do":"echo"}]]}},"prompt":"p"}]]}"#;
        let script = Script::from_json(text).unwrap();
        let back = Script::from_json(&serde_json::to_string(&script).unwrap()).unwrap();
        assert_eq!(back, script);
    }

    #[test]
    fn h1_malformed_scripts_are_refused_with_one_line() {
        for bad in [
            r#"{"turns": [[{"do": "dance"}]]}"#,
            r#"{"turns": [[{"do": "sleep", "ms": -1}]]}"#,
            r#"{"turns": 3}"#,
            r#"{"turnz": []}"#,
            r#"{"turns": [[{"do": "report", "content": "x", "delivery": "loud"}]]}"#,
            r#"{"turns": [[{"do": "usage", "tokens": -5}]]}"#,
            r#"{"turns": [[{"do": "usage", "tokens": 5, "cost": 0.5}]]}"#,
        ] {
            let err = Script::from_json(bad).unwrap_err().to_string();
            assert!(err.starts_with("malformed script"), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn q3_a_usage_step_is_a_usage_action_during_the_turn() {
        let script = Script::from_json(
            r#"{"turns": [[{"do": "usage", "tokens": 7, "cost_micros": 1500, "currency": "USD"}]]}"#,
        )
        .unwrap();
        let step = &script.turns[0][0];
        let action = turn_action(step, None).expect("an in-turn action").unwrap();
        assert_eq!(
            action,
            TurnAction::Usage(lineage_core::usage::SessionUsage {
                used_tokens: 7,
                size_tokens: None,
                cost_micros: Some(1500),
                currency: Some("USD".into()),
            })
        );
        assert_eq!(step_action(step, &input(0, &[])), None);
    }

    #[test]
    fn h1_driver_is_deterministic_across_instances() {
        let script =
            Script::from_json(r#"{"turns": [[{"do": "echo"}]], "after": {"do": "echo"}}"#).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (a, b) = rt.block_on(async {
            let mut d1 = ScriptDriver::new(script.clone());
            let mut d2 = ScriptDriver::new(script.clone());
            let start = |resumed| DriverStart {
                session: lineage_core::ids::SessionId::parse(
                    "01936c1e-7a3b-7cde-8f00-000000000001",
                )
                .unwrap(),
                log: vec![],
                resumed,
                composition: Default::default(),
            };
            d1.start(start(false)).await.unwrap();
            d2.start(start(true)).await.unwrap();
            let a = d1.turn(input(1, &["hi"])).await.unwrap();
            let b = d2.turn(input(1, &["hi"])).await.unwrap();
            (a, b)
        });
        assert_eq!(a, b);
        assert_eq!(a, vec![DriverAction::Reply("hi".into())]);
    }
}
