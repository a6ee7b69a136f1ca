"""The doctor's probe output as a healthy prepared node prints it (recorded on a Debian 12 lab node after
`bootstrap prepare`, with a kubelet running and /etc/kubernetes/kubelet.conf in place), and the same with
sections replaced: what a test needs to tell one fault to the judges."""
from __future__ import annotations

from provision.nodes.doctor.probe import NodeHealth, parse_health
from tests.support.paths import REPO_ROOT

RECORDED = REPO_ROOT / "tests" / "data" / "doctor" / "bookworm-healthy-probe.txt"


def sections(text: str) -> dict[str, str]:
    found: dict[str, list[str]] = {}
    order: list[str] = []
    current: list[str] = []
    for line in text.splitlines():
        if line.startswith("@@"):
            name = line[2:]
            order.append(name)
            current = found.setdefault(name, [])
        else:
            current.append(line)
    return {name: "\n".join(found[name]) for name in order}


def healthy_output(**replaced: str | None) -> str:
    """The recorded output with each named section replaced (None: left out)."""
    parts = sections(RECORDED.read_text())
    for name, text in replaced.items():
        parts[name] = text  # type: ignore[assignment]
    return "".join(f"@@{name}\n" + (f"{text}\n" if text else "") for name, text in parts.items() if text is not None)


def health(**replaced: str | None) -> NodeHealth:
    return parse_health(healthy_output(**replaced))
