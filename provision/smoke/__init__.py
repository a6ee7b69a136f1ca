"""The smoke test: what the cluster offers (choices), the objects it runs (manifests), the driver that applies
them and watches (driver), what it saw (observation), the pure verdict (verdict), and the results copied back
(save)."""
