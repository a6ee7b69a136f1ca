#!/bin/bash
# Build the read-only lower rootfs that every lab node overlays: Debian bookworm with systemd, sshd,
# python3 and sudo. Run by tests/lab/lab.py under a file lock; the result is cached under a name that
# hashes this script and the kernel release, so editing this file builds a fresh base.
# usage: build-base.sh DEST KERNEL_RELEASE          (about 1-2 min, about 300 MB)
set -euo pipefail
DEST=$1
KERNEL_RELEASE=$2
MIRROR=http://deb.debian.org/debian

debootstrap --variant=minbase \
  --include=systemd-sysv,dbus,openssh-server,python3,sudo,iproute2,iputils-ping,procps,kmod,netbase,ca-certificates,gnupg,curl,pciutils \
  bookworm "$DEST" "$MIRROR"

# The lab writes a distinct machine-id, hostname, host keys and authorized_keys into each node's overlay.
: > "$DEST/etc/machine-id"
rm -f "$DEST/var/lib/dbus/machine-id"
ln -s /etc/machine-id "$DEST/var/lib/dbus/machine-id"
rm -f "$DEST"/etc/ssh/ssh_host_*
echo node > "$DEST/etc/hostname"
cat > "$DEST/etc/apt/sources.list" <<'SOURCES'
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SOURCES

# root (key only) and "tester", who may sudo without a password, as on a typical cloud image.
chroot "$DEST" useradd -m -s /bin/bash -G sudo tester
echo 'tester ALL=(ALL) NOPASSWD:ALL' > "$DEST/etc/sudoers.d/tester"
chmod 440 "$DEST/etc/sudoers.d/tester"
printf 'PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n' \
  > "$DEST/etc/ssh/sshd_config.d/cblab.conf"

# A faster, quieter boot: no consoles, no periodic jobs that would compete with the tests for apt's lock.
chroot "$DEST" systemctl mask getty@tty1.service console-getty.service e2scrub_reap.service \
  systemd-pstore.service apt-daily-upgrade.timer apt-daily.timer dpkg-db-backup.timer \
  e2scrub_all.timer fstrim.timer >/dev/null 2>&1

# Early-boot fixes for running Kubernetes pieces inside systemd-nspawn.
cat > "$DEST/usr/local/sbin/cblab-prep" <<'PREP'
#!/bin/sh
# nspawn mounts the cgroup v1 controller hierarchies read-only; runc and the kubelet need them writable.
for c in /sys/fs/cgroup/*/; do mount -o remount,bind,rw "$c" 2>/dev/null; done
mount -o remount,rw /sys/fs/cgroup 2>/dev/null
# The kubelet's OOM watcher opens /dev/kmsg (the same trick kind uses).
[ -e /dev/kmsg ] || ln -s /dev/console /dev/kmsg
# nspawn mounts /sys before it joins the node's network namespace, so /sys/class/net would list the
# host's interfaces (and MACs): mount a sysfs from inside the node and bind its network parts over them.
mkdir -p /run/cblab/sysfs
mount -t sysfs cblab-sysfs /run/cblab/sysfs
mount --bind /run/cblab/sysfs/devices/virtual/net /sys/devices/virtual/net
# A per-node product_uuid: the lab binds /run/cblab-dmi read-only; lay it over /sys/class so that
# /sys/class/dmi/id/product_uuid exists and differs per node, even on hosts without DMI.
if [ -d /run/cblab-dmi/class ]; then
  mount -t overlay cblab-dmi -o lowerdir=/run/cblab-dmi/class:/sys/class /sys/class
fi
mount --bind /run/cblab/sysfs/class/net /sys/class/net
exit 0
PREP
chmod 755 "$DEST/usr/local/sbin/cblab-prep"
cat > "$DEST/etc/systemd/system/cblab-prep.service" <<'UNIT'
[Unit]
Description=Lab node preparation (cgroups, /dev/kmsg, DMI identity)
DefaultDependencies=no
Before=sysinit.target local-fs.target
ConditionVirtualization=container

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/cblab-prep

[Install]
WantedBy=sysinit.target
UNIT
chroot "$DEST" systemctl enable cblab-prep.service >/dev/null 2>&1

# Hosts whose kernel has everything built in (no loadable modules): declare the usual Kubernetes modules
# "builtin" so that `modprobe br_netfilter` succeeds for what the kernel has (ip_vs, if absent, still fails).
mkdir -p "$DEST/lib/modules/$KERNEL_RELEASE"
for m in net/bridge/br_netfilter net/bridge/bridge fs/overlayfs/overlay drivers/net/veth drivers/net/vxlan/vxlan \
  net/netfilter/nf_conntrack net/netfilter/nf_nat net/netfilter/nf_tables net/netfilter/nft_compat \
  net/netfilter/x_tables net/netfilter/xt_conntrack net/netfilter/xt_MASQUERADE net/netfilter/xt_mark \
  net/netfilter/xt_comment net/netfilter/xt_addrtype net/netfilter/xt_multiport net/netfilter/xt_physdev \
  net/netfilter/xt_statistic net/netfilter/xt_set net/netfilter/ipset/ip_set net/ipv4/netfilter/ip_tables \
  net/ipv4/netfilter/iptable_filter net/ipv4/netfilter/iptable_nat net/ipv4/netfilter/iptable_mangle \
  net/ipv4/netfilter/iptable_raw net/ipv6/netfilter/ip6_tables net/ipv6/netfilter/ip6table_filter \
  net/ipv6/netfilter/ip6table_nat net/ipv4/netfilter/nf_defrag_ipv4 net/ipv6/netfilter/nf_defrag_ipv6 \
  net/sched/sch_htb drivers/net/macvlan drivers/net/tun; do
  echo "kernel/$m.ko"
done > "$DEST/lib/modules/$KERNEL_RELEASE/modules.builtin"
touch "$DEST/lib/modules/$KERNEL_RELEASE/modules.order"
chroot "$DEST" depmod "$KERNEL_RELEASE" 2>/dev/null || true

rm -f "$DEST"/var/cache/apt/archives/*.deb
