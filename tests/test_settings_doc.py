"""docs/settings.md documents every setting the model accepts, and no setting it does not."""
from __future__ import annotations

import re

from pydantic import BaseModel

from provision.inputs.settings import Settings
from tests.support.paths import REPO_ROOT as PROJECT_ROOT


def _dotted_fields(model: type[BaseModel], prefix: str = "") -> set[str]:
    found = set()
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found |= _dotted_fields(annotation, f"{prefix}{name}.")
        else:
            found.add(prefix + name)
    return found


def test_every_setting_is_documented_and_every_documented_key_exists() -> None:
    text = (PROJECT_ROOT / "docs" / "settings.md").read_text()
    documented = set(re.findall(r"^\| `([a-z_]+(?:\.[a-z0-9_]+)+)` \|", text, re.MULTILINE))
    assert documented == _dotted_fields(Settings)
