"""The Temporal peer of `lineage bench peers` (issue 14): a parent workflow that starts a child
workflow and awaits its result, the work lineage's one-shot child spawn does. One process: a
worker (both workflows, one task queue) and a client that runs `--ops` parent workflows from
`--clients` concurrent callers after `--warmup` of them, timing each `execute_workflow` from
start to result. Prints one JSON line: {"n", "wall_s", "latencies_us": [...]} (or {"error"}).
Every wait is bounded (`--timeout` seconds per workflow)."""

import argparse
import asyncio
import json
import sys
import time
import uuid
from datetime import timedelta

from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

QUEUE = "lineage-bench-peers"


@workflow.defn
class Child:
    """The one-shot child: one turn, one reply."""

    @workflow.run
    async def run(self, prompt: str) -> str:
        return "done: " + prompt


@workflow.defn
class Parent:
    """The parent: starts the child workflow and awaits its result."""

    @workflow.run
    async def run(self, prompt: str) -> str:
        return await workflow.execute_child_workflow(Child.run, prompt)


async def batch(client: Client, ops: int, clients: int, timeout: float):
    latencies = []
    next_op = iter(range(ops))

    async def caller():
        for _ in next_op:
            t = time.perf_counter()
            result = await client.execute_workflow(
                Parent.run,
                "go",
                id="parent-" + uuid.uuid4().hex,
                task_queue=QUEUE,
                execution_timeout=timedelta(seconds=timeout),
            )
            if not result.startswith("done"):
                raise RuntimeError("unexpected child result: " + repr(result))
            latencies.append(int((time.perf_counter() - t) * 1e6))

    start = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(max(1, clients))))
    return latencies, time.perf_counter() - start


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--address", required=True)
    p.add_argument("--ops", type=int, required=True)
    p.add_argument("--clients", type=int, required=True)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--timeout", type=float, default=60.0)
    a = p.parse_args()
    client = await asyncio.wait_for(Client.connect(a.address, namespace="default"), 30)
    async with Worker(
        client,
        task_queue=QUEUE,
        workflows=[Parent, Child],
        max_concurrent_workflow_tasks=max(64, a.clients * 2),
    ):
        await batch(client, a.warmup, min(a.warmup, a.clients), a.timeout)
        latencies, wall = await batch(client, a.ops, a.clients, a.timeout)
    print(json.dumps({"n": len(latencies), "wall_s": wall, "latencies_us": latencies}))


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Exception as e:  # one JSON line either way: the bench reports the reason
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        sys.exit(1)
