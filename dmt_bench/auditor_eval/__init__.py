"""Auditor quality: the labelled memory set, ``dmt-bench auditor-eval`` and ``first-stage-eval``."""
