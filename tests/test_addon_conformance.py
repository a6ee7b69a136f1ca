"""Each pinned add-on release, rendered as the control plane renders it (`kubectl kustomize` of the kustomize
targets, the release files as published), and held to what this tool says of it: every image the rendered
manifests name is in the add-on's image table (inputs/addons.py, which `config check-sources` holds the mirrors
to).

Upstream's manifests are never part of this repository. The test renders them from upstream itself where this
machine reaches GitHub, or from local copies of the pinned tags when CB_UPSTREAM_SOURCES names a folder holding
them as `<owner>+<repo>@<tag>/` (kept as `git archive <tag>` leaves them); where neither is possible it says so and
skips (the project's own CI has no route to GitHub: docs/conformance.md lists what was executed, where and when).
"""
from __future__ import annotations

import os
import re
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from provision.inputs.addons import ADDON_ORDER, ADDONS, AddonName
from provision.inputs.settings import Settings
from provision.inputs.sources import image_repository
from provision.render.images import manifest_images

UNREACHABLE = re.compile(r"could not resolve host|no such host|unable to access|dial tcp|network is unreachable|"
                         r"connection refused|timed out|temporary failure in name resolution", re.IGNORECASE)
KUSTOMIZE_URL = re.compile(r"https://github\.com/(?P<owner>[^/]+)/(?P<repo>[^/]+?)\.git/(?P<path>[^?]+)\?ref=(?P<ref>.+)")
PARTS = [(name, part.name) for name in ADDON_ORDER for part in ADDONS[name].parts]
# The words of this test's skip; tests/conftest.py lets it pass under CI, which has no route to GitHub.
OUT_OF_REACH = "upstream's release is out of reach here"


def local_copy(url: str) -> Path | None:
    """The part's target in a local copy of the pinned tag, when CB_UPSTREAM_SOURCES holds one."""
    root, match = os.environ.get("CB_UPSTREAM_SOURCES"), KUSTOMIZE_URL.fullmatch(url)
    if not root or not match:
        return None
    found = Path(root) / f"{match['owner']}+{match['repo']}@{match['ref']}" / match["path"]
    return found if found.is_dir() else None


def rendered(name: AddonName, part_name: str) -> str:
    """The part as the control plane would apply it (before our patches), or a skip saying why it cannot be had."""
    part = next(p for p in ADDONS[name].parts if p.name == part_name)
    url = part.upstream(Settings().addons.version(name), "https://raw.githubusercontent.com")
    if part.kind == "kustomize":
        target = local_copy(url)
        done = subprocess.run(["kubectl", "kustomize", "--load-restrictor", "LoadRestrictionsNone",
                               str(target or url)], capture_output=True, text=True, timeout=300)
        if done.returncode != 0 and UNREACHABLE.search(done.stderr):
            pytest.skip(f"{url}: {OUT_OF_REACH} ({UNREACHABLE.search(done.stderr)[0]})")  # type: ignore[index]
        assert done.returncode == 0, done.stderr[-600:]
        return done.stdout
    copy = Path(os.environ.get("CB_UPSTREAM_SOURCES", "/nonexistent")) / f"{name}@{part.name}.yaml"
    if copy.is_file():
        return copy.read_text()
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return str(response.read().decode())
    except (urllib.error.URLError, OSError) as exc:
        pytest.skip(f"{url}: {OUT_OF_REACH} ({exc})")


@pytest.mark.parametrize(("name", "part"), PARTS, ids=[f"{n}-{p}" for n, p in PARTS])
def test_every_image_the_pinned_release_names_is_in_the_addons_table(name: AddonName, part: str) -> None:
    text = rendered(name, part)
    named = {image_repository(image) for image in manifest_images(text)}
    table = {image_repository(image) for image in ADDONS[name].images}
    assert sorted(named - table) == []
