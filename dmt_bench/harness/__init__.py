"""The public harness every benchmark sits on (DIB, simulation, dose, IAT, auditor eval).

Shared infrastructure lives here, so that no benchmark imports another's internals:

- ``config``: config sections every run shares (``ModelSpec``, ``AuditConfig``,
  ``ExecutionConfig``) and ``read_yaml``;
- ``rundir``: the run directory and its manifest (``run.json``), ``open_run_dir``,
  ``set_status`` and ``write_atomic``; ``runlock``: one process per run directory;
- ``proxy``: the proxy a run goes through (``ManagedProxy``, ``ProxyClient``,
  ``connect_proxy``, ``run_policy``);
- ``models``: ``check_local_models`` (once, before a run starts) and ``RoleEstimate``;
- ``progress``: progress bars or log lines with ETA;
- ``report``: report primitives (fixed-width and markdown tables, an HTML page,
  matplotlib on Agg, the ΔGBV heatmap).

Statistics are ``dmt_bench.stats`` (offline fitting ``dmt_proxy.audit.fit``).
The harness imports no benchmark package. Importing this package imports none of its
modules.
"""
