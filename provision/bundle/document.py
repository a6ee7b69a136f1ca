"""A bundle's manifest (bundle.json) read as untrusted input: it comes from a disk or another machine.

Read bounded (its size, then JSON's nesting and numbers), then validated into typed models with the settings' own
value types (a platform key, a Kubernetes version, a release tag, an image reference, a path inside the bundle),
every field strict and no field unknown. Whatever its structure, a manifest is either a `ManifestDocument` or one
InputError line in the tool's words that names the field: never a Python exception, never pydantic's own text.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from provision.errors import InputError
from provision.inputs.files import shown
from provision.inputs.shapes import (
    FINGERPRINT,
    IMAGE_NAME,
    PLATFORM_KEY,
    RELEASE_TAG,
    VERSION,
    Shape,
    _shape,
)

MANIFEST_NAME = "bundle.json"
FORMAT = 1
# A bundle of every platform with the GPU stack lists about 20,000 files in about 3 MB.
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
MAX_FILES = 500_000
# A detached ASCII-armoured signature is well under 1 KiB; an exported key with its signatures a few KiB.
MAX_SIGNATURE_BYTES = 64 * 1024
MAX_KEY_BYTES = 1024 * 1024
# JSON nested deeper than the manifest's own shape (three levels) is not a manifest.
MAX_DEPTH = 8
# The largest file a bundle may list (a registry layer of a CUDA image is a few GiB).
MAX_FILE_BYTES = 1 << 40

_COMPONENT = r"(?!\.{1,2}(?:/|\Z))[A-Za-z0-9._+~@:=,-]{1,255}"
BUNDLE_PATH = _shape("a path inside the bundle", rf"{_COMPONENT}(?:/{_COMPONENT})*",
                     "relative, '/' between components of letters, digits and ._+~@:=,-; no '.', '..' or '//'",
                     "os/debian/pool/main/c/chrony.deb", max_length=4096)
# What a bundle records of the images it holds: references as upstream writes them (a tag or a digest; the
# fixed-tag rule of settings is the settings' own), and their paths in the bundle's registry.
_IMAGE = Shape("an image reference", re.compile(rf"{IMAGE_NAME.pattern.pattern}(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
                                                r"(?:@sha256:[0-9a-f]{64})?", re.ASCII),
               "[registry/]path[:tag][@sha256:digest]", "registry.k8s.io/pause:3.10.1", max_length=255)
RELEASE = _shape("a release", r"v?[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}", "letters, digits and '.', '+', '_', '-'",
                 "v1.15.2", max_length=64)
KUBERNETES_MINOR = _shape("a Kubernetes minor", r"1\.(?:0|[1-9][0-9]{0,2})", "1.<minor>", "1.36", max_length=8)
SHA256 = _shape("a sha256", r"[0-9a-f]{64}", "64 lower-case hexadecimal digits", "e3b0c442...", max_length=64)
ADDON = _shape("an add-on name", r"[a-z][a-z_]{0,31}", "lower-case letters and '_'", "volcano", max_length=32)


BundlePath = Annotated[str, AfterValidator(BUNDLE_PATH.parse)]
Sha256 = Annotated[str, AfterValidator(SHA256.parse)]
PlatformKey = Annotated[str, AfterValidator(PLATFORM_KEY.parse)]
KubernetesMinor = Annotated[str, AfterValidator(KUBERNETES_MINOR.parse)]
KubernetesRelease = Annotated[str, AfterValidator(VERSION.named("a Kubernetes release", "1.36.4").parse)]
CalicoTag = Annotated[str, AfterValidator(RELEASE_TAG.named("a Calico release tag", "v3.33.1").parse)]
AddonName = Annotated[str, AfterValidator(ADDON.parse)]
Release = Annotated[str, AfterValidator(RELEASE.parse)]
Image = Annotated[str, AfterValidator(_IMAGE.parse)]
Fingerprint = Annotated[str, AfterValidator(FINGERPRINT.parse)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class FileEntry(_Strict):
    size: int = Field(ge=0, le=MAX_FILE_BYTES)
    sha256: Sha256


class ContentsModel(_Strict):
    platforms: list[PlatformKey] = Field(min_length=1, max_length=64)
    gpu: bool
    kubernetes_minor: KubernetesMinor
    kubernetes_version: KubernetesRelease
    calico: CalicoTag
    addons: dict[AddonName, Release] = Field(max_length=64)
    images: dict[Image, Image] = Field(max_length=10_000)
    cifar10: bool
    containerd_sources: dict[PlatformKey, Literal["docker", "distribution"]] = Field(default_factory=dict, max_length=64)


class ManifestDocument(_Strict):
    format: Literal[1]
    contents: ContentsModel
    files: dict[BundlePath, FileEntry] = Field(max_length=MAX_FILES)
    signed_by: Fingerprint


# pydantic's error types in the tool's words (what the field must be).
_WORDS = {
    "missing": "is missing", "extra_forbidden": "is not a field of a bundle manifest",
    "int_type": "must be a whole number", "int_parsing": "must be a whole number", "bool_type": "must be true or false",
    "string_type": "must be text", "dict_type": "must be a mapping", "tuple_type": "must be a list",
    "list_type": "must be a list", "model_type": "must be a mapping", "model_attributes_type": "must be a mapping",
    "literal_error": "is not a value this release reads", "greater_than_equal": "is below its least value",
    "less_than_equal": "is past its largest value", "too_long": "has more entries than a bundle has",
    "too_short": "is empty",
}


def describe(error: Mapping[str, Any], source: str) -> str:
    """One pydantic error as one line: where (dotted, each user-written key quoted) and what it must be."""
    parts = [p for p in error["loc"] if p != "[key]"]
    where = ".".join(str(p) if isinstance(p, int) or re.fullmatch(r"[a-z_]{1,32}", str(p), re.ASCII) else shown(p)
                     for p in parts)
    kind = error["type"]
    if kind == "value_error":
        said = str(error.get("ctx", {}).get("error", "")) or "is not valid"
    else:
        said = f"{shown(error.get('input'))} {_WORDS[kind]}" if kind in _WORDS and kind not in (
            "missing", "extra_forbidden") else _WORDS.get(kind, "is not valid here")
    return f"{source}: {where}: {said}" if where else f"{source}: {said}"


def _depth(text: str) -> int:
    """How deep JSON brackets nest outside strings (a cheap scan before json.loads, which recurses)."""
    deepest = depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def read_manifest(data: bytes, source: str = MANIFEST_NAME) -> ManifestDocument:
    """The manifest's bytes as a checked document, or InputError in one line: its size, its text, its nesting, its
    JSON, then its fields."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise InputError(f"{source}: {len(data)} bytes, more than a manifest has ({MAX_MANIFEST_BYTES})")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{source}: not UTF-8 text: not a bundle manifest") from None
    if _depth(text) > MAX_DEPTH:
        raise InputError(f"{source}: nested more than {MAX_DEPTH} deep: not a bundle manifest")
    try:
        raw = json.loads(text, parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{source}: not JSON ({str(exc).splitlines()[0][:120]}): not a bundle manifest") from None
    if not isinstance(raw, dict):
        raise InputError(f"{source}: its top level is not a mapping: not a bundle manifest")
    if type(raw.get("format")) is not int or raw.get("format") != FORMAT:
        raise InputError(f"{source}: format {shown(raw.get('format'))}, this release reads {FORMAT}")
    try:
        return ManifestDocument.model_validate(raw)
    except ValidationError as exc:
        raise InputError(describe(exc.errors(include_url=False)[0], source)) from None


def contents_from_dict(data: object) -> dict[str, Any]:
    """A manifest's `contents` checked, as the fields of manifest.Contents."""
    try:
        checked = ContentsModel.model_validate(data)
    except ValidationError as exc:
        raise InputError(describe(exc.errors(include_url=False)[0], f"{MANIFEST_NAME}: contents")) from None
    fields = checked.model_dump()
    fields["platforms"] = tuple(fields["platforms"])
    return fields
