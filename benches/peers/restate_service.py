"""The Restate peer of `lineage bench peers` (issue 14): a parent handler that calls a child
handler and awaits its result, the work lineage's one-shot child spawn does. Served by
hypercorn (HTTP/2 cleartext) on a loopback port the bench chooses; the bench registers it with
the restate-server's admin API and drives the parent through the ingress."""

import restate
from restate import Context, Service

child = Service("child")


@child.handler()
async def run(ctx: Context, prompt: str) -> str:
    """The one-shot child: one turn, one reply."""
    return "done: " + prompt


parent = Service("parent")


@parent.handler()
async def spawn(ctx: Context, prompt: str) -> str:
    """The parent: a durable call to the child, awaited."""
    return await ctx.service_call(run, arg=prompt)


app = restate.app(services=[parent, child])
