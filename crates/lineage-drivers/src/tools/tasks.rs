//! MCP tasks (A3; the `io.modelcontextprotocol/tasks` extension of MCP 2026-07-28): a
//! long delegation returns a handle at once instead of holding the tool call.
//!
//! With a client that declares the extension (on the request or at `initialize`):
//!
//! | call | answer at once | `tasks/get` | `tasks/cancel` |
//! |---|---|---|---|
//! | `spawn_subagent`, one-shot | a task whose id is the child's session id, once its birth is registered | the child's state and result | interrupts the child's turn |
//! | `wait_for_children` | a task `wait-all:<id>,<id>` (or `wait-any:`) naming the children | each child's state and result; completed when all (any) finished | interrupts those still running |
//!
//! A task is not kept anywhere: its id names the children, and `tasks/get` reads them from the
//! registry and their logs ([`TurnAction::ChildTask`]), so whichever node hosts the session
//! now answers, after a cold resume too. Nothing is consumed: the children's reports and
//! settlements still reach the parent's inbox as usual. A continuable spawn already answers at
//! once, and clients without the extension get the blocking calls.
//!
//! Status: a child starting, running or waiting for its own children is `working`; one that
//! ended is `completed` (a tool result, `isError` when it failed, ran out of time or budget),
//! or `cancelled` when it was interrupted or drained. `ttlMs` is null while a child lives (a
//! task lasts as long as its children) and, once each has ended, the time until the first of
//! their records is purged (the node's `retention.disposed_after_ms`, Q5). The pure parts ([`TaskId`],
//! [`child_status`], [`detailed`]) are unit-tested.

use std::time::{Duration, UNIX_EPOCH};

use lineage_core::ids::SessionId;
use lineage_core::lifecycle::SessionState;
use lineage_core::messages::StopReason;
use rmcp::model::{
    CallToolResult, ContentBlock, CreateTaskResult, DetailedTask, JsonObject, Task, TaskPayload,
    TaskStatus,
};
use serde_json::json;

use super::args::WaitFor;
use crate::driver::ChildTaskView;

/// How often a client should poll `tasks/get`.
pub const POLL_INTERVAL_MS: u64 = 500;

/// The most children one wait task names (its id carries them).
pub const MAX_WAIT_CHILDREN: usize = 64;

/// What a task id names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskId {
    /// A one-shot child.
    Child(SessionId),
    /// A wait for these children, all of them or any.
    Wait {
        /// All or any.
        mode: WaitFor,
        /// The children, in the order the wait named them.
        children: Vec<SessionId>,
    },
}

impl TaskId {
    /// Reads a task id; one line when it is none of lineage's.
    pub fn parse(id: &str) -> Result<TaskId, String> {
        let wait = |mode, list: &str| {
            let children = list
                .split(',')
                .map(|c| SessionId::parse(c).map_err(|e| format!("{c:?}: {e}")))
                .collect::<Result<Vec<_>, _>>()?;
            match children.len() {
                0 => Err("it names no child".to_owned()),
                n if n > MAX_WAIT_CHILDREN => Err(format!(
                    "it names {n} children, more than {MAX_WAIT_CHILDREN}"
                )),
                _ => Ok(TaskId::Wait { mode, children }),
            }
        };
        let parsed = match (id.strip_prefix("wait-all:"), id.strip_prefix("wait-any:")) {
            (Some(list), _) => wait(WaitFor::All, list),
            (_, Some(list)) => wait(WaitFor::Any, list),
            _ => SessionId::parse(id)
                .map(TaskId::Child)
                .map_err(|e| e.to_string()),
        };
        parsed.map_err(|why| {
            format!(
                "task id {id:?} is not one of lineage's ({why}): use the taskId a spawn_subagent or wait_for_children call returned"
            )
        })
    }

    /// The task id on the wire.
    pub fn render(&self) -> String {
        match self {
            TaskId::Child(child) => child.to_string(),
            TaskId::Wait { mode, children } => {
                let list: Vec<&str> = children.iter().map(SessionId::as_str).collect();
                let mode = match mode {
                    WaitFor::All => "all",
                    WaitFor::Any => "any",
                };
                format!("wait-{mode}:{}", list.join(","))
            }
        }
    }

    /// The children the task reads.
    pub fn children(&self) -> Vec<SessionId> {
        match self {
            TaskId::Child(child) => vec![child.clone()],
            TaskId::Wait { children, .. } => children.clone(),
        }
    }
}

/// A child's task status, by its registry state and stop reason.
pub fn child_status(view: &ChildTaskView) -> TaskStatus {
    match view.state {
        SessionState::Starting | SessionState::Running | SessionState::Waiting => {
            TaskStatus::Working
        }
        SessionState::Settled | SessionState::Disposed => match view.stop_reason {
            Some(StopReason::Interrupted | StopReason::Disposed) => TaskStatus::Cancelled,
            Some(
                StopReason::Completed
                | StopReason::Failed
                | StopReason::MaxTurns
                | StopReason::Deadline
                | StopReason::Budget
                | StopReason::Idle,
            )
            | None => TaskStatus::Completed,
        },
    }
}

/// Whether a child's run failed (its tool result is an error).
fn failed(view: &ChildTaskView) -> bool {
    matches!(
        view.stop_reason,
        Some(StopReason::Failed | StopReason::MaxTurns | StopReason::Deadline | StopReason::Budget)
    )
}

/// A child as JSON, as the blocking `spawn_subagent` answers it.
pub fn child_json(view: &ChildTaskView) -> serde_json::Value {
    let mut json = json!({
        "child": view.session,
        "state": view.state.as_str(),
    });
    if let Some(output) = &view.output {
        json["output"] = json!(output);
    }
    if let Some(stop) = view.stop_reason {
        json["stop_reason"] = json!(stop.as_str());
    }
    json
}

/// ISO 8601 of a time in ms since the epoch.
fn iso(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

fn tool_result(result: CallToolResult) -> JsonObject {
    match serde_json::to_value(result) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => JsonObject::new(),
    }
}

/// The task `id` over `views` (one per child it names, in order), as `tasks/get` answers.
pub fn detailed(id: &TaskId, views: &[ChildTaskView]) -> DetailedTask {
    let created = views.iter().map(|v| v.created_at_ms).min().unwrap_or(0);
    let updated = views.iter().map(|v| v.updated_at_ms).max().unwrap_or(0);
    let statuses: Vec<TaskStatus> = views.iter().map(child_status).collect();
    let done = statuses.iter().filter(|s| s.is_terminal()).count();
    let mut base = Task::new(id.render(), TaskStatus::Working, iso(created), iso(updated))
        .with_poll_interval_ms(POLL_INTERVAL_MS);
    // Readable until the first of its children is purged, once all of them have an end.
    base.ttl_ms = views
        .iter()
        .map(|v| v.readable_for_ms)
        .collect::<Option<Vec<u64>>>()
        .and_then(|ttls| ttls.into_iter().min());
    let payload = match id {
        TaskId::Child(_) => match (views.first(), statuses.first()) {
            (Some(view), Some(TaskStatus::Completed)) => {
                let text = ContentBlock::text(child_json(view).to_string());
                TaskPayload::Completed {
                    result: tool_result(match failed(view) {
                        true => CallToolResult::error(vec![text]),
                        false => CallToolResult::success(vec![text]),
                    }),
                }
            }
            (Some(_), Some(TaskStatus::Cancelled)) => TaskPayload::Cancelled,
            _ => TaskPayload::Working,
        },
        TaskId::Wait { mode, .. } => {
            let over = match mode {
                WaitFor::All => done == views.len(),
                WaitFor::Any => done > 0,
            };
            match over {
                true => {
                    let children: Vec<_> = views.iter().map(child_json).collect();
                    let text = json!({"complete": true, "children": children}).to_string();
                    TaskPayload::Completed {
                        result: tool_result(CallToolResult::success(vec![ContentBlock::text(
                            text,
                        )])),
                    }
                }
                false => TaskPayload::Working,
            }
        }
    };
    let message = match id {
        TaskId::Child(child) => format!(
            "child {child}: {}",
            views.first().map_or("unknown", |v| v.state.as_str())
        ),
        TaskId::Wait { .. } => format!("{done} of {} children finished", views.len()),
    };
    DetailedTask::new(base.with_status_message(message), payload)
}

/// The handle a call answers with at once: the task as it stands.
pub fn handle(id: &TaskId, views: &[ChildTaskView]) -> CreateTaskResult {
    CreateTaskResult::new(detailed(id, views).task)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sid(n: u8) -> SessionId {
        SessionId::parse(&format!("01936c1e-7a3b-7cde-8f00-0000000000{n:02}")).unwrap()
    }

    fn view(n: u8, state: SessionState, stop: Option<StopReason>) -> ChildTaskView {
        ChildTaskView {
            session: sid(n),
            state,
            stop_reason: stop,
            shape: None,
            output: Some(format!("out {n}")),
            last_turn: None,
            created_at_ms: 1_000 + u64::from(n),
            updated_at_ms: 2_000 + u64::from(n),
            readable_for_ms: None,
        }
    }

    #[test]
    fn a3_task_ids_round_trip_and_bad_ones_are_one_line() {
        for id in [
            TaskId::Child(sid(1)),
            TaskId::Wait {
                mode: WaitFor::Any,
                children: vec![sid(1), sid(2)],
            },
        ] {
            assert_eq!(TaskId::parse(&id.render()), Ok(id.clone()));
        }
        for bad in ["", "x", "wait-all:", "wait-none:x", "wait-any:nope"] {
            let why = TaskId::parse(bad).unwrap_err();
            assert!(
                !why.contains('\n') && why.contains("taskId"),
                "{bad}: {why}"
            );
        }
        let many: Vec<String> = (0..=MAX_WAIT_CHILDREN)
            .map(|_| sid(1).to_string())
            .collect();
        assert!(TaskId::parse(&format!("wait-all:{}", many.join(","))).is_err());
    }

    #[test]
    fn a3_a_child_is_working_until_it_ends_then_completed_failed_or_cancelled() {
        use SessionState::*;
        let cases = [
            (Starting, None, TaskStatus::Working),
            (Running, None, TaskStatus::Working),
            (Waiting, None, TaskStatus::Working),
            (Settled, Some(StopReason::Completed), TaskStatus::Completed),
            (Disposed, Some(StopReason::Deadline), TaskStatus::Completed),
            (
                Disposed,
                Some(StopReason::Interrupted),
                TaskStatus::Cancelled,
            ),
            (Disposed, Some(StopReason::Disposed), TaskStatus::Cancelled),
        ];
        for (state, stop, want) in cases {
            assert_eq!(
                child_status(&view(1, state, stop)),
                want,
                "{state:?} {stop:?}"
            );
        }
        let id = TaskId::Child(sid(1));
        let done = detailed(&id, &[view(1, Disposed, Some(StopReason::Completed))]);
        let TaskPayload::Completed { result } = &done.payload else {
            panic!("{done:?}")
        };
        assert_eq!(result["isError"], false);
        assert!(result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("out 1"));
        let late = detailed(&id, &[view(1, Disposed, Some(StopReason::Deadline))]);
        let TaskPayload::Completed { result } = &late.payload else {
            panic!("{late:?}")
        };
        assert_eq!(result["isError"], true);
        assert_eq!(done.task.task_id, sid(1).to_string());
        assert_eq!(done.task.poll_interval_ms, Some(POLL_INTERVAL_MS));
        assert!(
            done.task.created_at.starts_with("1970-01-01T00:00:01"),
            "{done:?}"
        );
    }

    #[test]
    fn a3_a_wait_is_over_when_all_or_any_of_its_children_ended() {
        use SessionState::*;
        let views = [
            view(1, Settled, Some(StopReason::Completed)),
            view(2, Running, None),
        ];
        let children = vec![sid(1), sid(2)];
        let all = TaskId::Wait {
            mode: WaitFor::All,
            children: children.clone(),
        };
        let any = TaskId::Wait {
            mode: WaitFor::Any,
            children,
        };
        assert_eq!(detailed(&all, &views).status(), TaskStatus::Working);
        assert_eq!(detailed(&any, &views).status(), TaskStatus::Completed);
        let both = [views[0].clone(), view(2, Settled, Some(StopReason::Failed))];
        let over = detailed(&all, &both);
        let TaskPayload::Completed { result } = &over.payload else {
            panic!("{over:?}")
        };
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("out 1") && text.contains("out 2") && text.contains("failed"));
        assert_eq!(
            over.task.status_message.as_deref(),
            Some("2 of 2 children finished")
        );
        assert_eq!(
            over.task.ttl_ms, None,
            "readable for ever: no retention known"
        );
        let mut kept = both.clone();
        kept[0].readable_for_ms = Some(9_000);
        assert_eq!(
            detailed(&all, &kept).task.ttl_ms,
            None,
            "one child without an end"
        );
        kept[1].readable_for_ms = Some(7_000);
        assert_eq!(
            detailed(&all, &kept).task.ttl_ms,
            Some(7_000),
            "the first purge"
        );
    }
}
