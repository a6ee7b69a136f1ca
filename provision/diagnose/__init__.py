"""After the cluster is formed: `doctor` (findings from the nodes and the API, each with its fix) and `bundle`
(one archive a maintainer can read, every secret taken out by `redact` first)."""
