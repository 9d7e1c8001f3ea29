"""Seeded generator of judgment_corpus_v1, the judgment-vs-mention training corpus."""
