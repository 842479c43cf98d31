"""An A2A client for lineage's gateway tests, written with the official Python SDK (PyPI
`a2a-sdk`, installed by scripts/install-deps.sh). One operation per run; every result is a
JSON line on stdout (a stream prints one line per event, as it comes), an error is
`{"kind": "error", ...}` with exit code 3.

    client.py send URL TOKEN TEXT [--task ID] [--context ID] [--mid ID] [--now]
    client.py stream URL TOKEN TEXT [--task ID] [--mid ID]
    client.py get URL TOKEN ID
    client.py list URL TOKEN [--context ID] [--status STATE]
    client.py cancel URL TOKEN ID
    client.py subscribe URL TOKEN ID
    client.py raw URL TOKEN BODY       (a hand-made JSON-RPC body: the HTTP status and reply)
    client.py push-set URL TOKEN TASK WEBHOOK [--id ID] [--push-token T] [--bearer B]
    client.py push-get URL TOKEN TASK ID
    client.py push-list URL TOKEN TASK
    client.py push-delete URL TOKEN TASK ID

TOKEN `-` sends no Authorization header. URL is the agent's base URL (its card is at
URL/.well-known/agent-card.json). Over https, A2A_CA names the CA file to trust, and A2A_CERT
and A2A_KEY a client certificate to show (mutual TLS).
"""

import argparse
import asyncio
import json
import os
import ssl
import sys
import uuid

import httpx
from google.protobuf.json_format import MessageToDict

from a2a.client import ClientConfig, ClientFactory
from a2a.types import (
    AuthenticationInfo,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    TaskPushNotificationConfig,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)


def emit(kind, body):
    print(json.dumps({"kind": kind, **body}), flush=True)


def http_client(token):
    headers = {} if token == "-" else {"Authorization": f"Bearer {token}"}
    tls = {}
    if os.environ.get("A2A_CA"):
        tls["verify"] = ssl.create_default_context(cafile=os.environ["A2A_CA"])
        if os.environ.get("A2A_CERT"):
            tls["verify"].load_cert_chain(os.environ["A2A_CERT"], os.environ["A2A_KEY"])
    return httpx.AsyncClient(headers=headers, timeout=180, **tls)


async def client(url, token, streaming):
    config = ClientConfig(streaming=streaming, httpx_client=http_client(token))
    return await ClientFactory(config).create_from_url(url)


def message(args):
    m = Message(
        role=Role.ROLE_USER,
        message_id=args.mid or str(uuid.uuid4()),
        parts=[Part(text=args.text)],
    )
    if args.task:
        m.task_id = args.task
    if getattr(args, "context", None):
        m.context_id = args.context
    return m


async def run(args):
    if args.op == "raw":
        async with http_client(args.token) as http:
            r = await http.post(
                args.url,
                content=args.body.encode(),
                headers={"Content-Type": "application/json", "A2A-Version": "1.0"},
            )
            try:
                body = r.json()
            except ValueError:
                body = r.text
            emit("raw", {"status": r.status_code, "body": body})
        return
    streaming = args.op in ("stream", "subscribe")
    c = await client(args.url, args.token, streaming)
    if args.op in ("send", "stream"):
        request = SendMessageRequest(
            message=message(args),
            configuration=SendMessageConfiguration(return_immediately=getattr(args, "now", False)),
        )
        async for event in c.send_message(request):
            emit("event", {"event": MessageToDict(event)})
    elif args.op == "get":
        emit("task", {"task": MessageToDict(await c.get_task(GetTaskRequest(id=args.id)))})
    elif args.op == "list":
        request = ListTasksRequest(include_artifacts=True)
        if args.context:
            request.context_id = args.context
        if args.status:
            request.status = TaskState.Value(args.status)
        emit("list", {"list": MessageToDict(await c.list_tasks(request))})
    elif args.op == "cancel":
        emit("task", {"task": MessageToDict(await c.cancel_task(CancelTaskRequest(id=args.id)))})
    elif args.op == "subscribe":
        async for event in c.subscribe(SubscribeToTaskRequest(id=args.id)):
            emit("event", {"event": MessageToDict(event)})
    elif args.op == "push-set":
        config = TaskPushNotificationConfig(task_id=args.task, url=args.webhook)
        if args.id:
            config.id = args.id
        if args.push_token:
            config.token = args.push_token
        if args.bearer:
            config.authentication.CopyFrom(AuthenticationInfo(scheme="Bearer", credentials=args.bearer))
        made = await c.create_task_push_notification_config(config)
        emit("push", {"config": MessageToDict(made)})
    elif args.op == "push-get":
        got = await c.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=args.task, id=args.id)
        )
        emit("push", {"config": MessageToDict(got)})
    elif args.op == "push-list":
        listed = await c.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=args.task)
        )
        emit("push", {"list": MessageToDict(listed)})
    elif args.op == "push-delete":
        await c.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=args.task, id=args.id)
        )
        emit("push", {"deleted": args.id})
    await c.close()


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="op", required=True)
    for op in ("send", "stream"):
        s = sub.add_parser(op)
        s.add_argument("url")
        s.add_argument("token")
        s.add_argument("text")
        s.add_argument("--task")
        s.add_argument("--context")
        s.add_argument("--mid")
        s.add_argument("--now", action="store_true")
    for op in ("get", "cancel", "subscribe"):
        s = sub.add_parser(op)
        s.add_argument("url")
        s.add_argument("token")
        s.add_argument("id")
    s = sub.add_parser("list")
    s.add_argument("url")
    s.add_argument("token")
    s.add_argument("--context")
    s.add_argument("--status")
    s = sub.add_parser("push-set")
    s.add_argument("url")
    s.add_argument("token")
    s.add_argument("task")
    s.add_argument("webhook")
    s.add_argument("--id")
    s.add_argument("--push-token")
    s.add_argument("--bearer")
    for op in ("push-get", "push-delete"):
        s = sub.add_parser(op)
        s.add_argument("url")
        s.add_argument("token")
        s.add_argument("task")
        s.add_argument("id")
    s = sub.add_parser("push-list")
    s.add_argument("url")
    s.add_argument("token")
    s.add_argument("task")
    s = sub.add_parser("raw")
    s.add_argument("url")
    s.add_argument("token")
    s.add_argument("body")
    args = p.parse_args()
    try:
        asyncio.run(run(args))
    except Exception as e:  # the error is the result
        emit("error", {"type": type(e).__name__, "error": str(e)})
        sys.exit(3)


main()
