"""The doctor on a running cluster's nodes: `probe` (one read-only script per node, run through sudo over one SSH
connection, read into NodeHealth), `checks` (pure judges: facts in, a Finding with its severity and fix out) and
`run` (every node in parallel, judged, with the clocks judged across nodes)."""
