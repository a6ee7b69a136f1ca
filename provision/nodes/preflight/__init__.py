"""Preflight: can every node take part? Checked over SSH, in parallel, before anything is changed.

Three steps, one module each: `probe` (one script per node and its parser, into NodeFacts), `checks` (pure
functions judging those facts, some across nodes: hostname, product_uuid and MAC must be unique; and
PREFLIGHT_POLICY, the blocking policy), and `run` (the probe runner, nodes/probe.py, over every node in parallel,
progress, the PreflightReport). Each check's finding (provision/findings.py) is ok, warn or fail with a detail and
a fix. Warnings name what `prepare` will change (swap, SELinux) or
what is merely tight on a worker (CPU, memory).
"""
