"""Objects held to the models upstream publishes, strictly: every field of the object must be one the model
declares (an unknown field is an error, as a strict API server and `kubectl apply --validate=strict` make it),
and the model must accept the object (types, required fields).

Two kinds of published models: the pydantic ones openapi-generator writes (kubeflow-trainer-api: TrainJob,
TrainingRuntime and the JobSet and core types inside them), and the swagger-codegen ones with `openapi_types` and
`attribute_map` (kubeflow-training: PyTorchJob, with the kubernetes client's V1* core types inside)."""
from __future__ import annotations

import importlib
import re
import types
import typing
from typing import Any

import pydantic


def _unwrap(annotation: Any) -> list[Any]:
    """The model classes an annotation can hold (Optional, List, Dict and Union peeled off)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list, dict, tuple):
        args = typing.get_args(annotation)
        if origin is dict:
            args = args[1:]
        return [found for arg in args for found in _unwrap(arg)]
    return [annotation] if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel) else []


def pydantic_unknown_fields(model: type[pydantic.BaseModel], data: Any, where: str) -> list[str]:
    """Every key of `data` (recursively) that `model` does not declare."""
    if isinstance(data, list):
        return [p for i, item in enumerate(data) for p in pydantic_unknown_fields(model, item, f"{where}[{i}]")]
    if not isinstance(data, dict):
        return []
    by_alias = {(field.alias or name): field for name, field in model.model_fields.items()}
    problems: list[str] = []
    for key, value in data.items():
        field = by_alias.get(key)
        if field is None:
            problems.append(f"{where}.{key}: not a field of {model.__name__}")
            continue
        annotation = field.annotation
        inner = _unwrap(annotation)
        if inner:
            if typing.get_origin(_strip_optional(annotation)) is dict and isinstance(value, dict):
                problems += [p for k, v in value.items() for p in pydantic_unknown_fields(inner[0], v, f"{where}.{key}.{k}")]
            else:
                problems += pydantic_unknown_fields(inner[0], value, f"{where}.{key}")
    return problems


def _strip_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def pydantic_problems(model: type[pydantic.BaseModel], data: dict[str, Any], where: str) -> list[str]:
    """Unknown fields, then whatever the model itself refuses (from_dict: types, required fields, enums)."""
    problems = pydantic_unknown_fields(model, data, where)
    try:
        model.from_dict(data)  # type: ignore[attr-defined]
    except (pydantic.ValidationError, ValueError) as exc:
        problems.append(f"{where}: {exc}")
    return problems


# --- swagger-codegen models ---------------------------------------------------------------------------------------

_LIST = re.compile(r"^list\[(.+)\]$")
_DICT = re.compile(r"^dict\(([^,]+), (.+)\)$")
_PRIMITIVES = {"str", "int", "float", "bool", "object", "date", "datetime"}


def _swagger_class(name: str, packages: tuple[str, ...]) -> type | None:
    for package in packages:
        module = importlib.import_module(package)
        if hasattr(module, name):
            return typing.cast(type, getattr(module, name))
    return None


def swagger_unknown_fields(type_name: str, data: Any, where: str,
                           packages: tuple[str, ...] = ("kubeflow.training.models", "kubernetes.client.models")) -> list[str]:
    """Every key of `data` (recursively) that the swagger model `type_name` does not declare in its attribute_map."""
    if (match := _LIST.match(type_name)) and isinstance(data, list):
        return [p for i, item in enumerate(data) for p in swagger_unknown_fields(match.group(1), item, f"{where}[{i}]", packages)]
    if (match := _DICT.match(type_name)) and isinstance(data, dict):
        return [p for k, v in data.items() for p in swagger_unknown_fields(match.group(2), v, f"{where}.{k}", packages)]
    if type_name in _PRIMITIVES or not isinstance(data, dict):
        return []
    model = _swagger_class(type_name, packages)
    if model is None:
        return [f"{where}: no model {type_name} in {', '.join(packages)}"]
    json_to_attr = {json_name: attr for attr, json_name in model.attribute_map.items()}  # type: ignore[attr-defined]
    problems: list[str] = []
    for key, value in data.items():
        attr = json_to_attr.get(key)
        if attr is None:
            problems.append(f"{where}.{key}: not a field of {type_name}")
            continue
        problems += swagger_unknown_fields(model.openapi_types[attr], value, f"{where}.{key}", packages)  # type: ignore[attr-defined]
    return problems
