"""The long-term decision-making simulation (paper §4–§6) behind ``dmt-bench compare``.

Modules, in the order a run uses them: ``config`` (validated experiment config),
``bias_list`` + ``injection`` (the Bias Generator Agent), ``stream`` (the cached,
seeded question stream shared by every condition, from ``dmt_bench.mmlu``),
``proxy`` (the simulation's proxy policy), ``loop`` (the LangGraph agent loop with
its SQLite checkpointer), ``records`` (what a thread writes), ``results`` (ΔAGBV,
MP, bootstrap CIs, over ``dmt_bench.paired``), ``report`` (Table 2 text,
Markdown, HTML, figures), ``runner`` (orchestration), ``estimate``
(``--dry-run``) and ``cli``. Run directories, the managed proxy, progress and report
primitives are the harness's (``dmt_bench.harness``). The in-process proxy
with scripted models that the tests use is ``dmt_bench.testing.sim``.
"""
