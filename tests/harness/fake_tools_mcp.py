#!/usr/bin/env python3
"""A stand-in for lineage's delegation tools: a minimal MCP server over stdio (stdlib only).

    python3 tests/harness/fake_tools_mcp.py [--log FILE] [--output TEXT]

Speaks MCP's stdio transport (one JSON-RPC 2.0 message per line) with just enough of the
protocol for an agent harness to list and call tools: `initialize`, `ping`, `tools/list`,
`tools/call` (notifications such as `notifications/initialized` are ignored). It offers
`spawn_subagent`, `report_to_parent` and `list_children` with schemas shaped like lineage's
(crates/lineage-drivers/src/tools/mod.rs). Results are JSON text, like lineage's:

    spawn_subagent   -> {"child":"c-1","output":"42","stop_reason":"end_turn"}   (c-2, c-3 ... after)
    report_to_parent -> {"reported":true}
    list_children    -> {"children":[...the ids spawned so far...]}

`--output TEXT` replaces the child output "42". `--log FILE` appends one JSON line per
tools/call ({"tool": name, "args": {...}}) so a driver can assert what the agent called.
"""
import argparse
import json
import sys

TOOLS = [
    {
        "name": "spawn_subagent",
        "description": "Start a child agent on a task. shape one-shot: waits and returns the "
        "child's output when it is done. shape continuable: returns the child's id at once.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "profile": {"type": "string", "description": "The agent profile the child runs."},
                "prompt": {"type": "string", "description": "The child's first message."},
                "shape": {"type": "string", "enum": ["one-shot", "continuable"]},
                "label": {"type": "string", "description": "A short name for the child."},
            },
            "required": ["prompt", "shape"],
        },
    },
    {
        "name": "report_to_parent",
        "description": "Tell your parent agent something now, before you finish.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "content": {"type": "string"},
                "delivery": {"type": "string", "enum": ["quiet", "wakeup"]},
            },
            "required": ["content"],
        },
    },
    {
        "name": "list_children",
        "description": "List your children: state, shape, node, label, last report.",
        "inputSchema": {"type": "object", "properties": {}},
    },
]


def compact(value):
    return json.dumps(value, separators=(",", ":"))


def main():
    ap = argparse.ArgumentParser(description="fake lineage MCP tools over stdio")
    ap.add_argument("--log", help="append one JSON line per tools/call")
    ap.add_argument("--output", default="42", help="the output spawned children report")
    opts = ap.parse_args()
    children = []

    def reply(msg_id, result=None, error=None):
        msg = {"jsonrpc": "2.0", "id": msg_id}
        if error is not None:
            msg["error"] = error
        else:
            msg["result"] = result
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()

    def call(name, args):
        if opts.log:
            with open(opts.log, "a") as f:
                f.write(json.dumps({"tool": name, "args": args}) + "\n")
        if name == "spawn_subagent":
            if not isinstance(args.get("prompt"), str):
                return True, "prompt is required"
            child = "c-%d" % (len(children) + 1)
            children.append(child)
            return False, compact({"child": child, "output": opts.output, "stop_reason": "end_turn"})
        if name == "report_to_parent":
            return False, compact({"reported": True})
        if name == "list_children":
            return False, compact({"children": [{"child": c, "state": "settled"} for c in children]})
        return True, "unknown tool %r" % name

    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        method, msg_id = msg.get("method"), msg.get("id")
        if method is None or msg_id is None:
            continue  # a notification or a response: nothing to answer
        params = msg.get("params") or {}
        if method == "initialize":
            reply(msg_id, {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "lineage", "version": "0.0.0-fake"},
            })
        elif method == "ping":
            reply(msg_id, {})
        elif method == "tools/list":
            reply(msg_id, {"tools": TOOLS})
        elif method == "tools/call":
            is_error, text = call(params.get("name"), params.get("arguments") or {})
            reply(msg_id, {"content": [{"type": "text", "text": text}], "isError": is_error})
        else:
            reply(msg_id, error={"code": -32601, "message": "method not found: %s" % method})


if __name__ == "__main__":
    main()
