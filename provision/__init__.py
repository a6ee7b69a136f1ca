"""cluster-bootstrap: SSH-reachable Linux machines -> a Kubernetes cluster with usable NVIDIA GPUs."""
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PLAYBOOKS_DIR = PROJECT_ROOT / "playbooks"
MANIFESTS_DIR = PROJECT_ROOT / "manifests"
TRAINER_DIR = PROJECT_ROOT / "trainer"
COLLECTIONS_DIR = PROJECT_ROOT / ".collections"
