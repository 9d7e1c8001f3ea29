# The Responses API (the openai SDK's default for new code), with a function tool.
# Environment: OPENAI_BASE_URL=http://127.0.0.1:8080/v1  OPENAI_API_KEY=unused
import json

from openai import OpenAI

client = OpenAI()
tools = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]


def get_weather(city: str) -> str:
    return f"{city}: 21C and sunny"


items: list = [{"role": "user", "content": "What is the weather in Paris"}]
response = client.responses.create(model="qwen2.5-1.5b", input=items, tools=tools, user="alice")
for call in [item for item in response.output if item.type == "function_call"]:
    items += [
        call,
        {
            "type": "function_call_output",
            "call_id": call.call_id,
            "output": get_weather(**json.loads(call.arguments)),
        },
    ]
response = client.responses.create(model="qwen2.5-1.5b", input=items, tools=tools, user="alice")
print(response.output_text)
