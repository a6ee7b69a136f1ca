#!/bin/bash
# Build the read-only lower rootfs that every lab node of one flavour overlays: Debian with systemd, sshd,
# python3 and sudo. Run by tests/lab/lab.py under a file lock; the result is cached under a name that
# hashes this script, the flavour and the kernel release, so editing this file builds fresh bases.
# usage: build-base.sh DEST KERNEL_RELEASE [FLAVOUR]     (about 1-2 min, about 300 MB)
#   FLAVOUR: bookworm (default), trixie, sid: that Debian suite;
#            rocky9, el8: a bookworm rootfs shaped like Rocky Linux 9 / 8 (see shape_rhel below); rocky9's
#            /usr/bin/python3 is a real CPython 3.9, EL9's interpreter (see el9_python below);
#            ubuntu2204, ubuntu2404: a bookworm rootfs shaped like Ubuntu 22.04 / 24.04 (see shape_ubuntu below).
set -euo pipefail
DEST=$1
KERNEL_RELEASE=$2
FLAVOUR=${3:-bookworm}
MIRROR=http://deb.debian.org/debian
PACKAGES=systemd-sysv,dbus,openssh-server,python3,sudo,iproute2,iputils-ping,procps,kmod,netbase,ca-certificates,gnupg,curl,pciutils
# What the RHEL-shaped flavours take from Debian: dnf 4.14 and rpm 4.18 (EL9's dnf generation), the tools the
# product's stand-in RPMs for kubeadm's prerequisites name (the stand-ins own no files; these are the binaries),
# firewalld with its Python bindings (polkitd needs a logind, which debootstrap does not pick itself), and SELinux's userland (the kernel here has no SELinux: always Disabled).
RHEL_PACKAGES=rpm,dnf,python3-dnf,dnf-plugins-core,python3-selinux,selinux-utils,firewalld,python3-firewall,libpam-systemd,chrony,conntrack,ethtool,ipset,iptables,socat
# What bullseye's Python 3.9 needs from bookworm beyond what bookworm's own python3 brings (el9_python).
EL9_PYTHON_DEPS=libdb5.3,media-types,tzdata,libnsl2,libtirpc3,libreadline8,libsqlite3-0
# bullseye's CPython 3.9 and the libraries bookworm no longer has (OpenSSL 1.1, libffi 7, mpdecimal).
EL9_PYTHON_DEBS="python3.9 python3.9-minimal libpython3.9-minimal libpython3.9-stdlib libssl1.1 libffi7 libmpdec3"

case $FLAVOUR in
  bookworm|trixie|sid) SUITE=$FLAVOUR ;;
  rocky9) SUITE=bookworm; PACKAGES=$PACKAGES,$RHEL_PACKAGES,$EL9_PYTHON_DEPS ;;
  el8) SUITE=bookworm; PACKAGES=$PACKAGES,$RHEL_PACKAGES ;;
  # Ubuntu's archive cannot be reached: Debian's userland, Ubuntu's identity, apt layout and archive keyring.
  ubuntu2204|ubuntu2404) SUITE=bookworm ;;
  *) echo "build-base.sh: unknown flavour $FLAVOUR" >&2; exit 2 ;;
esac

debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$DEST" "$MIRROR"

# The lab writes a distinct machine-id, hostname, host keys and authorized_keys into each node's overlay.
: > "$DEST/etc/machine-id"
rm -f "$DEST/var/lib/dbus/machine-id"
ln -s /etc/machine-id "$DEST/var/lib/dbus/machine-id"
rm -f "$DEST"/etc/ssh/ssh_host_*
echo node > "$DEST/etc/hostname"
case $SUITE in
  sid) printf 'deb %s sid main\n' "$MIRROR" ;;
  *) printf 'deb %s %s main\ndeb %s %s-updates main\ndeb http://deb.debian.org/debian-security %s-security main\n' \
       "$MIRROR" "$SUITE" "$MIRROR" "$SUITE" "$SUITE" ;;
esac > "$DEST/etc/apt/sources.list"
# The archive served here keeps trixie's and sid's Release files past their Valid-Until date: without this apt
# refuses them as expired. bookworm's are current, and its nodes stay as a real bookworm machine is.
if [ "$SUITE" != bookworm ]; then
  printf 'Acquire::Check-Valid-Until "false";\nAcquire::Check-Date "false";\n' \
    > "$DEST/etc/apt/apt.conf.d/99cblab-archive-dates"
fi

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

# RHEL-shaped flavours: the same Debian userland, but everything Ansible and the product look at says Rocky
# Linux, and dnf is the package manager. The lab adds the per-session parts when it prepares a node: the
# repository files under /etc/yum.repos.d (rocky.repo, naming the lab's RPM repository) and their key.
# standin_rpm NAME VERSION SUMMARY PROVIDES...: build a noarch RPM without files inside the rootfs.
standin_rpm() {
  local name=$1 version=$2 summary=$3
  shift 3
  mkdir -p "$DEST/tmp/rpmbuild/SPECS"
  {
    printf 'Name: %s\nVersion: %s\nRelease: 1.cblab\nSummary: %s (cluster-bootstrap lab stand-in)\n' \
      "$name" "$version" "$summary"
    printf 'License: Placeholder\nBuildArch: noarch\n'
    for provides in "$@"; do printf 'Provides: %s\n' "$provides"; done
    printf '%%description\nStand-in that owns no files.\n%%files\n'
  } > "$DEST/tmp/rpmbuild/SPECS/$name.spec"
  chroot "$DEST" rpmbuild --quiet -bb --define '_topdir /tmp/rpmbuild' "/tmp/rpmbuild/SPECS/$name.spec"
}

shape_rhel() {
  local major=$1 version=$2 codename=$3
  rm -f "$DEST/etc/os-release" "$DEST/etc/debian_version"
  cat > "$DEST/usr/lib/os-release" <<OSRELEASE
NAME="Rocky Linux"
VERSION="$version ($codename)"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="$version"
PLATFORM_ID="platform:el$major"
PRETTY_NAME="Rocky Linux $version ($codename)"
ANSI_COLOR="0;32"
LOGO="fedora-logo-icon"
CPE_NAME="cpe:/o:rocky:rocky:$major::baseos"
HOME_URL="https://rockylinux.org/"
BUG_REPORT_URL="https://bugs.rockylinux.org/"
ROCKY_SUPPORT_PRODUCT="Rocky-Linux-$major"
ROCKY_SUPPORT_PRODUCT_VERSION="$version"
REDHAT_SUPPORT_PRODUCT="Rocky Linux"
REDHAT_SUPPORT_PRODUCT_VERSION="$version"
OSRELEASE
  ln -s ../usr/lib/os-release "$DEST/etc/os-release"
  echo "Rocky Linux release $version ($codename)" > "$DEST/etc/rocky-release"
  ln -sf rocky-release "$DEST/etc/redhat-release"
  ln -sf rocky-release "$DEST/etc/system-release"

  # rpm's database where RHEL keeps it (Debian's rpm defaults to one per user), for rpm, dnf and Ansible alike.
  mkdir -p "$DEST/etc/rpm"
  echo '%_dbpath /var/lib/rpm' > "$DEST/etc/rpm/macros.cblab"
  # File-less stand-ins in the rpm database for what a Rocky node has from its own packages. dnf derives
  # $releasever from the one that provides system-release(releasever) (without it: "Unable to detect release
  # version"); package scriptlets need /bin/sh, which Rocky's bash provides.
  standin_rpm rocky-release "$version" "Rocky Linux release files" "system-release = $version" \
    "system-release(releasever) = $major" "redhat-release = $version" "rocky-release(upstream) = $version"
  standin_rpm bash 5.1.8 "the Debian base's shell" /bin/sh /bin/bash
  chroot "$DEST" sh -c 'rpm -i --nodeps /tmp/rpmbuild/RPMS/noarch/*.rpm'
  rm -rf "$DEST/tmp/rpmbuild"

  # dnf-plugins-core enables its `local` plugin, whose _dnf_local repository has gpgcheck=1 and no key: every
  # install would fail on it. Rocky does not ship the plugin.
  sed -i 's/^enabled *=.*/enabled=0/' "$DEST/etc/dnf/plugins/local.conf"
  # Rocky's dnf.conf. Debian's skips unreachable repositories, which would hide what the product must report.
  printf '[main]\ngpgcheck=1\ninstallonly_limit=3\nclean_requirements_on_remove=True\nbest=True\nskip_if_unavailable=False\n' \
    > "$DEST/etc/dnf/dnf.conf"
  mkdir -p "$DEST/etc/yum.repos.d" "$DEST/etc/pki/rpm-gpg"
  # Rocky's `yum` package: yum is dnf (Ansible's yum_versionlock, among others, looks for it by that name).
  ln -s dnf-3 "$DEST/usr/bin/yum"

  # apt and dpkg are kept (the node's binaries come from them) but out of PATH, and no apt source is left: the
  # product must find a dnf machine, as `command -v apt-get` or `apt-mark` would tell it otherwise.
  mkdir -p "$DEST/usr/lib/cblab/debian-bin"
  for tool in "$DEST"/usr/bin/apt* "$DEST"/usr/bin/dpkg* "$DEST"/usr/sbin/dpkg*; do
    [ -e "$tool" ] && mv "$tool" "$DEST/usr/lib/cblab/debian-bin/"
  done
  rm -f "$DEST/etc/apt/sources.list" "$DEST"/etc/apt/sources.list.d/*

  # Debian enables these on install; on Rocky they come from packages the product installs (chronyd.service is
  # the stand-in chrony RPM's) or are off in cloud images (firewalld): a test starts what it needs.
  chroot "$DEST" systemctl disable chrony.service firewalld.service >/dev/null 2>&1
}

# EL9 runs Ansible's modules, and everything else that says /usr/bin/python3, on Python 3.9. Here that is a real
# CPython 3.9: Debian bullseye's packages (the last Debian release with 3.9), which run on bookworm with bullseye's
# OpenSSL 1.1 and libffi 7. dnf's bindings (libdnf, rpm, ...) are bookworm's, built for its Python 3.11 only, so the
# node's own Python tools keep 3.11: their shebangs name /usr/libexec/platform-python (a link to python3.11), the
# first path Ansible's dnf module probes for the bindings when the module's interpreter lacks them (ansible-core
# modules/dnf.py), and it respawns there. On a real EL9 node /usr/bin/python3 has the bindings and no respawn is
# needed: the difference is in tests/lab/README.md.
# install_from_suite SUITE PACKAGE...: another Debian suite's packages (downloaded here through a private apt state,
# their signatures checked against Debian's keyring), installed into the rootfs with its dpkg.
install_from_suite() {
  local suite=$1 state debs
  shift
  state=$(mktemp -d)
  debs=$DEST/tmp/cblab-$suite-debs
  mkdir -p "$state/lists/partial" "$state/cache/archives/partial" "$debs"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR $suite main" > "$state/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$state/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o "Dir::State::Lists=$state/lists" -o "Dir::Cache=$state/cache" -o APT::Sandbox::User=root
              -o Debug::NoLocking=1 -o Acquire::Check-Valid-Until=false)
  apt-get -q "${opts[@]}" update >/dev/null
  (cd "$debs" && apt-get -q "${opts[@]}" download "$@" >/dev/null)
  rm -rf "$state"
  chroot "$DEST" sh -c "dpkg -i /tmp/cblab-$suite-debs/*.deb" >/dev/null
  rm -rf "$debs"
}

el9_python() {
  # shellcheck disable=SC2086
  install_from_suite bullseye $EL9_PYTHON_DEBS
  mkdir -p "$DEST/usr/libexec"
  ln -s /usr/bin/python3.11 "$DEST/usr/libexec/platform-python"
  # Every Debian script written for /usr/bin/python3 (dnf, firewalld, firewall-cmd, ...) keeps its Python.
  find "$DEST/usr/bin" "$DEST/usr/sbin" "$DEST/usr/lib" "$DEST/usr/libexec" "$DEST/usr/share" -type f -perm -u+x \
      -exec awk 'FNR == 1 && /^#! ?\/usr\/bin\/python3( |$)/ { print FILENAME } { nextfile }' {} + |
    while read -r script; do sed -i '1s|^#! \?/usr/bin/python3|#!/usr/libexec/platform-python|' "$script"; done
  ln -sfn python3.9 "$DEST/usr/bin/python3"
  chroot "$DEST" /usr/bin/python3 -c 'import sys, ssl, ctypes, sqlite3, json; assert sys.version_info[:2] == (3, 9)'
}

# Ubuntu-shaped flavours: what Ansible's facts and the product read (os-release, lsb-release, debian_version as
# Ubuntu writes it) and Ubuntu's apt layout, naming an archive the lab cannot reach, as on a machine whose
# archive is behind a firewall; Ubuntu's archive keyring (Debian's ubuntu-keyring package) where Ubuntu keeps it.
shape_ubuntu() {
  local version=$1 point=$2 codename=$3 name=$4
  # Debian packages Ubuntu's archive keys from trixie on.
  install_from_suite trixie ubuntu-keyring
  rm -f "$DEST/etc/os-release"
  cat > "$DEST/usr/lib/os-release" <<OSRELEASE
PRETTY_NAME="Ubuntu $point LTS"
NAME="Ubuntu"
VERSION_ID="$version"
VERSION="$point LTS ($name)"
VERSION_CODENAME=$codename
ID=ubuntu
ID_LIKE=debian
HOME_URL="https://www.ubuntu.com/"
SUPPORT_URL="https://help.ubuntu.com/"
BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"
PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"
UBUNTU_CODENAME=$codename
OSRELEASE
  ln -s ../usr/lib/os-release "$DEST/etc/os-release"
  printf 'DISTRIB_ID=Ubuntu\nDISTRIB_RELEASE=%s\nDISTRIB_CODENAME=%s\nDISTRIB_DESCRIPTION="Ubuntu %s LTS"\n' \
    "$version" "$codename" "$point" > "$DEST/etc/lsb-release"
  # Ubuntu's base-files writes the Debian release it branched from.
  case $codename in jammy) echo "bookworm/sid" ;; *) echo "trixie/sid" ;; esac > "$DEST/etc/debian_version"
  rm -f "$DEST"/etc/apt/trusted.gpg.d/debian-archive-*
  rm -f "$DEST/etc/apt/sources.list" "$DEST"/etc/apt/sources.list.d/*
  if [ "$codename" = jammy ]; then
    cp "$DEST/usr/share/keyrings/ubuntu-archive-keyring.gpg" "$DEST/etc/apt/trusted.gpg.d/ubuntu-keyring-2018-archive.gpg"
    {
      for suite in jammy jammy-updates jammy-backports; do
        echo "deb http://archive.ubuntu.com/ubuntu/ $suite main restricted universe multiverse"
      done
      echo "deb http://security.ubuntu.com/ubuntu/ jammy-security main restricted universe multiverse"
    } > "$DEST/etc/apt/sources.list"
  else
    echo "# Ubuntu sources have moved to /etc/apt/sources.list.d/ubuntu.sources" > "$DEST/etc/apt/sources.list"
    cat > "$DEST/etc/apt/sources.list.d/ubuntu.sources" <<SOURCES
Types: deb
URIs: http://archive.ubuntu.com/ubuntu/
Suites: $codename $codename-updates $codename-backports
Components: main restricted universe multiverse
Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg

Types: deb
URIs: http://security.ubuntu.com/ubuntu/
Suites: $codename-security
Components: main restricted universe multiverse
Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg
SOURCES
  fi
  # What bookworm's lists held is not Ubuntu's: apt starts with none, as on a fresh image before `apt-get update`.
  rm -rf "$DEST"/var/lib/apt/lists/*
  mkdir -p "$DEST/var/lib/apt/lists/partial"
}

case $FLAVOUR in
  rocky9) el9_python; shape_rhel 9 9.6 "Blue Onyx" ;;
  ubuntu2204) shape_ubuntu 22.04 22.04.5 jammy "Jammy Jellyfish" ;;
  ubuntu2404) shape_ubuntu 24.04 24.04.3 noble "Noble Numbat" ;;
  el8)
    shape_rhel 8 8.10 "Green Obsidian"
    # EL8's system tools run on platform-python, the one interpreter with the dnf bindings; the Python a current
    # ansible-core needs there (3.11 from AppStream) has none. Here: Debian's python3 (which has them) as
    # platform-python, and a venv without system site packages as the interpreter the lab's inventory names.
    mkdir -p "$DEST/usr/libexec"
    ln -s /usr/bin/python3 "$DEST/usr/libexec/platform-python"
    chroot "$DEST" python3 -m venv --without-pip /opt/python3.11
    ;;
esac

rm -f "$DEST"/var/cache/apt/archives/*.deb
