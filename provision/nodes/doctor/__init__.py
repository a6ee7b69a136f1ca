"""The doctor on a running cluster's nodes: `probe` (one read-only script per node and its parser, into
NodeHealth), `checks` (pure judges: facts in, a Finding with its severity and fix out) and `run` (the probe runner,
nodes/probe.py, over every node in parallel; judged, with the clocks judged across nodes)."""
