"""A signed third-party repository (packages_repo: id, name, uri, key_url, setting; apt suites and components) as
the packages role writes it and as the roles want it on the node: one rendering of each, on the controller.

    {{ packages_repo | cb_apt_sources }}                         its apt list (deb822), as repository-Debian.yml writes it
    {{ repo | cb_repository_part(node_family, stamps_dir) }}     the part of the node a role wants for it
                                                                 (module_utils/cb_node_want.py's `repo` check)
"""
from __future__ import annotations

from typing import Any


def cb_apt_sources(repo: dict[str, Any]) -> str:
    """The repository's apt list. The key is pinned to this one repository (Signed-By), so apt checks every index and
    package against it."""
    lines = [f"# cluster-bootstrap: {repo['name']} (setting {repo['setting']}).", "Types: deb", f"URIs: {repo['uri']}",
             f"Suites: {repo['suites']}"]
    if repo.get("components"):
        lines.append(f"Components: {repo['components']}")
    lines.append(f"Signed-By: /etc/apt/keyrings/cb-{repo['id']}.asc")
    return "\n".join(lines) + "\n"


def repository_files(repo_id: str, stamps_dir: str) -> list[str]:
    """Its list, its key and the note of what apt last read of them."""
    return [f"/etc/apt/sources.list.d/cb-{repo_id}.sources", f"/etc/apt/keyrings/cb-{repo_id}.asc",
            f"{stamps_dir}/cb-{repo_id}"]


def cb_repository_part(repo: dict[str, Any], family: str, stamps_dir: str) -> dict[str, Any]:
    """`packages.repo.<id>`: on apt nodes its list as written, its key, and apt's note that it read exactly these;
    dnf nodes have none of these files (yum_repository compares its own), so there it never holds."""
    name = f"packages.repo.{repo['id']}"
    if family != "Debian":
        return {"name": name, "always": True}
    listed, key, stamp = repository_files(repo["id"], stamps_dir)
    return {"name": name, "repo": {"list": listed, "key": key, "stamp": stamp, "sources": cb_apt_sources(repo)}}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"cb_apt_sources": cb_apt_sources, "cb_repository_part": cb_repository_part}
