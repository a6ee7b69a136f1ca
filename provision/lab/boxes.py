"""The lab's OS choices, as the Vagrantfile offers them: a light module, so that `bootstrap lab up --help` lists
them without importing the lab's machinery."""
from __future__ import annotations

import re

from provision.resources import VAGRANT_DIR


def lab_os_choices() -> tuple[str, ...]:
    """The OS choices the Vagrantfile offers (`lab_boxes`, each held to the platform table by the tests)."""
    text = (VAGRANT_DIR / "Vagrantfile").read_text()
    body = text.split("def lab_boxes", 1)[1].split("\nend", 1)[0]
    return tuple(re.findall(r'"([\w.-]+)" => \{ box:', body))
