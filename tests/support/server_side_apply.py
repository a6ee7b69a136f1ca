"""Server-side apply as the API server computes it, for objects made of maps and scalars (a ConfigMap, labels),
so a test can replay what several `kubectl apply --server-side --field-manager M` calls leave in one object.

The rules, from Kubernetes' documentation (Server-Side Apply, "Field management", "Conflicts", "Merge strategy")
and sigs.k8s.io/structured-merge-diff (merge/update.go, Updater.Apply, which prunes what a manager stopped applying):

- every field an apply sets is owned by that apply's manager; its managed fields are exactly the fields of its last
  applied configuration (a map's keys are fields of their own: ConfigMap `data` and `metadata.labels` are granular);
- a field another manager owns with a different value is a conflict: refused, unless forced (`--force-conflicts`),
  which moves the field to the applier; the same value is shared ownership;
- a field the manager applied before and leaves out now is removed from the object, unless another manager owns it.

Lists (atomic or keyed) are out of scope: the objects replayed here have none where it matters.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

Path = tuple[str, ...]
# What identifies an object rather than being a field of it (structured-merge-diff tracks no ownership for them).
IDENTITY: frozenset[Path] = frozenset({("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")})


class Conflict(Exception):
    """An unforced apply that would change a field another manager owns."""


def leaves(obj: dict[str, Any], prefix: Path = ()) -> dict[Path, Any]:
    """Every scalar (or empty map) of `obj` by its path."""
    found: dict[Path, Any] = {}
    for key, value in obj.items():
        path = (*prefix, str(key))
        if isinstance(value, dict) and value:
            found |= leaves(value, path)
        else:
            found[path] = value
    return found


def _set(obj: dict[str, Any], path: Path, value: Any) -> None:
    for key in path[:-1]:
        obj = obj.setdefault(key, {})
    obj[path[-1]] = value


def _remove(obj: dict[str, Any], path: Path) -> None:
    parents = [obj]
    for key in path[:-1]:
        if not isinstance(parents[-1].get(key), dict):
            return
        parents.append(parents[-1][key])
    parents[-1].pop(path[-1], None)
    # A map left empty by the removal goes too (as the server prunes it).
    for depth in range(len(path) - 1, 0, -1):
        if parents[depth] == {}:
            parents[depth - 1].pop(path[depth - 1], None)


@dataclass
class LiveObject:
    """One object in the API server: its content and, per manager, the fields it owns (managedFields)."""

    content: dict[str, Any] = field(default_factory=dict)
    managers: dict[str, set[Path]] = field(default_factory=dict)

    def apply(self, config: dict[str, Any], manager: str, *, force: bool = True) -> None:
        applied = {p: v for p, v in leaves(config).items() if p not in IDENTITY}
        current = leaves(self.content)
        for other, owned in self.managers.items():
            if other == manager:
                continue
            clashing = {p for p in owned & set(applied) if current.get(p) != applied[p]}
            if clashing and not force:
                raise Conflict(f"{sorted(clashing)} owned by {other}")
            owned -= clashing
        dropped = self.managers.get(manager, set()) - set(applied)
        owned_elsewhere = set().union(*(o for m, o in self.managers.items() if m != manager))
        merged = copy.deepcopy(self.content) or {k: v for k, v in config.items() if k in ("apiVersion", "kind")}
        for path in dropped - owned_elsewhere:
            _remove(merged, path)
        for key in ("apiVersion", "kind"):
            if key in config:
                merged[key] = config[key]
        for path in IDENTITY:
            if len(path) == 2 and path[1] in config.get("metadata", {}):
                _set(merged, path, config["metadata"][path[1]])
        for path, value in applied.items():
            _set(merged, path, copy.deepcopy(value))
        self.content = merged
        self.managers[manager] = set(applied)
        self.managers = {m: o for m, o in self.managers.items() if o}
