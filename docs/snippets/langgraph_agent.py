# LangChain's ChatOpenAI in a LangGraph agent (langchain.agents.create_agent) with a tool.
# Environment: OPENAI_BASE_URL=http://127.0.0.1:8080/v1  OPENAI_API_KEY=unused
from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI


@tool
def get_weather(city: str) -> str:
    """Current weather of a city."""
    return f"{city}: 21C and sunny"


model = ChatOpenAI(model="qwen2.5-1.5b", default_headers={"X-DMT-User": "alice"})
agent = create_agent(model, tools=[get_weather])
result = agent.invoke({"messages": [{"role": "user", "content": "What is the weather in Paris"}]})
print(result["messages"][-1].content)
