"""The long-term decision-making simulation (paper §4–§6) behind ``dmt-bench compare``.

Modules, in the order a run uses them: ``config`` (validated experiment config),
``mmlu`` (the MMLU-Pro source), ``bias_list`` + ``injection`` (the Bias Generator
Agent), ``stream`` (the cached, seeded question stream shared by every
condition), ``proxy`` (a managed or external dmt-proxy), ``loop`` (the LangGraph
agent loop with its SQLite checkpointer), ``records`` (what a thread writes),
``metrics`` + ``results`` (ΔAGBV, MP, bootstrap CIs), ``report`` (Table 2 text,
Markdown, HTML, figures), ``runner`` (run directories and orchestration),
``estimate`` (``--dry-run``) and ``cli``. The in-process proxy with scripted
models that the tests use is ``dmt_proxy.testing.sim``.
"""
