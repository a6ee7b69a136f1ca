"""Install the Ansible collections the playbooks need, without Galaxy.

Galaxy is not reachable everywhere this runs, but PyPI is: the `ansible` community package's wheel carries
every collection, so we download that one pinned wheel and unpack only the collections we use.
usage: python scripts/install_collections.py DEST   (DEST/ansible_collections/<ns>/<name>)
"""
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ANSIBLE_PACKAGE = "ansible==12.3.0"  # the community release built for ansible-core 2.19
COLLECTIONS = ("ansible/posix", "community/general", "kubernetes/core")


def main(dest: Path) -> None:
    stamp = dest / "installed-from.txt"
    if stamp.exists() and stamp.read_text().strip() == ANSIBLE_PACKAGE:
        return
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "-d", tmp, ANSIBLE_PACKAGE], check=True)
        wheel = next(Path(tmp).glob("ansible-*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            members = [m for m in zf.namelist()
                       if any(m.startswith(f"ansible_collections/{c}/") for c in COLLECTIONS)]
            zf.extractall(dest, members)
    for c in COLLECTIONS:
        manifest = json.loads((dest / "ansible_collections" / c / "MANIFEST.json").read_text())
        print(f"collection {c.replace('/', '.')} {manifest['collection_info']['version']}")
    stamp.write_text(ANSIBLE_PACKAGE + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
