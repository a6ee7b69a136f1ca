"""A libvirt Vagrant box built here from a debootstrap image, since no box can be downloaded on this machine.

The image is a bare ext4 filesystem (no partition table, no boot loader): the box's own Vagrantfile boots it
with the kernel and initrd shipped beside it (libvirt direct kernel boot). Otherwise it is what a public box
is: a `vagrant` user with passwordless sudo who accepts Vagrant's insecure key (Vagrant swaps in a fresh key
on first boot), sshd with host keys made on first boot, DHCP on the first interface. The built box is cached
under `.cache/vagrant-lab/`, keyed by a hash of the recipe.

By hand: `python -m tests.vagrant.box` builds (or reuses) it and prints the .box path.
"""
from __future__ import annotations

import glob
import hashlib
import inspect
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from tests.support.paths import REPO_ROOT as PROJECT_ROOT

CACHE_DIR = Path(os.environ.get("CB_VAGRANT_CACHE", PROJECT_ROOT / ".cache" / "vagrant-lab"))
MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm"
PACKAGES = ("systemd-sysv", "udev", "dbus", "kmod", "linux-image-amd64", "openssh-server", "sudo", "python3",
            "iproute2", "iputils-ping", "iptables", "systemd-resolved", "ca-certificates", "curl", "gnupg",
            "procps", "netbase", "libpam-systemd")
IMAGE_SIZE = "8G"
# Where Debian's and HashiCorp's Vagrant packages keep the well-known insecure public key.
INSECURE_KEY_GLOBS = ("/usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub",
                      "/opt/vagrant/embedded/gems/gems/vagrant-*/keys/vagrant.pub",
                      "/opt/vagrant/embedded/gems/*/gems/vagrant-*/keys/vagrant.pub")

# Direct kernel boot from files shipped in the box; the storage pool is the test's choice.
# (No serial console here: vagrant-libvirt 0.11 cannot merge a box's `serial` with a Vagrantfile that has none.)
BOX_VAGRANTFILE = """\
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |lv|
    lv.kernel = File.join(__dir__, "vmlinuz")
    lv.initrd = File.join(__dir__, "initrd.img")
    lv.cmd_line = "root=/dev/vda rw console=ttyS0 net.ifnames=0"
    lv.disk_bus = "virtio"
    lv.graphics_type = "none"
    lv.video_type = "none"
    lv.storage_pool_name = ENV["CB_LAB_POOL"] unless ENV["CB_LAB_POOL"].to_s.empty?
  end
end
"""


class BoxBuildError(RuntimeError):
    pass


def image_hash() -> str:
    """Changes with what goes into the image (not with comments elsewhere in this file)."""
    recipe = repr((MIRROR, SUITE, PACKAGES, IMAGE_SIZE, inspect.getsource(configure_rootfs)))
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


def recipe_hash() -> str:
    return hashlib.sha256(f"{image_hash()} {BOX_VAGRANTFILE}".encode()).hexdigest()[:12]


def box_name() -> str:
    return f"cb-lab/bookworm-{recipe_hash()}"


def insecure_public_key() -> str:
    for pattern in INSECURE_KEY_GLOBS:
        for path in sorted(glob.glob(pattern)):
            return Path(path).read_text().strip()
    raise BoxBuildError("Vagrant's insecure public key (keys/vagrant.pub) was not found: is vagrant installed?")


def _run(argv: list[str], log: Path) -> None:
    with log.open("a") as handle:
        handle.write(f"$ {' '.join(argv)}\n")
        handle.flush()
        result = subprocess.run(argv, stdout=handle, stderr=subprocess.STDOUT, check=False, timeout=1800)
    if result.returncode != 0:
        raise BoxBuildError(f"`{' '.join(argv[:3])} ...` failed (exit {result.returncode}); see {log}")


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def configure_rootfs(root: Path, log: Path) -> None:
    """Turn a debootstrapped tree into a box: the conventions every public Vagrant box follows."""
    _write(root / "etc/hostname", "vagrant\n")
    _write(root / "etc/hosts", "127.0.0.1\tlocalhost\n127.0.1.1\tvagrant\n::1\tlocalhost ip6-localhost\n")
    _write(root / "etc/fstab", "/dev/vda / ext4 defaults,discard 0 1\n")
    _write(root / "etc/apt/sources.list",
           f"deb {MIRROR} {SUITE} main\ndeb {MIRROR} {SUITE}-updates main\n"
           f"deb {MIRROR}-security {SUITE}-security main\n")
    # The first interface (the provider's management network) asks DHCP; Vagrant configures the others.
    _write(root / "etc/systemd/network/10-eth0.network", "[Match]\nName=eth0\n\n[Network]\nDHCP=ipv4\n")
    _write(root / "etc/systemd/system/systemd-networkd-wait-online.service.d/any.conf",
           "[Service]\nExecStart=\nExecStart=/lib/systemd/systemd-networkd-wait-online --any --timeout=30\n")
    # Host keys are made on each machine's first boot, so two machines never share one.
    for key in root.glob("etc/ssh/ssh_host_*"):
        key.unlink()
    _write(root / "etc/systemd/system/ssh.service.d/host-keys.conf",
           "[Service]\nExecStartPre=\nExecStartPre=/usr/bin/ssh-keygen -A\nExecStartPre=/usr/sbin/sshd -t\n")
    _write(root / "etc/ssh/sshd_config.d/box.conf", "UseDNS no\n")
    # An empty machine-id is filled on first boot: every machine gets its own (Kubernetes needs that).
    _write(root / "etc/machine-id", "")
    (root / "var/lib/dbus/machine-id").unlink(missing_ok=True)
    _run(["chroot", str(root), "useradd", "--create-home", "--shell", "/bin/bash", "vagrant"], log)
    _write(root / "etc/sudoers.d/vagrant", "vagrant ALL=(ALL) NOPASSWD: ALL\n", 0o440)
    ssh_dir = root / "home/vagrant/.ssh"
    _write(ssh_dir / "authorized_keys", insecure_public_key() + "\n", 0o600)
    ssh_dir.chmod(0o700)
    _run(["chroot", str(root), "chown", "-R", "vagrant:vagrant", "/home/vagrant/.ssh"], log)
    _run(["chroot", str(root), "systemctl", "enable", "systemd-networkd", "systemd-resolved", "ssh"], log)
    # The apt timers would take the dpkg lock just when the toolkit installs packages.
    for timer in ("apt-daily.timer", "apt-daily-upgrade.timer"):
        (root / "etc/systemd/system" / timer).unlink(missing_ok=True)
        (root / "etc/systemd/system" / timer).symlink_to("/dev/null")
    _run(["chroot", str(root), "apt-get", "clean"], log)
    shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
    (root / "var/lib/apt/lists/partial").mkdir(parents=True)


def build_image(cache_dir: Path) -> Path:
    """The directory holding box.img, vmlinuz and initrd.img, built when missing (debootstrap: minutes)."""
    image_dir = cache_dir / f"image-{image_hash()}"
    if image_dir.is_dir():
        return image_dir
    for missing in ("debootstrap", "mkfs.ext4", "qemu-img", "chroot"):
        if shutil.which(missing) is None:
            raise BoxBuildError(f"{missing} is not installed: the box is built with debootstrap, e2fsprogs, qemu-utils")
    work = cache_dir / "build"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    log = cache_dir / "build.log"
    log.write_text("")
    root = work / "rootfs"
    _run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(root), MIRROR], log)
    configure_rootfs(root, log)
    built = work / "image"
    built.mkdir()
    shutil.copy(sorted(root.glob("boot/vmlinuz-*"))[-1], built / "vmlinuz")
    shutil.copy(sorted(root.glob("boot/initrd.img-*"))[-1], built / "initrd.img")
    raw = work / "rootfs.raw"
    _run(["truncate", "-s", IMAGE_SIZE, str(raw)], log)
    _run(["mkfs.ext4", "-q", "-F", "-L", "root", "-d", str(root), str(raw)], log)
    _run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(built / "box.img")], log)
    built.rename(image_dir)
    shutil.rmtree(work)
    return image_dir


def build_box(cache_dir: Path = CACHE_DIR) -> Path:
    """The .box file for this recipe: the cached image with the box's metadata and Vagrantfile."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    box_file = cache_dir / f"bookworm-{recipe_hash()}.box"
    if box_file.is_file():
        return box_file
    image_dir = build_image(cache_dir)
    metadata = json.dumps({"provider": "libvirt", "format": "qcow2", "virtual_size": int(IMAGE_SIZE.rstrip("G"))})
    partial = box_file.with_suffix(".partial")
    with tarfile.open(partial, "w") as archive:
        for name, text in (("metadata.json", metadata), ("Vagrantfile", BOX_VAGRANTFILE)):
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            archive.addfile(info, io.BytesIO(text.encode()))
        for name in ("box.img", "vmlinuz", "initrd.img"):
            archive.add(image_dir / name, arcname=name)
    for stale in cache_dir.glob("bookworm-*.box"):
        stale.unlink()
    partial.rename(box_file)
    return box_file


if __name__ == "__main__":
    print(build_box())
