"""Where the checkout's own files are (examples, docs, bench): tests read them from the repository, while the
package's data (playbooks, manifests, trainer) comes from provision.resources as an installed tool finds it."""
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
