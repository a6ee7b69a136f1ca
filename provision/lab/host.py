"""What this machine needs for the Vagrant lab, checked in seconds and with the standard library alone: libvirtd
answering, KVM (or the qemu driver chosen), Vagrant and its vagrant-libvirt plugin.

`bootstrap lab up` asks before `vagrant up` (which would fail minutes later); `./dev.sh up` asks before it installs
anything, running this module with the machine's own python3 (`python3 -m provision.lab.host`), so a machine that
cannot run the lab is told why, in one line, before minutes of set-up:

    exit 0   ready (the lab's apt packages installed, libvirtd answering, KVM usable or the qemu driver chosen)
    exit 3   only packages are missing, which set-up installs (their names on stdout), and nothing else stands in
             the way: once installed, libvirtd is started by systemd
    exit 1   something set-up cannot fix (the reason and the fix, one line on stderr)
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

# Where vagrant-libvirt finds libvirt (qemu:///system): libvirtd's socket, or virtqemud's (modular daemons).
LIBVIRT_SOCKETS = (Path("/run/libvirt/libvirt-sock"), Path("/run/libvirt/virtqemud-sock"))
KVM_DEVICE = Path("/dev/kvm")
QEMU_DRIVER_FIX = ("use the qemu driver instead (no KVM needed, much slower): `bootstrap lab up --libvirt-driver qemu` "
                   "or LAB_LIBVIRT_DRIVER=qemu")
# The Debian/Ubuntu packages the lab runs on (scripts/setup.sh installs them; libvirt's network needs dnsmasq).
LAB_PACKAGES = ("vagrant", "vagrant-libvirt", "libvirt-daemon-system", "qemu-system-x86", "qemu-utils", "dnsmasq-base",
                "e2fsprogs")
LIBVIRT_DAEMON_PACKAGE = "libvirt-daemon-system"


def libvirt_problem(sockets: tuple[Path, ...] = LIBVIRT_SOCKETS) -> str | None:
    """Why vagrant-libvirt would fail to reach libvirt (with a socket error of its own), or None."""
    for path in sockets:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(2)
            try:
                probe.connect(str(path))
            except OSError:
                continue
            return None
    return (f"libvirtd is not running (nothing answers on {sockets[0]}): start it with `sudo systemctl start "
            "libvirtd` (or `sudo libvirtd -d` where systemd does not run), then run `bootstrap lab up` again")


def kvm_problem(device: Path = KVM_DEVICE) -> str | None:
    """Why QEMU could not use KVM here, or None."""
    try:
        os.close(os.open(device, os.O_RDWR))
    except FileNotFoundError:
        return f"this machine has no usable KVM ({device} is missing: no hardware virtualisation, or it is off)"
    except PermissionError:
        return f"this machine's KVM is not usable by this user ({device}: permission denied; the kvm group can)"
    except OSError as exc:
        return f"this machine has no usable KVM ({device}: {exc.strerror})"
    return None


def missing_packages(packages: tuple[str, ...] = LAB_PACKAGES) -> list[str]:
    """The lab's packages dpkg does not have installed (all of them where there is no dpkg)."""
    if shutil.which("dpkg-query") is None:
        return list(packages)
    found = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\n", *packages],
                           capture_output=True, text=True, check=False).stdout
    installed = {line.split()[0] for line in found.splitlines() if line.endswith(" installed")}
    return [name for name in packages if name not in installed]


def runs_systemd() -> bool:
    """Whether systemd is this machine's init (it starts libvirtd once the package is installed)."""
    return Path("/run/systemd/system").is_dir()


def vagrant_plugin_problem() -> str | None:
    """Why Vagrant would not find its libvirt provider, or None (asked of Vagrant itself: a second or two)."""
    try:
        listed = subprocess.run(["vagrant", "plugin", "list"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"vagrant does not answer (`vagrant plugin list`: {exc}): reinstall it (`sudo apt-get install vagrant`)"
    if "vagrant-libvirt" not in listed.stdout:
        return ("Vagrant has no libvirt provider (`vagrant plugin list` lacks vagrant-libvirt): "
                "`sudo apt-get install vagrant-libvirt`, or `vagrant plugin install vagrant-libvirt`")
    return None


def check(driver: str) -> tuple[int, str]:
    """(exit code, what to print) for `./dev.sh up`: see the module's docstring."""
    missing = missing_packages()
    kvm = kvm_problem(KVM_DEVICE) if driver == "kvm" else None
    if kvm:
        return 1, f"{kvm}: {QEMU_DRIVER_FIX} (`LAB_LIBVIRT_DRIVER=qemu ./dev.sh up`)"
    if LIBVIRT_DAEMON_PACKAGE in missing and not runs_systemd():
        # Installed, it would not answer either: nothing here starts it. Said before minutes of installing.
        return 1, ("libvirtd is not installed, and this machine does not run systemd to start it once it is: install "
                   f"it (`sudo apt-get install {' '.join(LAB_PACKAGES)}`), start it (`sudo libvirtd -d`), then run "
                   "./dev.sh up again; or run the lab on a machine with systemd")
    if LIBVIRT_DAEMON_PACKAGE not in missing:
        problem = libvirt_problem(LIBVIRT_SOCKETS)
        if problem:
            return 1, problem.replace("`bootstrap lab up`", "./dev.sh up")
    if missing:
        return 3, " ".join(missing)
    problem = vagrant_plugin_problem()
    if problem:
        return 1, problem
    return 0, "the lab can run here: libvirtd answers" + (", KVM is usable" if driver == "kvm" else ", qemu driver")


def main() -> None:
    driver = os.environ.get("LAB_LIBVIRT_DRIVER") or "kvm"
    code, text = check(driver)
    print(text, file=sys.stderr if code == 1 else sys.stdout)
    sys.exit(code)


if __name__ == "__main__":
    main()
