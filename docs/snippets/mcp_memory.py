# mem0's memory tools over MCP (streamable HTTP at /mcp), with the auditor's tags.
# Environment: DMT_MCP_URL=http://127.0.0.1:8080/mcp
import asyncio
import json
import os

from mcp import Client


async def main() -> None:
    async with Client(os.environ["DMT_MCP_URL"]) as client:

        async def call(tool: str, **arguments: object) -> tuple[str, list]:
            answer = await client.call_tool(tool, {"user_id": "alice", **arguments})
            # The first block is the DMT-framed memory block, the last one mem0's JSON.
            return answer.content[0].text, json.loads(answer.content[-1].text)["results"]

        _, [added] = await call("add_memory", text="I prefer window seats.")
        print(added["status"])  # pending: queued through the outbox, audited next
        while (await call("get_memory", memory_id=added["id"]))[1][0]["audit_status"] == "pending":
            await asyncio.sleep(0.2)
        block, found = await call("search_memories", query="seats")
        print(block.split("\n")[0][:10])  # <memories-<nonce>>
        for memory in found:
            print(memory["audit_status"], memory["tag"])


asyncio.run(main())
