#!/usr/bin/env python3
"""Run one real coding-agent harness over ACP against the scripted model server (a dev tool).

    python3 tests/harness/try_harness.py --harness claude|codex|gemini --script SCRIPT.json
        [--prompt TEXT ...] [--system-prompt TEXT] [--mode ID] [--record FILE]
        [--tools-log FILE] [--port N] [--timeout S] [--bin-dir DIR] [--no-auth] [--keep]
        [--verbose]

It starts tests/harness/model_server.py (or uses one already listening on --port), starts the
harness's ACP adapter with only its model endpoint redirected there, and speaks ACP (JSON-RPC
2.0 lines over stdio) as the client: `initialize`, `session/new` whose `mcpServers` holds a
stdio MCP server named `lineage` (tests/harness/fake_tools_mcp.py), then one `session/prompt`
per --prompt (default "go"). It answers `session/request_permission` with the `allow_once`
option, and fs/ and terminal/ requests with errors. For each prompt it prints

    prompt: <text>
    reply: <the agent_message_chunk text>
    stop: <stopReason>

then the MCP server's calls (`mcp call:`) and the model requests (`model request:`, from the
record). Exit status 0 when every prompt ended with a stop reason, 1 otherwise.

--system-prompt goes where lineage puts a session's instructions: `systemPrompt`
{"mode": "append", ...} of session/new when initialize declares
sessionCapabilities.systemPrompt (Claude), else a text block before the first prompt (Codex,
Gemini). --mode sends session/set_mode (Claude starts in "auto", where the model server's
classifier side request approves tool calls; in "default" the client is asked). Gemini is
sent `authenticate` {"methodId": "gemini-api-key"} first unless --no-auth (not needed).

Each harness gets a writable HOME in a temp dir under /tmp (removed unless --keep), and
  claude: ANTHROPIC_BASE_URL=http://127.0.0.1:PORT, ANTHROPIC_API_KEY, IS_SANDBOX=1 (root),
          HOME/.claude.json acknowledging auto mode's classifier-billing notice
  codex:  CODEX_HOME=DIR, DIR/config.toml naming a "responses" provider at PORT/v1 and a
          model Codex knows ($CODEX_TEST_MODEL, default gpt-5.4)
  gemini: GEMINI_API_KEY, GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:PORT,
          GEMINI_CLI_TRUST_WORKSPACE=true, GEMINI_CLI_NO_RELAUNCH=true; run as `gemini --acp`
Only processes started here are killed (the agent's own process group, the model server).
"""
import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
# A model Codex knows: with an unknown one (e.g. "gpt-test") Codex streams "Model metadata for
# `gpt-test` not found..." into the first reply as agent text.
CODEX_MODEL = os.environ.get("CODEX_TEST_MODEL", "gpt-5.4")

CODEX_CONFIG = """model_provider = "scripted"
model = "{model}"
[model_providers.scripted]
name = "scripted"
base_url = "http://127.0.0.1:{port}/v1"
wire_api = "responses"
requires_openai_auth = false
supports_websockets = false
"""


def harness_command(harness, bin_dir):
    if harness == "claude":
        return [os.path.join(bin_dir, "claude-agent-acp")]
    if harness == "codex":
        return [os.path.join(bin_dir, "codex-acp")]
    if harness == "gemini":
        return [os.path.join(bin_dir, "gemini"), "--acp"]
    raise SystemExit("unknown harness %r" % harness)


def harness_env(harness, port, tmp):
    home = os.path.join(tmp, "home")
    os.makedirs(home, exist_ok=True)
    env = dict(os.environ, HOME=home)
    base = "http://127.0.0.1:%d" % port
    if harness == "claude":
        env.update(ANTHROPIC_BASE_URL=base, ANTHROPIC_API_KEY="test-key", IS_SANDBOX="1")
        # Without this, auto mode's "classifier billing" notice (about a non-Anthropic base
        # URL) is streamed into the first reply as agent text; acknowledged = hidden for 24h.
        with open(os.path.join(home, ".claude.json"), "w") as f:
            json.dump({"autoModeClassifierBillingNoticeAcknowledgedAt": int(time.time() * 1000)}, f)
    elif harness == "codex":
        codex_home = os.path.join(tmp, "codex-home")
        os.makedirs(codex_home, exist_ok=True)
        with open(os.path.join(codex_home, "config.toml"), "w") as f:
            f.write(CODEX_CONFIG.format(port=port, model=CODEX_MODEL))
        env.update(CODEX_HOME=codex_home)
    elif harness == "gemini":
        env.update(GEMINI_API_KEY="test-key", GOOGLE_GEMINI_BASE_URL=base,
                   GEMINI_CLI_TRUST_WORKSPACE="true", GEMINI_CLI_NO_RELAUNCH="true")
    return env


class Agent:
    """An ACP agent process: JSON-RPC lines over its stdio, read by a thread."""

    def __init__(self, cmd, env, cwd, stderr_path, verbose):
        self.verbose = verbose
        self.stderr = open(stderr_path, "wb")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, env=env, cwd=cwd, start_new_session=True)
        self.inbox = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.inbox.put(json.loads(line))
            except ValueError:
                if self.verbose:
                    print("agent stdout (not JSON): %r" % line[:200], file=sys.stderr)
        self.inbox.put(None)

    def send(self, msg):
        if self.verbose:
            print(">>", json.dumps(msg)[:400], file=sys.stderr)
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def request(self, method, params, deadline, on_message):
        """Sends a request; hands every other message to on_message until its answer."""
        self.next_id += 1
        my_id = self.next_id
        self.send({"jsonrpc": "2.0", "id": my_id, "method": method, "params": params})
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise TimeoutError("no answer to %s in time" % method)
            try:
                msg = self.inbox.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            if msg is None:
                raise EOFError("the agent exited while we waited for %s" % method)
            if self.verbose:
                print("<<", json.dumps(msg)[:int(os.environ.get("TRY_HARNESS_CUT", "400"))], file=sys.stderr)
            if msg.get("id") == my_id and "method" not in msg:
                if "error" in msg:
                    raise RuntimeError("%s failed: %s" % (method, json.dumps(msg["error"])))
                return msg.get("result")
            on_message(msg)

    def stop(self):
        """Ends the agent's process group (it started it): SIGTERM, then SIGKILL after 5 s."""
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except OSError:
                break  # the group is gone
            end = time.time() + wait
            while time.time() < end:
                self.proc.poll()  # reap the leader so the group can vanish
                try:
                    os.killpg(self.proc.pid, 0)
                except OSError:
                    break
                time.sleep(0.1)
            else:
                continue
            break
        self.proc.wait(timeout=5)
        self.stderr.close()


def answer_agent_request(agent, msg):
    """Answers a request the agent sent us (permissions, fs, terminal)."""
    method, params = msg["method"], msg.get("params") or {}
    if method == "session/request_permission":
        options = params.get("options") or []
        pick = next((o for o in options if o.get("kind") == "allow_once"), None) \
            or next((o for o in options if str(o.get("kind", "")).startswith("allow")), None)
        if pick is None:
            result = {"outcome": {"outcome": "cancelled"}}
        else:
            result = {"outcome": {"outcome": "selected", "optionId": pick["optionId"]}}
        agent.send({"jsonrpc": "2.0", "id": msg["id"], "result": result})
    else:
        agent.send({"jsonrpc": "2.0", "id": msg["id"],
                    "error": {"code": -32601, "message": "%s is not offered by this client" % method}})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--harness", required=True, choices=["claude", "codex", "gemini"])
    ap.add_argument("--script", help="the model server's script (required unless --port)")
    ap.add_argument("--prompt", action="append", help="a prompt to send (repeatable); default go")
    ap.add_argument("--system-prompt", help="instructions, placed as lineage places them")
    ap.add_argument("--mode", help="session/set_mode to this mode id after session/new")
    ap.add_argument("--no-auth", action="store_true", help="skip Gemini's authenticate")
    ap.add_argument("--record", help="the model server's record file (default: in the temp dir)")
    ap.add_argument("--tools-log", help="fake_tools_mcp.py's call log (default: in the temp dir)")
    ap.add_argument("--port", type=int, help="use a model server already listening here")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds for the whole run")
    ap.add_argument("--bin-dir", default="/tmp/h/node_modules/.bin")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    ap.add_argument("--verbose", action="store_true", help="print ACP traffic on stderr")
    opts = ap.parse_args()
    deadline = time.time() + opts.timeout
    tmp = tempfile.mkdtemp(prefix="lineage-harness-", dir="/tmp")
    record = opts.record or os.path.join(tmp, "record.jsonl")
    tools_log = opts.tools_log or os.path.join(tmp, "tools.jsonl")
    work = os.path.join(tmp, "work")
    os.makedirs(work)
    server = agent = None
    ok = True
    try:
        port = opts.port
        if port is None:
            if not opts.script:
                raise SystemExit("--script is required unless --port")
            server = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "model_server.py"), "--port", "0",
                 "--script", opts.script, "--record", record],
                stdout=subprocess.PIPE, stderr=open(os.path.join(tmp, "server.err"), "wb"))
            first = server.stdout.readline().decode().split()
            if len(first) != 2 or first[0] != "port":
                server.wait(timeout=10)
                why = open(os.path.join(tmp, "server.err")).read().strip()
                shutil.rmtree(tmp, ignore_errors=True)
                raise SystemExit("model server did not start: %s" % why)
            port = int(first[1])
        agent = Agent(harness_command(opts.harness, opts.bin_dir),
                      harness_env(opts.harness, port, tmp), work,
                      os.path.join(tmp, "agent.err"), opts.verbose)
        chunks = []

        def on_message(msg):
            if "method" in msg and "id" in msg:
                answer_agent_request(agent, msg)
            elif msg.get("method") == "session/update":
                update = (msg.get("params") or {}).get("update") or {}
                kind = update.get("sessionUpdate")
                if kind == "agent_message_chunk":
                    content = update.get("content") or {}
                    if content.get("type") == "text":
                        chunks.append(content.get("text", ""))
                elif kind in ("tool_call", "tool_call_update") and opts.verbose:
                    print("tool update: %s %s" % (update.get("title"), update.get("status")),
                          file=sys.stderr)

        init = agent.request("initialize", {
            "protocolVersion": 1,
            "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False},
                                   "terminal": False},
        }, deadline, on_message)
        if opts.harness == "gemini" and not opts.no_auth and any(m.get("id") == "gemini-api-key"
                                            for m in init.get("authMethods") or []):
            agent.request("authenticate", {"methodId": "gemini-api-key"}, deadline, on_message)
        mcp = {"name": "lineage", "command": sys.executable,
               "args": [os.path.join(HERE, "fake_tools_mcp.py"), "--log", tools_log], "env": []}
        new = {"cwd": work, "mcpServers": [mcp]}
        preamble = []
        if opts.system_prompt:
            caps = (init.get("agentCapabilities") or {}).get("sessionCapabilities") or {}
            if "systemPrompt" in caps:
                new["systemPrompt"] = {"mode": "append",
                                       "content": [{"type": "text", "text": opts.system_prompt}]}
            else:
                preamble = [{"type": "text", "text": "[The instructions you run under, from "
                             "lineage, the system that hosts you]\n" + opts.system_prompt}]
        session = agent.request("session/new", new, deadline, on_message)
        if opts.mode:
            agent.request("session/set_mode", {"sessionId": session["sessionId"], "modeId": opts.mode},
                          deadline, on_message)
        for prompt in opts.prompt or ["go"]:
            chunks.clear()
            result = agent.request("session/prompt", {
                "sessionId": session["sessionId"],
                "prompt": preamble + [{"type": "text", "text": prompt}],
            }, deadline, on_message)
            preamble = []
            print("prompt: %s" % prompt)
            print("reply: %s" % "".join(chunks))
            print("stop: %s" % (result or {}).get("stopReason"))
            ok = ok and bool((result or {}).get("stopReason"))
    except (TimeoutError, EOFError, RuntimeError) as e:
        print("error: %s" % e)
        ok = False
    finally:
        if agent:
            agent.stop()
        if server:
            server.terminate()
            try:
                server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                server.kill()
    if os.path.exists(tools_log):
        for line in open(tools_log):
            print("mcp call: %s" % line.strip())
    if os.path.exists(record):
        for line in open(record):
            r = json.loads(line)
            print("model request: %s %s tools=%d last_user=%r last_tool_result=%r -> %s" % (
                r.get("api"), r.get("kind"), len(r.get("tools") or []),
                (r.get("last_user") or "")[-60:], (r.get("last_tool_result") or "")[:80],
                json.dumps(r.get("reply"))[:120]))
    server_err = os.path.join(tmp, "server.err")
    if os.path.exists(server_err):
        for line in open(server_err):
            print("server stderr: %s" % line.rstrip())
    if not ok or opts.keep:
        print("temp dir kept: %s (agent.err, server.err, record.jsonl)" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
