#!/usr/bin/python
"""Cut every GPU of the node into MIG instances of one profile with `nvidia-smi mig` (the driver's own tool), and
report what the GPUs hold afterwards: returned under `cb_nvidia_mig`.

For each GPU: MIG mode on (`nvidia-smi -i N -mig 1`), then, unless the GPU already holds exactly the wanted
instances, its compute and GPU instances destroyed and the wanted ones created (`nvidia-smi mig -i N -cgi
P,P,... -C`). A GPU that already matches is not touched, so a second run changes nothing. A GPU whose MIG mode
stays pending (some GPUs need a reset for it, which a process holding the GPU prevents) fails the task with the
fix; so does a GPU whose product has no count for the profile (preflight refuses those before anything runs).
GPU instances do not survive a reboot: `bootstrap up --from gpu` lays them out again.
"""
from __future__ import annotations

import re

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: cb_nvidia_mig
short_description: Lay out MIG instances of one profile on every GPU of the node (cb_nvidia_mig)
options:
  profile:
    description: The MIG profile every instance has, e.g. 1g.10gb.
    type: str
    required: true
  instances:
    description: PCI device id (4 hex digits, lower case) -> instances of the profile one such GPU holds.
    type: dict
    required: true
"""

REPORT_KEY = "cb_nvidia_mig"
QUERY = ["nvidia-smi", "--query-gpu=index,pci.device_id,mig.mode.current,mig.mode.pending",
         "--format=csv,noheader"]
GPU_LINE = re.compile(r"GPU (\d+): ")
MIG_LINE = re.compile(r"\s+MIG (\S+)\s+Device\s+\d+: ")


def parse_gpus(text: str) -> list[dict[str, object]]:
    """nvidia-smi's CSV query -> [{index, device_id (4 hex digits), current, pending}]."""
    gpus = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 4 or not fields[0].isdigit():
            continue
        # 0x20B010DE: the device id, then NVIDIA's vendor id.
        device = fields[1].lower().removeprefix("0x")[:4]
        gpus.append({"index": int(fields[0]), "device_id": device, "current": fields[2], "pending": fields[3]})
    return gpus


def parse_instances(text: str) -> dict[int, list[str]]:
    """`nvidia-smi -L` -> GPU index -> the profiles of the MIG devices listed under it."""
    found: dict[int, list[str]] = {}
    gpu = None
    for line in text.splitlines():
        header = GPU_LINE.match(line)
        if header:
            gpu = int(header.group(1))
            found[gpu] = []
            continue
        device = MIG_LINE.match(line)
        if device and gpu is not None:
            found[gpu].append(device.group(1))
    return found


def main() -> None:
    module = AnsibleModule(argument_spec={"profile": {"type": "str", "required": True},
                                          "instances": {"type": "dict", "required": True}},
                           supports_check_mode=True)
    profile = module.params["profile"]
    instances = {str(k).lower(): int(v) for k, v in module.params["instances"].items()}

    def run(argv: list[str]) -> str:
        rc, out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg=f"{' '.join(argv)} failed: {(err or out).strip()[:500]}", argv=argv)
        return str(out)

    changed = False
    report = []
    for gpu in parse_gpus(run(QUERY)):
        index = str(gpu["index"])
        count = instances.get(str(gpu["device_id"]))
        if count is None:
            module.fail_json(msg=f"GPU {index} (device 0x{gpu['device_id']}) has no MIG profile {profile} in the "
                                 "versions table: set gpu.mig.strategy: none, or gpu=false for this node")
        if gpu["current"] != "Enabled":
            changed = True
            if not module.check_mode:
                run(["nvidia-smi", "-i", index, "-mig", "1"])
                gpu = next(g for g in parse_gpus(run(QUERY)) if str(g["index"]) == index)
                if gpu["current"] != "Enabled":
                    module.fail_json(msg=f"GPU {index}: MIG mode is {gpu['pending']} but not yet active: the GPU "
                                         "needs a reset, which a process using it prevents. Stop what uses the GPU "
                                         "(`nvidia-smi` lists it) or reboot the node, then `bootstrap up --from gpu`")
        held = parse_instances(run(["nvidia-smi", "-L"])).get(int(index), [])
        if held != [profile] * count:
            changed = True
            if not module.check_mode:
                # Destroying fails while a process uses an instance: the message says which GPU.
                if held:
                    run(["nvidia-smi", "mig", "-i", index, "-dci"])
                    run(["nvidia-smi", "mig", "-i", index, "-dgi"])
                run(["nvidia-smi", "mig", "-i", index, "-cgi", ",".join([profile] * count), "-C"])
                held = parse_instances(run(["nvidia-smi", "-L"])).get(int(index), [])
        report.append({"index": int(index), "device_id": gpu["device_id"], "instances": held})
    module.exit_json(changed=changed, **{REPORT_KEY: {"profile": profile, "gpus": report}})


if __name__ == "__main__":
    main()
