"""containerd's effective configuration, as a prepared node reports it (`containerd config dump`, in the node
report), judged against what prepare wrote: each departure named by its TOML path and value. Read here with
tomllib, not on the node (whose Python may predate it)."""
from __future__ import annotations

import tomllib
from typing import Any

# The CRI plugin's tables per configuration version: 3 (containerd 2.0-2.2) and 4 (2.3) split it in two, 2 (1.x)
# has one.
CRI_V2 = {"runtime": ("plugins", "io.containerd.cri.v1.runtime", "containerd"),
          "sandbox": ("plugins", "io.containerd.cri.v1.images", "pinned_images", "sandbox")}
CRI_V1 = {"runtime": ("plugins", "io.containerd.grpc.v1.cri", "containerd"),
          "sandbox": ("plugins", "io.containerd.grpc.v1.cri", "sandbox_image")}
NVIDIA_BINARY = "nvidia-container-runtime"


def _path(parts: tuple[str, ...]) -> str:
    return ".".join(f"'{part}'" if "." in part else part for part in parts)


def _get(config: dict[str, Any], parts: tuple[str, ...]) -> Any:
    value: Any = config
    for part in parts:
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def config_problems(dump: str, sandbox_image: str, nvidia: bool = False, nvidia_default: bool = False) -> list[str]:
    """One message per departure: the sandbox image, the default runtime (nvidia on GPU nodes when it is to be
    the default, else runc), SystemdCgroup = true on runc, on the default runtime and on nvidia, and the nvidia
    runtime present and pointing at the NVIDIA Container Runtime on GPU nodes."""
    try:
        config = tomllib.loads(dump)
    except tomllib.TOMLDecodeError as exc:
        return [f"`containerd config dump` did not print TOML ({exc})"]
    paths = CRI_V2 if _get(config, CRI_V2["runtime"][:2]) is not None else CRI_V1
    found = []
    sandbox = _get(config, paths["sandbox"])
    if sandbox != sandbox_image:
        found.append(f"{_path(paths['sandbox'])} = {sandbox!r}, expected {sandbox_image!r}")
    runtime = paths["runtime"]
    default = _get(config, (*runtime, "default_runtime_name"))
    wanted_default = "nvidia" if nvidia and nvidia_default else "runc"
    if default != wanted_default:
        found.append(f"{_path((*runtime, 'default_runtime_name'))} = {default!r}, expected {wanted_default!r}")
    runtimes = _get(config, (*runtime, "runtimes")) or {}
    for name in dict.fromkeys(["runc", default or "runc", *(["nvidia"] if nvidia else [])]):
        where = (*runtime, "runtimes", name)
        if name not in runtimes:
            found.append(f"{_path(where)} is missing")
            continue
        systemd = _get(runtimes[name], ("options", "SystemdCgroup"))
        if systemd is not True:
            found.append(f"{_path((*where, 'options', 'SystemdCgroup'))} = {systemd!r}, expected true")
    binary = _get(runtimes, ("nvidia", "options", "BinaryName"))
    if nvidia and "nvidia" in runtimes and not str(binary or "").endswith(NVIDIA_BINARY):
        found.append(f"{_path((*runtime, 'runtimes', 'nvidia', 'options', 'BinaryName'))} = {binary!r}, "
                     f"expected the {NVIDIA_BINARY}")
    return found

