"""Preflight: can every node take part? Checked over SSH, in parallel, before anything is changed.

Three steps, one module each: `probe` (one script per node, run through sudo, read into NodeFacts), `checks`
(pure functions judging those facts, some across nodes: hostname, product_uuid and MAC must be unique; the
one severity policy), and `run` (SSH to every node in parallel, progress, the PreflightReport). Each check
reports ok, warn or fail with a detail and a fix. Warnings name what `prepare` will change (swap, SELinux) or
what is merely tight on a worker (CPU, memory).
"""
