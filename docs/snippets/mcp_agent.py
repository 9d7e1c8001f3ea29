# An OpenAI Agents SDK agent whose only memory is mem0's MCP tools at /mcp.
# Environment: OPENAI_BASE_URL=http://127.0.0.1:8080/v1  OPENAI_API_KEY=unused
#              DMT_MCP_URL=http://127.0.0.1:8080/mcp
import asyncio
import os

from agents import Agent, ModelSettings, Runner, set_tracing_disabled
from agents.mcp import MCPServerStreamableHttp, create_static_tool_filter

set_tracing_disabled(True)  # traces would otherwise be sent to OpenAI
USER = {"X-DMT-User": "alice"}


async def main() -> None:
    memory = MCPServerStreamableHttp(
        {"url": os.environ["DMT_MCP_URL"], "headers": USER},
        tool_filter=create_static_tool_filter(allowed_tool_names=["add_memory", "search_memories"]),
        client_session_timeout_seconds=60,
    )
    async with memory:
        agent = Agent(
            name="assistant",
            instructions="You remember nothing yourself. Store what the user asks you to "
            "remember with add_memory. Look up facts about the user with search_memories.",
            model="qwen2.5-1.5b",
            mcp_servers=[memory],
            # Each run starts with a memory tool (then the SDK lets the model answer), and the
            # proxy's own chat memory is off: the MCP tools are the agent's only memory.
            model_settings=ModelSettings(
                temperature=0, tool_choice="required", extra_headers={**USER, "X-DMT-Memory": "off"}
            ),
        )
        await Runner.run(agent, "Remember that my favourite colour is teal.", max_turns=4)
        # A new run, without the first one's history: only the memory carries the fact.
        answer = await Runner.run(agent, "Search your memories: what is my favourite colour?", max_turns=4)
        print(answer.final_output)


asyncio.run(main())
