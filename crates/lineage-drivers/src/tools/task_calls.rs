//! The MCP task calls of [`DelegationTools`] (A3): a one-shot `spawn_subagent` or a
//! `wait_for_children` answered with a task handle, and `tasks/get` / `tasks/cancel` over it.
//! What a task is and how it reads is [`super::tasks`]; this file only drives the turn's
//! actions.

use std::time::Duration;

use lineage_core::ids::SessionId;
use lineage_core::lifecycle::SessionState;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, TaskStatus,
};
use rmcp::ErrorData;

use super::args::{Shape, SpawnSubagent, WaitForChildren};
use super::tasks::{child_status, handle, TaskId, MAX_WAIT_CHILDREN};
use super::{born_json, child_spec, wait_args, DelegationTools};
use crate::driver::{ActionOutcome, ChildTaskView, TurnAction};

/// How often a task spawn reads whether its child's birth is registered, and how many times
/// (30 s in all: a birth that takes longer has failed or will be refused).
const BIRTH_READ_EVERY: Duration = Duration::from_millis(50);
const BIRTH_READS: u32 = 600;

fn tool_error(why: String) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(why)]).into()
}

impl DelegationTools {
    /// `request` as a task, when it is one lineage runs as a task (a one-shot spawn, a wait
    /// for children) and the turn can mint the child's id; `None`: the blocking call.
    pub(super) async fn call_as_task(
        &self,
        request: &CallToolRequestParams,
    ) -> Option<CallToolResponse> {
        let args = serde_json::Value::Object(request.arguments.clone().unwrap_or_default());
        match request.name.as_ref() {
            "spawn_subagent" => {
                let args: SpawnSubagent = serde_json::from_value(args).ok()?;
                (args.shape == Shape::OneShot).then_some(())?;
                let ctx = self.slot.get()?;
                let child = ctx.mint_session()?;
                Some(self.spawn_task(args, child).await)
            }
            "wait_for_children" => {
                let args: WaitForChildren = serde_json::from_value(args).ok()?;
                self.wait_task(args).await
            }
            _ => None,
        }
    }

    /// A one-shot child born with id `child`: its handle once its birth is registered (or its
    /// result, should it come first; or the refusal).
    async fn spawn_task(&self, args: SpawnSubagent, child: SessionId) -> CallToolResponse {
        let mut spec = match child_spec(args) {
            Ok(spec) => spec,
            Err(why) => return tool_error(why),
        };
        spec.session = Some(child.clone());
        let Some(ctx) = self.slot.get() else {
            return tool_error(self.no_turn());
        };
        let born = ctx.act_later(TurnAction::Spawn(Box::new(spec)));
        tokio::pin!(born);
        let id = TaskId::Child(child.clone());
        for _ in 0..BIRTH_READS {
            tokio::select! {
                outcome = &mut born => return match outcome {
                    ActionOutcome::Refused(why) => tool_error(why),
                    other => CallToolResult::success(vec![ContentBlock::text(born_json(other).to_string())]).into(),
                },
                _ = tokio::time::sleep(BIRTH_READ_EVERY) => {}
            }
            let read = ctx
                .act(TurnAction::ChildTask {
                    child: child.clone(),
                })
                .await;
            if let ActionOutcome::ChildTask(view) = read {
                return handle(&id, &[view]).into();
            }
        }
        tool_error(format!(
            "the birth of child {child} was not registered within 30 s; list_children shows whether it was"
        ))
    }

    /// A wait for children as a task; `None` when there is no child to wait for (the blocking
    /// call answers that at once).
    async fn wait_task(&self, args: WaitForChildren) -> Option<CallToolResponse> {
        let (children, mode) = match wait_args(args) {
            Ok(parsed) => parsed,
            Err(why) => return Some(tool_error(why)),
        };
        let children = match children {
            Some(children) => children,
            None => match self.act(TurnAction::ListChildren).await {
                Ok(ActionOutcome::Children(listed)) => listed
                    .into_iter()
                    .filter(|c| !matches!(c.state, SessionState::Settled | SessionState::Disposed))
                    .map(|c| c.session)
                    .collect(),
                Ok(_) => Vec::new(),
                Err(why) => return Some(tool_error(why)),
            },
        };
        if children.is_empty() {
            return None;
        }
        if children.len() > MAX_WAIT_CHILDREN {
            return Some(tool_error(format!(
                "a wait task names at most {MAX_WAIT_CHILDREN} children, not {}: wait for fewer at a time",
                children.len()
            )));
        }
        let mode = match mode {
            crate::driver::WaitMode::All => super::WaitFor::All,
            crate::driver::WaitMode::Any => super::WaitFor::Any,
        };
        let id = TaskId::Wait { mode, children };
        Some(match self.views(&id).await {
            Ok(views) => handle(&id, &views).into(),
            Err(why) => tool_error(why),
        })
    }

    /// Each child the task names, read now.
    async fn views(&self, id: &TaskId) -> Result<Vec<ChildTaskView>, String> {
        let mut views = Vec::new();
        for child in id.children() {
            match self.act(TurnAction::ChildTask { child }).await? {
                ActionOutcome::ChildTask(view) => views.push(view),
                other => return Err(format!("unexpected answer {other:?}")),
            }
        }
        Ok(views)
    }

    /// `tasks/get`.
    pub(super) async fn read_task(
        &self,
        task_id: &str,
    ) -> Result<rmcp::model::DetailedTask, ErrorData> {
        let id = TaskId::parse(task_id).map_err(|why| ErrorData::invalid_params(why, None))?;
        let views = self
            .views(&id)
            .await
            .map_err(|why| ErrorData::invalid_params(why, None))?;
        Ok(super::tasks::detailed(&id, &views))
    }

    /// `tasks/cancel`: interrupts every child of the task still working; refused, in one line,
    /// when none is.
    pub(super) async fn cancel(&self, task_id: &str) -> Result<(), ErrorData> {
        let invalid = |why: String| ErrorData::invalid_params(why, None);
        let id = TaskId::parse(task_id).map_err(invalid)?;
        let views = self.views(&id).await.map_err(invalid)?;
        let working: Vec<SessionId> = views
            .iter()
            .filter(|v| child_status(v) == TaskStatus::Working)
            .map(|v| v.session.clone())
            .collect();
        if working.is_empty() {
            return Err(invalid(format!(
                "task {task_id} is already finished: nothing to cancel (tasks/get shows how it ended)"
            )));
        }
        let mut refusals = Vec::new();
        for child in &working {
            if let Err(why) = self
                .act(TurnAction::Interrupt {
                    child: child.clone(),
                })
                .await
            {
                refusals.push(why);
            }
        }
        match refusals.len() == working.len() {
            true => Err(invalid(refusals.swap_remove(0))),
            false => Ok(()),
        }
    }
}
