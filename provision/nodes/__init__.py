"""Work on the nodes over SSH: the one shell interface (ssh), the Ansible driver (runner) and the pure count
of its events (tally), preflight (probe, checks, run), prepare, and the reports roles send back (reports)."""
