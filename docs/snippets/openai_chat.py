# Chat completions with the openai SDK, streamed, with a function tool.
# Environment: OPENAI_BASE_URL=http://127.0.0.1:8080/v1  OPENAI_API_KEY=unused
import json

from openai import OpenAI

client = OpenAI()
tools = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def get_weather(city: str) -> str:
    return f"{city}: 21C and sunny"


messages: list = [{"role": "user", "content": "What is the weather in Paris"}]
while True:
    with client.chat.completions.stream(
        model="qwen2.5-1.5b", messages=messages, tools=tools, user="alice"
    ) as stream:
        message = stream.get_final_completion().choices[0].message
    if not message.tool_calls:
        break
    messages.append(message)
    for call in message.tool_calls:
        output = get_weather(**json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
print(message.content)
