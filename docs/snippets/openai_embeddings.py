# Embeddings through the proxy: the shipped all-MiniLM-L6-v2 runs inside it, offline.
# Environment: OPENAI_BASE_URL=http://127.0.0.1:8080/v1  OPENAI_API_KEY=unused
from openai import OpenAI

client = OpenAI()
result = client.embeddings.create(model="all-minilm-l6-v2", input=["a cat", "a kitten"])
print(len(result.data), len(result.data[0].embedding))
