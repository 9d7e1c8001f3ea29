"""The Anthropic Messages API on the chat pipeline.

A ``POST /v1/messages`` body is validated (``protocol``), translated into the
same ``ChatCompletionRequest`` a chat client would send (``translate``) and run
by the one ``ChatPipeline``: memory retrieval per user turn, SSP/DMT, the
outbox, metrics. The pipeline's chat answer is turned back into an Anthropic
Message, or for ``stream: true`` into Anthropic's event sequence (``stream``).
The upstream is always called through chat completions, so every local model
and litellm provider serves Anthropic clients too.
"""
