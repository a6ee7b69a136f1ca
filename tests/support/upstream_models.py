"""Strict checks of objects against the models upstream publishes in Python: the OpenAPI-generated classes of the
`kserve` package (InferenceService and its specs) and of the kubernetes client (the core types they embed). Every
key must be a field of the model at that place, recursively, so a misspelt or misplaced field fails; the value
types are followed through lists and maps. (kserve's own deserializer stops at the core types it embeds.)"""
from __future__ import annotations

import re
from typing import Any

import kserve.models
from kubernetes.client import models as core_models

PRIMITIVES = {"str", "int", "float", "bool", "object", "date", "datetime"}


def _model(name: str) -> Any:
    found = getattr(kserve.models, name, None) or getattr(core_models, name, None)
    if found is None:
        raise KeyError(f"no model {name} in kserve or the kubernetes client")
    return found


def problems(value: Any, type_name: str, path: str = "") -> list[str]:
    """Where `value` is not a `type_name` (a model class name, or list[...] / dict(str, ...) of one)."""
    listed = re.fullmatch(r"list\[(.+)\]", type_name)
    if listed:
        if not isinstance(value, list):
            return [f"{path}: not a list"]
        return [p for i, item in enumerate(value) for p in problems(item, listed.group(1), f"{path}[{i}]")]
    mapped = re.fullmatch(r"dict\(str, (.+)\)", type_name)
    if mapped:
        if not isinstance(value, dict):
            return [f"{path}: not a map"]
        return [p for key, item in value.items() for p in problems(item, mapped.group(1), f"{path}.{key}")]
    if type_name in PRIMITIVES:
        return []
    if type_name in ("ResourceQuantity", "IntOrString"):
        return [] if isinstance(value, (str, int, float)) else [f"{path}: not a quantity"]
    if not isinstance(value, dict):
        return [f"{path}: not an object ({type_name})"]
    model = _model(type_name)
    by_json = {json_key: attr for attr, json_key in model.attribute_map.items()}
    found = []
    for key, item in value.items():
        if key not in by_json:
            found.append(f"{path}.{key}: not a field of {type_name}")
            continue
        found += problems(item, model.openapi_types[by_json[key]], f"{path}.{key}")
    return found
