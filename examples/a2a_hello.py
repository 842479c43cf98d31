"""Send one message to an A2A agent and print its task's state and reply (Python a2a-sdk 1.3)."""
import asyncio
import os
import sys
import uuid

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, SendMessageRequest, TaskState


async def main(url, text):
    token = os.environ["LINEAGE_A2A_TOKEN"]
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    config = ClientConfig(streaming=False, httpx_client=http)
    client = await ClientFactory(config).create_from_url(url)  # reads url/.well-known/agent-card.json
    message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=text)])
    async for event in client.send_message(SendMessageRequest(message=message)):
        task = event.task
        print(f"task {task.id} (context {task.context_id}): {TaskState.Name(task.status.state)}")
        for artifact in task.artifacts:
            print("reply:", artifact.parts[0].text)
    await client.close()


asyncio.run(main(sys.argv[1], sys.argv[2]))
