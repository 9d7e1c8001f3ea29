"""The OpenAI Responses API on the chat pipeline.

A ``POST /v1/responses`` body is validated (``protocol``), translated into the
same ``ChatCompletionRequest`` a chat client would send (``translate``) and run
by the one ``ChatPipeline``: memory retrieval per user turn, SSP/DMT, the
outbox, metrics. The pipeline's chat answer is turned back into a Response
object, or for ``stream: true`` into the documented event sequence (``stream``).
The upstream is always called through chat completions, so every local model
and litellm provider serves Responses clients too.
"""
