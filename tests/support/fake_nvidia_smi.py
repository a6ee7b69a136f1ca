"""A stand-in for `nvidia-smi` on a MIG-capable node: the calls the nvidia_mig role's module makes (the CSV query,
-L, -mig 1, mig -dci/-dgi/-cgi), answered from a JSON file that holds the GPUs' state, each call appended to it.

Written into a PATH directory by `install(directory, gpus)`; a GPU {"device": "0x20B210DE", "mode": "Disabled"}
may carry "needs_reset": true (its MIG mode stays pending, as on a GPU a process holds) or "busy": true (its
instances cannot be destroyed). Output shapes follow nvidia-smi's as NVIDIA's MIG user guide shows them.
"""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

STATE_ENV = "FAKE_NVIDIA_SMI_STATE"


def install(directory: Path, gpus: list[dict[str, Any]]) -> Path:
    """Put `nvidia-smi` into `directory`; returns the state file (its "calls" list the argv of each call)."""
    state = directory / "nvidia-smi-state.json"
    state.write_text(json.dumps({"gpus": gpus, "calls": []}))
    script = directory / "nvidia-smi"
    script.write_text(f"#!{sys.executable}\nimport os, sys\nos.environ.setdefault({STATE_ENV!r}, {str(state)!r})\n"
                      f"sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
                      "from tests.support.fake_nvidia_smi import main\nsys.exit(main(sys.argv[1:]))\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return state


def main(argv: list[str]) -> int:
    path = Path(os.environ[STATE_ENV])
    state = json.loads(path.read_text())
    state["calls"].append(argv)
    gpus = state["gpus"]
    code = 0
    if argv and argv[0].startswith("--query-gpu="):
        for index, gpu in enumerate(gpus):
            pending = "Enabled" if gpu.get("pending") else gpu["mode"]
            print(f"{index}, {gpu['device']}, {gpu['mode']}, {pending}")
    elif argv == ["-L"]:
        for index, gpu in enumerate(gpus):
            print(f"GPU {index}: NVIDIA A100-SXM4-80GB (UUID: GPU-{index:08d}-0000-0000-0000-000000000000)")
            for n, profile in enumerate(gpu.get("instances", [])):
                print(f"  MIG {profile:<12} Device {n:>2}: (UUID: MIG-{index:04d}{n:04d}-0000-0000-0000-000000000000)")
    elif argv[:1] == ["-i"] and argv[2:] == ["-mig", "1"]:
        gpu = gpus[int(argv[1])]
        if gpu.get("needs_reset"):
            gpu["pending"] = True
            print(f"Enabled MIG Mode for GPU 0000000{argv[1]}:00.0 (pending: GPU reset required)")
        else:
            gpu["mode"] = "Enabled"
    elif argv[:2] == ["mig", "-i"] and argv[3] in ("-dci", "-dgi"):
        gpu = gpus[int(argv[2])]
        if gpu.get("busy"):
            print("Unable to destroy compute instance: In use by another client", file=sys.stderr)
            code = 6
        elif argv[3] == "-dgi":
            gpu["instances"] = []
    elif argv[:2] == ["mig", "-i"] and argv[3] == "-cgi" and argv[5:] == ["-C"]:
        gpu = gpus[int(argv[2])]
        if gpu["mode"] != "Enabled" or gpu.get("instances"):
            print("Failed to create GPU instances: Insufficient Resources", file=sys.stderr)
            code = 2
        else:
            gpu["instances"] = argv[4].split(",")
    else:
        print(f"fake nvidia-smi: unexpected call {argv}", file=sys.stderr)
        code = 99
    path.write_text(json.dumps(state))
    return code
