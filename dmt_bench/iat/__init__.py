"""Implicit vs explicit bias probe (Zhao et al., Findings of ACL 2025, §3-4, Appendix A).

``dmt-bench iat`` runs an IAT-style implicit test (fill two masks from ten shuffled
stimuli) and a self-reflection explicit test (Likert judgement of the stereotype
statement) over six categories, and reports the Stereotypical Score SC per category
and test type in the shape of the paper's Table 3. ``dmt-bench iat-drift`` compares
result files, or (``--run``) probes a finished compare run's memory through the
proxy: a fresh user (t=0) and each condition's simulated user (t=T).

Modules: ``stimuli`` (package data), ``templates``, ``trials`` (seeded plans),
``prompts``, ``parsing`` (answer reading and scoring), ``metrics`` (SC, Wilson,
Newcombe), ``runner``, ``results``, ``probe`` (one resumable run), ``report``, ``drift``,
``live`` (probing a compare run's memory), ``cli``.
"""
