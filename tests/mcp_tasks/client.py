"""An MCP client of lineage's delegation tools that takes MCP tasks (A3), written with the
official Python MCP SDK (PyPI `mcp` >= 2.3, installed by scripts/install-deps.sh). The SDK has
no tasks client of its own, only the means to declare one: a `ClientExtension` named
`io.modelcontextprotocol/tasks` whose `ResultClaim` takes a `tools/call` answered with
`resultType: "task"`; `tasks/get` and `tasks/cancel` go out with `session.send_request`.

A hosted agent runs it from its shell (`sh:`), so it holds the session's tools secret and
starts `lineage mcp` as the agent's own MCP server entry would. One scenario per run; it
prints one JSON object on stdout.

    client.py LINEAGE_BIN spawn PROFILE PROMPT [NODE]  a one-shot child as a task, polled to its end
    client.py LINEAGE_BIN cancel PROFILE PROMPT         a one-shot child as a task, cancelled
    client.py LINEAGE_BIN wait PROFILE PROMPT           a continuable child, then a wait task over it
    client.py LINEAGE_BIN get TASK_ID                   tasks/get of any id (errors are printed)
    client.py LINEAGE_BIN plain PROFILE PROMPT          without the extension: the blocking call
"""

import asyncio
import json
import os
import sys
import time
from typing import Any, Literal

from mcp import Client, StdioServerParameters
from mcp import types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.shared.exceptions import MCPError

TASKS = "io.modelcontextprotocol/tasks"


class TaskHandle(types.Result):
    """A `tools/call` answered with a task (`CreateTaskResult`)."""

    result_type: Literal["task"]
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None
    ttl_ms: int | None = None
    created_at: str | None = None


class TaskState(types.Result):
    """A `tasks/get` answer (`DetailedTask`)."""

    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None
    ttl_ms: int | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


async def get(session, task_id: str) -> TaskState:
    return await session.send_request(
        types.Request[dict, str](method="tasks/get", params={"taskId": task_id}), TaskState
    )


async def cancel(session, task_id: str) -> None:
    await session.send_request(
        types.Request[dict, str](method="tasks/cancel", params={"taskId": task_id}), types.Result
    )


async def poll(session, handle: TaskHandle, limit_s: float = 60.0) -> tuple[TaskState, list[str]]:
    """Polls `tasks/get` at the interval the server asked for until the task ends."""
    seen = []
    deadline = time.monotonic() + limit_s
    while True:
        state = await get(session, handle.task_id)
        if not seen or seen[-1] != state.status:
            seen.append(state.status)
        if state.status in ("completed", "failed", "cancelled") or time.monotonic() > deadline:
            return state, seen
        await asyncio.sleep((state.poll_interval_ms or 500) / 1000)


async def resolve(handle: TaskHandle, ctx: ClaimContext) -> types.CallToolResult:
    """The SDK's transparent path: a task polled to its result."""
    state, _ = await poll(ctx.session, handle)
    if state.status != "completed" or state.result is None:
        raise RuntimeError(f"task {handle.task_id} ended {state.status}")
    return types.CallToolResult.model_validate(state.result)


class Tasks(ClientExtension):
    identifier = TASKS

    def claims(self):
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=resolve)]


def result_text(result: dict[str, Any] | None) -> str:
    content = (result or {}).get("content") or []
    return "".join(c.get("text", "") for c in content if c.get("type") == "text")


async def main() -> None:
    lineage, scenario, *rest = sys.argv[1:]
    params = StdioServerParameters(command=lineage, args=["mcp"], env=dict(os.environ))
    extensions = [] if scenario == "plain" else [Tasks()]
    out: dict[str, Any] = {"scenario": scenario}
    async with Client(params, extensions=extensions) as client:
        out["protocol"] = client.protocol_version
        out["server_tasks"] = TASKS in ((client.server_capabilities.extensions or {}) if client.server_capabilities else {})
        session = client.session
        if scenario in ("spawn", "cancel"):
            profile, prompt, *node = rest
            args = {"profile": profile, "prompt": prompt, "shape": "one-shot"}
            if node:
                args["node"] = node[0]
            handle = await session.call_tool("spawn_subagent", args, allow_claimed=True)
            out["handle"] = handle.model_dump(by_alias=True)
            if not isinstance(handle, TaskHandle):
                out["error"] = "no task handle"
            else:
                if scenario == "cancel":
                    # Cancel once the child's turn runs (an interrupt needs a turn to cut):
                    # on a loaded machine its agent may take a while to start.
                    for attempt in range(40):
                        await asyncio.sleep(0.5)
                        try:
                            await cancel(session, handle.task_id)
                            break
                        except MCPError as e:
                            out["cancel_retried"] = e.message
                    else:
                        raise RuntimeError("tasks/cancel refused for 20 s: " + out["cancel_retried"])
                    try:
                        await cancel(session, "not-a-task")
                    except MCPError as e:
                        out["bad_cancel"] = e.message
                state, seen = await poll(session, handle)
                out["seen"] = seen
                out["final"] = state.model_dump(by_alias=True, exclude_none=True)
                out["final"]["ttlMs"] = state.ttl_ms
                out["text"] = result_text(state.result)
                if scenario == "cancel":
                    try:
                        await cancel(session, handle.task_id)
                    except MCPError as e:
                        out["cancel_again"] = e.message
        elif scenario == "wait":
            profile, prompt = rest
            born = await client.call_tool(
                "spawn_subagent", {"profile": profile, "prompt": prompt, "shape": "continuable"}
            )
            child = json.loads(result_text(born.model_dump(by_alias=True)))["child"]
            out["child"] = child
            handle = await session.call_tool(
                "wait_for_children", {"children": [child], "mode": "all"}, allow_claimed=True
            )
            out["handle"] = handle.model_dump(by_alias=True, exclude_none=True)
            if isinstance(handle, TaskHandle):
                state, seen = await poll(session, handle)
                out["seen"] = seen
                out["text"] = result_text(state.result)
            # The SDK's own path: call_tool resolves the claimed task through `resolve`.
            one = await client.call_tool(
                "spawn_subagent", {"profile": profile, "prompt": prompt + " again", "shape": "one-shot"}
            )
            out["resolved"] = result_text(one.model_dump(by_alias=True))
        elif scenario == "get":
            (task_id,) = rest
            try:
                out["final"] = (await get(session, task_id)).model_dump(by_alias=True, exclude_none=True)
            except MCPError as e:
                out["error"] = e.message
        elif scenario == "plain":
            profile, prompt = rest
            started = time.monotonic()
            result = await client.call_tool(
                "spawn_subagent", {"profile": profile, "prompt": prompt, "shape": "one-shot"}
            )
            out["text"] = result_text(result.model_dump(by_alias=True))
            out["held_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(out))


asyncio.run(main())
