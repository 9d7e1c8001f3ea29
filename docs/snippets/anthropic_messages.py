# The Anthropic SDK on /v1/messages: a streamed agent loop with one tool.
# Environment: ANTHROPIC_BASE_URL=http://127.0.0.1:8080  ANTHROPIC_API_KEY=unused
from anthropic import Anthropic
from anthropic.types import Message

client = Anthropic()
tools = [
    {
        "name": "get_weather",
        "description": "Current weather of a city",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]


def get_weather(city: str) -> str:
    return f"{city}: 21C and sunny"


messages: list = [{"role": "user", "content": "What is the weather in Paris"}]


def ask() -> Message:
    with client.messages.stream(
        model="qwen2.5-1.5b",
        max_tokens=256,
        messages=messages,
        tools=tools,
        metadata={"user_id": "alice"},
    ) as stream:
        for text in stream.text_stream:
            print(text, end="", flush=True)
        return stream.get_final_message()


reply = ask()
for _ in range(3):  # at most three tool rounds
    if reply.stop_reason != "tool_use":
        break
    results = [
        {"type": "tool_result", "tool_use_id": block.id, "content": get_weather(**block.input)}
        for block in reply.content
        if block.type == "tool_use"
    ]
    messages += [
        {"role": "assistant", "content": reply.content},
        {"role": "user", "content": results},
    ]
    reply = ask()
print()
