"""dmt-proxy: fairness middleware for LLM long-term memory.

An OpenAI-compatible proxy that gives each user's chat requests their long-term
memories, writes each exchange back, audits every write with a stateless auditor
LLM and stores biased memories with a JSON bias tag (Dynamic Memory Tagging).
"""

__version__ = "0.1.0"
