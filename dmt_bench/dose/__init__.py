"""The memory dose–response experiment (``dmt-bench dose``).

It isolates the memory → decision channel of the paper's simulation at a fraction
of its cost: instead of 100 turns of a biased stream, a fresh user scope is seeded
with k memories (stereotyped narratives of one source domain, or neutral controls),
and the agent answers the DIB sample through the real proxy in read-only mode, in
every mitigation mode, paired against the same contexts with no memory (k = 0).

Modules: ``config`` (the versioned, digested experiment), ``seeds`` (memories from the
labelled set, nested across k) and ``seed_sets`` (the versioned sets written for the dose
runs: stereotyped, neutral, directive), ``cells`` (the design and its files), ``runner``
(seeding and reading through the proxy, resumable), ``results`` (ΔGBV, diagonal/
off-diagonal, mean shift, MP, CIs, MDE, permutation test), ``contrasts`` (jackknife-t
contrasts over DIB contexts), ``positive_control`` (the planted gap and what a null
means), ``matrix`` (source × domain content contrasts), ``preregistration`` (committed
endpoints, checked at report time), ``primary`` (the run's one Holm family: the
pre-registered endpoints, else the declared content contrasts), ``addenda`` (positive
control and matrix sections), ``report`` and ``estimate``. Every interval is the one
jackknife-t of ``bench.paired.linear_jackknife``.
"""
