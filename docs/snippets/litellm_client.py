# litellm as the client: "openai/<alias>" means "an OpenAI-compatible server at api_base".
# Environment: OPENAI_BASE_URL=http://127.0.0.1:8080/v1
import json
import os

import litellm

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


proxy = {
    "model": "openai/qwen2.5-1.5b",
    "api_base": os.environ["OPENAI_BASE_URL"],
    "api_key": "unused",
    "extra_headers": {"X-DMT-User": "alice"},  # litellm does not forward `user` here
    "tools": tools,
}
messages: list = [{"role": "user", "content": "What is the weather in Paris"}]
message = litellm.completion(messages=messages, **proxy).choices[0].message
while message.tool_calls:
    messages.append(message)
    for call in message.tool_calls:
        output = get_weather(**json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    message = litellm.completion(messages=messages, **proxy).choices[0].message
print(message.content)
