#!/usr/bin/env python3
"""A scripted fake LLM: the model APIs of Claude Code, Codex and Gemini CLI on one port.

    python3 tests/harness/model_server.py --script SCRIPT.json [--port 0] [--record FILE]

Listens on 127.0.0.1:PORT (0: any free port), prints `port N` as its first stdout line, and
serves (stdlib only, dispatch by path):

    anthropic  POST /v1/messages (SSE if "stream"), POST /v1/messages/count_tokens
    openai     POST /v1/responses (SSE), GET /v1/models
    gemini     POST /v1beta/models/M:streamGenerateContent (SSE), :generateContent, :countTokens

Claude: ANTHROPIC_BASE_URL=http://127.0.0.1:N. Gemini: GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:N.
Codex: a model provider with base_url "http://127.0.0.1:N/v1", wire_api "responses".
(try_harness.py shows each harness's full environment.)

SCRIPT: {"rules": [RULE, ...]} (or a bare list). Each *turn* request (one offering tools) is
answered by the first rule not used yet whose `when` matches; a rule is used up by answering
unless "repeat": true. Side requests (below) never use rules.

    RULE  = {"when": WHEN, "reply": REPLY, "repeat": false, "delay_ms": 0, "comment": "..."}
    WHEN  = all keys optional, all must hold; a value is a string or a list (all must hold):
      "last_user_contains":   the latest user message (the prompt) contains it
      "tool_result_contains": the latest tool result after that message contains it
      "system_contains":      the system prompt (+ developer/system messages) contains it
      "last_is":              "user" (the request ends with a prompt) or "tool_result"
      "api":                  "anthropic" | "openai" | "gemini"
      "tool_offered":         the request offers this tool (short or full name)
    REPLY = {"text": "..."} and/or {"tool": NAME, "args": {...}} (text first, then the call)
      "{tool_result}" and "{last_user}" in the text are replaced by those texts; an argument
      "{tool_result:a.0.b}" by that value of the latest tool result's JSON, and "{cwd}" in an
      argument by the agent's working directory as its harness states it.
      A Codex freeform tool (apply_patch) is called with args {"input": TEXT}.
      NAME, e.g. "spawn_subagent", is mapped to the name the harness offers: Claude
      `mcp__lineage__spawn_subagent`, Codex `spawn_subagent` in namespace `mcp__lineage`,
      Gemini `mcp_lineage_spawn_subagent` (exact names, then `__NAME`/`_NAME` suffixes,
      `lineage` ones first). Claude defers MCP tools: the server first answers with a
      `ToolSearch` call (`select:<name>`), then, to the request with its result, the reply.
Tool results are unwrapped before matching: Codex's "Wall time..\nOutput:\n[content JSON]"
and Gemini's <untrusted_context> wrapper become the MCP result's text.
A turn request no rule matches gets the text "model_server: no rule matched" (and a stderr
line). A bad script: one line on stderr, exit 2.

Side requests: count_tokens / countTokens (a rough count); Claude's auto-mode classifier
(allowed: "<block>no</block>" or "<severity>5</severity>", per its format), its prompt
suggestion (empty); requests with a JSON schema (Claude's title, Gemini's routing and
next-speaker checks) get a value built from the schema; anything else "ok".

RECORD: one JSON line per request, appended and flushed when it is answered (a rule with
delay_ms: when it arrives, with "delayed_ms", before the wait):
    {"seq", "api", "path", "kind": "turn"|"side", "system", "tools", "deferred_tools",
     "last_user", "last_tool_result", "last_is", "rule": index|null, "reply", "headers", "body"}
`tools`: every tool name the model may call (Claude: including deferred ones, also listed in
`deferred_tools`; Codex: a namespaced tool as "<namespace>__<name>"). `body`: the request JSON.
"""
import argparse
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WHEN_KEYS = {"last_user_contains", "tool_result_contains", "system_contains", "last_is",
             "api", "tool_offered"}
RULE_KEYS = {"when", "reply", "repeat", "delay_ms", "comment"}
REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>\s*", re.S)


def load_script(path):
    """The rules of a script file; raises ValueError with one line on any fault."""
    try:
        with open(path) as f:
            script = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError("cannot read script %s: %s" % (path, str(e).splitlines()[0]))
    rules = script.get("rules") if isinstance(script, dict) else script
    if not isinstance(rules, list):
        raise ValueError("script %s: expected {\"rules\": [...]} or a list" % path)
    for i, rule in enumerate(rules):
        fault = None
        if not isinstance(rule, dict) or set(rule) - RULE_KEYS:
            fault = "expected an object with keys among %s" % sorted(RULE_KEYS)
        elif not isinstance(rule.get("when", {}), dict) or set(rule.get("when", {})) - WHEN_KEYS:
            fault = "`when` keys must be among %s" % sorted(WHEN_KEYS)
        elif not all(isinstance(v, str) or (isinstance(v, list) and v and all(isinstance(x, str) for x in v))
                     for v in rule.get("when", {}).values()):
            fault = "`when` values must be strings or lists of strings"
        elif not isinstance(rule.get("reply"), dict) or not {"text", "tool"} & set(rule["reply"]) \
                or set(rule["reply"]) - {"text", "tool", "args"}:
            fault = "`reply` must hold \"text\" and/or \"tool\" (+ \"args\")"
        elif not all(isinstance(rule["reply"].get(k, ""), str) for k in ("text", "tool")) \
                or not isinstance(rule["reply"].get("args", {}), dict):
            fault = "reply.text and reply.tool must be strings, reply.args an object"
        elif not isinstance(rule.get("repeat", False), bool) \
                or not isinstance(rule.get("delay_ms", 0), (int, float)) or rule.get("delay_ms", 0) < 0:
            fault = "repeat must be true/false, delay_ms a number >= 0"
        if fault:
            raise ValueError("script %s: rule %d: %s" % (path, i, fault))
    return rules


def text_of(content):
    """The text in a string or a list of content blocks/parts of any of the three APIs."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(text_of(c) for c in content)
    if isinstance(content, dict):
        if isinstance(content.get("text"), str):
            return content["text"]
        for key in ("content", "output"):
            if key in content:
                return text_of(content[key])
    return ""


class View:
    """What the rules see of one request, whatever its API."""

    def __init__(self, api):
        self.api = api
        self.system = ""
        self.tools = []           # every callable name (Codex namespaced: ns + "__" + name)
        self.deferred = []        # Claude: names only loadable through ToolSearch
        self.codex_names = {}     # flattened name -> (namespace, name)
        self.custom = set()       # Codex: freeform tools (apply_patch), called with raw input
        self.last_user = ""
        self.last_tool_result = None
        self.last_is = None
        self.last_tool_use_id = None  # Claude: the tool_use the final tool_result answers
        self.raw = ""             # the request body as text (where a harness puts its cwd)

    def record(self):
        return {"api": self.api, "system": self.system, "tools": self.tools,
                "deferred_tools": self.deferred, "last_user": self.last_user,
                "last_tool_result": self.last_tool_result, "last_is": self.last_is}

    def _user(self, text):
        self.last_user, self.last_tool_result, self.last_is = text, None, "user"

    def _result(self, text):
        self.last_tool_result, self.last_is = text, "tool_result"


def view_anthropic(body):
    v = View("anthropic")
    v.raw = json.dumps(body)
    system = [text_of(body.get("system", ""))]
    v.tools = [t.get("name") for t in body.get("tools") or [] if t.get("name")]
    names = {}  # tool_use id -> tool name
    for msg in body.get("messages") or []:
        content = msg.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        if msg.get("role") == "system":
            system.append(text_of(blocks))
        for b in blocks:
            if b.get("type") == "tool_use":
                names[b.get("id")] = b.get("name")
        if msg.get("role") != "user":
            continue
        results = [b for b in blocks if b.get("type") == "tool_result"]
        text = REMINDER.sub("", "".join(b.get("text", "") for b in blocks if b.get("type") == "text"))
        for b in results:
            v.last_tool_use_id = b.get("tool_use_id")
            if names.get(b.get("tool_use_id")) != "ToolSearch":
                v._result(text_of(b.get("content")))
            else:
                v.last_is = "tool_result"
        if text.strip() and not results:
            v._user(text.strip())
            v.last_tool_use_id = None
    v.system = "\n".join(s for s in system if s)
    everything = v.system + "\n" + "\n".join(text_of(m.get("content")) for m in body.get("messages") or [])
    for listing in re.findall(r"deferred tools are now available via ToolSearch[^\n]*\n((?:[^\n]+\n?)*)",
                              everything):
        for name in (n.strip() for n in listing.splitlines()):
            if re.fullmatch(r"[A-Za-z0-9_\-]+", name) and name not in v.tools + v.deferred:
                v.deferred.append(name)
    v.tools = v.tools + v.deferred
    return v


def codex_output(text):
    """Codex wraps an MCP result as "Wall time: ...\nOutput:\n<content blocks JSON>": its text."""
    m = re.match(r"(?s)(?:Wall time:[^\n]*\n)?Output:\n(.*)", text)
    if not m:
        return text
    try:
        blocks = json.loads(m.group(1))
    except ValueError:
        return m.group(1)
    return text_of(blocks) if isinstance(blocks, list) else m.group(1)


def view_openai(body):
    v = View("openai")
    v.raw = json.dumps(body)
    system = [body.get("instructions") or ""]
    for t in body.get("tools") or []:
        if t.get("type") == "namespace":
            for inner in t.get("tools") or []:
                flat = "%s__%s" % (t.get("name"), inner.get("name"))
                v.codex_names[flat] = (t.get("name"), inner.get("name"))
                v.tools.append(flat)
        elif t.get("name"):
            v.tools.append(t["name"])
            if t.get("type") == "custom":
                v.custom.add(t["name"])
    for item in body.get("input") or []:
        kind, role = item.get("type", "message"), item.get("role")
        if kind == "message" and role in ("developer", "system"):
            system.append(text_of(item.get("content")))
        elif kind == "message" and role == "user":
            text = text_of(item.get("content")).strip()
            if not text.startswith("<environment_context>"):
                v._user(text)
        elif kind.endswith("_call_output"):
            v._result(codex_output(text_of(item.get("output"))))
    v.system = "\n".join(s for s in system if s)
    return v


def view_gemini(body):
    v = View("gemini")
    v.raw = json.dumps(body)
    v.system = text_of((body.get("systemInstruction") or {}).get("parts"))
    for t in body.get("tools") or []:
        v.tools += [f.get("name") for f in t.get("functionDeclarations") or []]
    for content in body.get("contents") or []:
        if content.get("role", "user") != "user":
            continue
        parts = content.get("parts") or []
        responses = [p["functionResponse"] for p in parts if "functionResponse" in p]
        for r in responses:
            text = text_of(r.get("response")) or json.dumps(r.get("response"))
            # Gemini CLI wraps an MCP result as <untrusted_context>\n...\n</untrusted_context>
            m = re.fullmatch(r"(?s)<untrusted_context>\n?(.*?)\n?</untrusted_context>", text)
            v._result(m.group(1) if m else text)
        text = "".join(p["text"] for p in parts if isinstance(p.get("text"), str)
                       and not p["text"].startswith("<session_context>")).strip()
        if text and not responses:
            v._user(text)
    return v


def resolve_tool(view, name):
    """The offered name a script's tool name stands for, or None."""
    if name in view.tools:
        return name
    for suffix in ("__" + name, "_" + name):
        hits = [t for t in view.tools if t.endswith(suffix)]
        lineage = [t for t in hits if "lineage" in t]
        if lineage or hits:
            return (lineage or hits)[0]
    return None


def matches(when, view):
    tests = {
        "last_user_contains": lambda s: s in view.last_user,
        "tool_result_contains": lambda s: view.last_tool_result is not None and s in view.last_tool_result,
        "system_contains": lambda s: s in view.system,
        "last_is": lambda s: view.last_is == s,
        "api": lambda s: view.api == s,
        "tool_offered": lambda s: resolve_tool(view, s) is not None,
    }
    return all(all(map(tests[key], value if isinstance(value, list) else [value]))
               for key, value in when.items())


class Model:
    """The script's rules, their use, and the answers they give."""

    def __init__(self, rules, record_path):
        self.rules = rules
        self.used = [False] * len(rules)
        self.lock = threading.Lock()
        self.seq = 0
        self.ids = 0
        self.pending = {}  # Claude ToolSearch tool_use id -> the rule index it prepares
        self.record_path = record_path

    def next_id(self, prefix):
        with self.lock:
            self.ids += 1
            return "%s_scripted_%d" % (prefix, self.ids)

    def answer(self, view):
        """(rule index or None, action, delay_ms): action is {"text"?, "tool"?, "args"?} with
        names mapped; the caller waits delay_ms before it answers."""
        with self.lock:
            index = self.pending.pop(view.last_tool_use_id, None) if view.last_tool_use_id else None
            if index is None:
                index = next((i for i, r in enumerate(self.rules)
                              if not self.used[i] and matches(r.get("when", {}), view)), None)
            if index is None:
                return None, {"text": "model_server: no rule matched"}, 0
            rule = self.rules[index]
            reply = rule["reply"]
            action = {}
            if "text" in reply:
                action["text"] = reply["text"].replace("{tool_result}", view.last_tool_result or "") \
                    .replace("{last_user}", view.last_user)
            if "tool" in reply:
                name = resolve_tool(view, reply["tool"])
                if name is None:
                    return index, {"text": "model_server: tool %s is not offered (offered: %s)"
                                   % (reply["tool"], ", ".join(view.tools))}, 0
                if name in view.deferred and "ToolSearch" in view.tools:
                    self.ids += 1
                    call_id = "toolu_scripted_%d" % self.ids
                    self.pending[call_id] = index
                    return index, {"tool": "ToolSearch", "id": call_id,
                                   "args": {"query": "select:" + name, "max_results": 5}}, 0
                action.update(tool=name, args=fill_args(reply.get("args", {}), view))
            if not rule.get("repeat"):
                self.used[index] = True
            delay = rule.get("delay_ms", 0)
        return index, action, delay

    def record(self, entry):
        with self.lock:
            self.seq += 1
            entry = dict(entry, seq=self.seq)
            if self.record_path:
                with open(self.record_path, "a") as f:
                    f.write(json.dumps(entry) + "\n")


# ---- wire formats --------------------------------------------------------------------------

def sse(events):
    """SSE bytes of (event name or None, data) pairs."""
    out = []
    for name, data in events:
        out.append(("event: %s\n" % name if name else "") + "data: %s\n\n" % json.dumps(data))
    return "".join(out).encode()


def anthropic_message(model, action, tool_id, stops=()):
    """A Messages API answer; a text is cut at the first stop sequence, like the API does."""
    content, stop = [], None
    if "text" in action:
        text = action["text"]
        for seq in stops:
            if seq in text:
                text, stop = text[:text.index(seq)], seq
        content.append({"type": "text", "text": text})
    if "tool" in action:
        content.append({"type": "tool_use", "id": tool_id, "name": action["tool"],
                        "input": action.get("args", {})})
    return {"id": "msg_" + tool_id, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_sequence": stop, "usage": {"input_tokens": 10, "output_tokens": 10},
            "stop_reason": "tool_use" if "tool" in action else "stop_sequence" if stop else "end_turn"}


def anthropic_stream(message):
    start = dict(message, content=[], stop_reason=None, stop_sequence=None)
    events = [("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            first, delta = dict(block, text=""), {"type": "text_delta", "text": block["text"]}
        else:
            first = dict(block, input={})
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [("content_block_start", {"type": "content_block_start", "index": i, "content_block": first}),
                   ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}),
                   ("content_block_stop", {"type": "content_block_stop", "index": i})]
    events += [("message_delta", {"type": "message_delta", "usage": {"output_tokens": 10},
                                  "delta": {k: message[k] for k in ("stop_reason", "stop_sequence")}}),
               ("message_stop", {"type": "message_stop"})]
    return sse(events)


def openai_stream(view, action, rid):
    items = []
    if "text" in action:
        items.append({"type": "message", "id": "msg_" + rid, "role": "assistant", "status": "completed",
                      "content": [{"type": "output_text", "text": action["text"], "annotations": []}]})
    if "tool" in action:
        namespace, name = view.codex_names.get(action["tool"], (None, action["tool"]))
        call = {"type": "function_call", "id": "fc_" + rid, "call_id": "call_" + rid, "name": name,
                "arguments": json.dumps(action.get("args", {})), "status": "completed"}
        if name in view.custom:
            # A freeform tool takes its input as raw text (args {"input": TEXT}).
            call = {"type": "custom_tool_call", "id": "ctc_" + rid, "call_id": "call_" + rid,
                    "name": name, "input": action.get("args", {}).get("input", ""),
                    "status": "completed"}
        if namespace:
            call["namespace"] = namespace
        items.append(call)
    response = {"id": "resp_" + rid, "object": "response", "status": "in_progress", "output": []}
    events = [("response.created", {"type": "response.created", "response": response})]
    for i, item in enumerate(items):
        events.append(("response.output_item.added", {"type": "response.output_item.added",
                                                      "output_index": i, "item": item}))
        if item["type"] == "message":
            events.append(("response.output_text.delta", {
                "type": "response.output_text.delta", "item_id": item["id"], "output_index": i,
                "content_index": 0, "delta": action["text"]}))
        events.append(("response.output_item.done", {"type": "response.output_item.done",
                                                     "output_index": i, "item": item}))
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 10,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 20}
    done = dict(response, status="completed", output=items, usage=usage)
    events.append(("response.completed", {"type": "response.completed", "response": done}))
    for n, (_, data) in enumerate(events):
        data["sequence_number"] = n
    return sse(events)


def gemini_response(action, model):
    parts = []
    if "text" in action:
        parts.append({"text": action["text"]})
    if "tool" in action:
        parts.append({"functionCall": {"name": action["tool"], "args": action.get("args", {})}})
    return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP",
                            "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 10, "totalTokenCount": 20},
            "modelVersion": model}


def from_schema(schema, key=""):
    """A small value fitting a JSON schema (side requests that ask for JSON)."""
    kind = str(schema.get("type", "object")).lower()
    if schema.get("enum"):
        return "user" if "user" in schema["enum"] else schema["enum"][0]
    if kind == "object":
        return {k: from_schema(s, k) for k, s in (schema.get("properties") or {}).items()}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 1 if "score" in key else 0
    if kind == "boolean":
        return False
    return "Scripted"


def is_claude_fork(view):
    """Claude's side requests that reuse the turn's prefix (and tools): prompt suggestions."""
    return view.last_is == "user" and view.last_user.startswith("[SUGGESTION MODE:")


def side_text(view, body):
    """The answer to a side request (no rule involved)."""
    if is_claude_fork(view):
        return ""  # Claude's next-prompt suggestion: "... Or nothing."
    prompt = view.system + "\n" + view.last_user
    stops = body.get("stop_sequences") or []
    if "</severity>" in stops or "<severity>" in prompt:
        return "<severity>5</severity>"  # Claude's auto-mode classifier: below 50 allows
    if "</block>" in stops or "<block>no</block>" in prompt:
        return "<block>no</block>"  # the same classifier's other format: allow
    config = body.get("generationConfig") or {}
    schema = ((body.get("output_config") or {}).get("format") or {}).get("schema") \
        or ((body.get("text") or {}).get("format") or {}).get("schema") \
        or config.get("responseJsonSchema") or config.get("responseSchema")
    if schema:  # e.g. Claude's session title, Gemini's routing / next-speaker / loop checks
        return json.dumps(from_schema(schema))
    if "json" in str(config.get("responseMimeType", "")):
        return "{}"
    return "ok"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    model = None  # set by main

    def log_message(self, fmt, *args):
        pass

    def send(self, status, payload, content_type="application/json"):
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.split("?")[0].rstrip("/").endswith("/models"):
            self.send(200, {"object": "list", "data": [], "models": []})
        else:
            self.send(404, {"error": {"message": "not found: " + self.path}})

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return self.send(400, {"error": {"message": "body is not JSON"}})
        path = self.path.split("?")[0]
        gemini = re.fullmatch(r".*/models/([^/:]+):(\w+)", path)
        if path.endswith("/messages/count_tokens") or (gemini and gemini.group(2) == "countTokens"):
            view = view_anthropic(body) if not gemini else view_gemini(body)
            count = max(1, len(raw) // 4)
            kind, index, action = "side", None, {"tokens": count}
            self.send(200, {"totalTokens": count} if gemini else {"input_tokens": count})
        elif path.endswith("/messages") or path.endswith("/responses") or gemini:
            if gemini:
                view = view_gemini(body)
                turn = gemini.group(2) == "streamGenerateContent" and bool(view.tools)
            elif path.endswith("/messages"):
                view = view_anthropic(body)
                turn = bool(body.get("tools")) and not is_claude_fork(view)
            else:
                view = view_openai(body)
                turn = bool(body.get("tools"))
            kind = "turn" if turn else "side"
            if turn:
                index, action, delay = self.model.answer(view)
                if delay:
                    # Recorded when it arrives, so a test sees a model call that is still
                    # being answered (the agent is mid-turn); then the answer waits.
                    self.model.record(dict(view.record(), path=self.path, kind="turn",
                                           rule=index, reply=action, delayed_ms=delay,
                                           headers=dict(self.headers), body=body))
                    time.sleep(delay / 1000.0)
                    kind = "delayed"
            else:
                index, action = None, {"text": side_text(view, body)}
            rid = action.get("id") or self.model.next_id("toolu" if view.api == "anthropic" else "r")
            if view.api == "anthropic":
                message = anthropic_message(body.get("model", "claude"), action, rid,
                                            body.get("stop_sequences") or [])
                if body.get("stream"):
                    self.send(200, anthropic_stream(message), "text/event-stream")
                else:
                    self.send(200, message)
            elif view.api == "openai":
                self.send(200, openai_stream(view, action, rid), "text/event-stream")
            else:
                response = gemini_response(action, gemini.group(1))
                if gemini.group(2) == "streamGenerateContent":
                    self.send(200, sse([(None, response)]), "text/event-stream")
                else:
                    self.send(200, response)
        else:
            return self.send(404, {"error": {"message": "not served: " + self.path}})
        if kind == "turn" and index is None:
            print("model_server: no rule matched a %s request (last_user=%r, tool_result=%r)"
                  % (view.api, view.last_user[-80:], (view.last_tool_result or "")[:80]),
                  file=sys.stderr, flush=True)
        if kind != "delayed":
            self.model.record(dict(view.record(), path=self.path, kind=kind, rule=index,
                                   reply=action, headers=dict(self.headers), body=body))


def working_directory(view):
    """The agent's working directory as its harness tells the model: Claude's system prompt
    (`Working directory: DIR`), Codex's environment context (`<cwd>DIR</cwd>`); "" if neither."""
    for pattern in (r"[Ww]orking directory: ([^\s\\\"<]+)", r"<cwd>([^<\\\"]+)</cwd>"):
        m = re.search(pattern, view.system + "\n" + view.raw)
        if m:
            return m.group(1)
    return ""


def fill_args(args, view):
    """A tool call's arguments with "{tool_result:PATH}" string values replaced by the value at
    PATH (dot-separated keys and list indexes) in the latest tool result's JSON: how a script
    names a child whose id only the previous call's result holds. "{cwd}" in a string is the
    agent's working directory (`working_directory`): how a script names a file to write."""
    def fill(value):
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v) for v in value]
        if isinstance(value, str) and "{cwd}" in value:
            return value.replace("{cwd}", working_directory(view))
        m = re.fullmatch(r"\{tool_result:([\w.]+)\}", value) if isinstance(value, str) else None
        if not m:
            return value
        try:
            found = json.loads(view.last_tool_result or "null")
            for key in m.group(1).split("."):
                found = found[int(key)] if isinstance(found, list) else found[key]
            return found
        except (ValueError, KeyError, IndexError, TypeError):
            return "model_server: no %s in the tool result" % m.group(1)
    return fill(args)


class QuietServer(ThreadingHTTPServer):
    """An agent that drops its connection (its cluster stopping) is not an error worth a
    traceback; anything else still prints one."""

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


def main():
    ap = argparse.ArgumentParser(description="scripted fake LLM for Claude Code, Codex, Gemini CLI")
    ap.add_argument("--port", type=int, default=0, help="the port on 127.0.0.1 (0: any free)")
    ap.add_argument("--script", required=True, help="the rules, JSON")
    ap.add_argument("--record", help="append one JSON line per request here")
    opts = ap.parse_args()
    try:
        rules = load_script(opts.script)
    except ValueError as e:
        print("model_server: %s" % e, file=sys.stderr)
        sys.exit(2)
    Handler.model = Model(rules, opts.record)
    server = QuietServer(("127.0.0.1", opts.port), Handler)
    server.daemon_threads = True
    print("port %d" % server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
