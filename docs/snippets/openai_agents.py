# The OpenAI Agents SDK on its default path (the Responses API), with a function tool.
# Environment: OPENAI_BASE_URL=http://127.0.0.1:8080/v1  OPENAI_API_KEY=unused
from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled

set_tracing_disabled(True)  # traces would otherwise be sent to OpenAI


@function_tool
def get_weather(city: str) -> str:
    """Current weather of a city."""
    return f"{city}: 21C and sunny"


agent = Agent(
    name="assistant",
    model="qwen2.5-1.5b",
    tools=[get_weather],
    model_settings=ModelSettings(extra_headers={"X-DMT-User": "alice"}),
)
print(Runner.run_sync(agent, "What is the weather in Paris").final_output)
