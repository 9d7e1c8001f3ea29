"""Implicit vs explicit bias probe (Zhao et al., Findings of ACL 2025, §3-4, Appendix A).

``dmt-bench iat`` runs an IAT-style implicit test (fill two masks from ten shuffled
stimuli) and a self-reflection explicit test (Likert judgement of the stereotype
statement) over six categories, and reports the Stereotypical Score SC per category
and test type in the shape of the paper's Table 3. ``dmt-bench iat-drift`` compares
result files (e.g. a user's memory at t=0 vs t=T).

Modules: ``stimuli`` (package data), ``templates``, ``trials`` (seeded plans),
``prompts``, ``parsing`` (answer reading and scoring), ``metrics`` (SC, Wilson,
Newcombe), ``runner``, ``results``, ``report``, ``drift``, ``cli``.
"""
