"""The settings' sections about the cluster's shape: Kubernetes (version, ranges, proxy), the kubelet, the
control plane's endpoint, etcd, certificates, upgrades, the firewall."""
from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from provision.inputs import versions
from provision.inputs.files import shown
from provision.inputs.settings_base import (
    NARROWEST_SERVICE_PREFIX,
    WIDEST_POD_PREFIX,
    WIDEST_SERVICE_PREFIX,
    _cidr_problem,
    _Section,
    kube_minor_problem,
)
from provision.inputs.values import (
    IPV4_NETWORK,
    IPV4_UNICAST,
    KUBERNETES_VERSION,
    LOCAL_PATH,
    DnsSubdomain,
    ImageReference,
    InterfaceName,
    S3Region,
    S3Url,
    SystemdCalendar,
    Url,
)


class KubernetesSettings(_Section):
    # A minor newer than the versions table knows is refused unless this says to try it anyway (declared before
    # version, whose check reads it).
    allow_untested_versions: bool = False
    # A minor ("1.36") installs that minor's newest patch; a full version ("1.36.4") pins it.
    version: str = versions.KUBERNETES_DEFAULT
    # Not the seed tutorials' 192.168.0.0/16: that collides with the usual 192.168.x node networks.
    pod_cidr: str = "10.244.0.0/16"
    service_cidr: str = "10.96.0.0/12"
    dns_domain: DnsSubdomain = "cluster.local"
    cni: Literal["calico"] = "calico"
    # ipvs needs kernel modules that many hosts (and every lab node here) lack; iptables works everywhere.
    kube_proxy_mode: Literal["iptables", "ipvs", "nftables"] = "iptables"

    @field_validator("version", mode="before")
    @classmethod
    def _version_format(cls, value: object, info: ValidationInfo) -> str:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            # YAML reads 1.30 as the number 1.3: a silent wrong version, so numbers are refused, and the fix quotes
            # what was written (a trailing zero YAML dropped is put back: 1.3 was 1.30).
            dropped = isinstance(value, float) and len(repr(value).split(".")[1]) == 1
            written = f"{value:.2f}" if dropped else repr(value)
            raise ValueError(f"{value!r} is a number to YAML{f' ({written} reads as {value!r})' if dropped else ''}, "
                             f"not a version: quote it, version: '{written}'")
        if not isinstance(value, str):
            raise ValueError(f"{shown(value)} is not a version: write it as '1.31' or '1.31.4'")
        KUBERNETES_VERSION.parse(value)
        minor = int(value.lstrip("v").split(".")[1])
        problem = kube_minor_problem(minor, allow_untested=info.data.get("allow_untested_versions") is True)
        if problem:
            raise ValueError(f"Kubernetes {value} is {problem}")
        return value.lstrip("v")

    @field_validator("pod_cidr", "service_cidr")
    @classmethod
    def _cidr_format(cls, value: str) -> str:
        if "/" not in value:
            raise ValueError(f"{shown(value)} has no prefix length: write the range as 10.244.0.0/16")
        if ":" in value and value.isascii() and value.isprintable():
            raise ValueError(f"{shown(value)} is IPv6; only IPv4 clusters are supported for now")
        if not IPV4_NETWORK.pattern.fullmatch(value):
            raise ValueError(f"{shown(value)} is not a valid CIDR (four numbers, '/', a prefix length); write it as "
                             "10.244.0.0/16")
        try:
            network = ipaddress.ip_network(value, strict=True)
        except ValueError as exc:
            raise ValueError(f"{shown(value)} is not a valid CIDR ({exc}); write it as 10.244.0.0/16") from None
        if not isinstance(network, ipaddress.IPv4Network):
            raise ValueError(f"{shown(value)} is IPv6; only IPv4 clusters are supported for now")
        problem = _cidr_problem(network)
        if problem:
            raise ValueError(f"{network} {problem}")
        return str(network)

    @field_validator("pod_cidr")
    @classmethod
    def _pod_cidr_size(cls, value: str) -> str:
        if ipaddress.ip_network(value).prefixlen < WIDEST_POD_PREFIX:
            raise ValueError(f"{value} is wider than /{WIDEST_POD_PREFIX}, more than kube-controller-manager can "
                             "divide into per-node /24s: use a /16 such as 10.244.0.0/16")
        return value

    @field_validator("service_cidr")
    @classmethod
    def _service_cidr_size(cls, value: str) -> str:
        prefix = ipaddress.ip_network(value).prefixlen
        if prefix < WIDEST_SERVICE_PREFIX:
            raise ValueError(f"{value} is wider than /{WIDEST_SERVICE_PREFIX}, which kubeadm refuses: use e.g. "
                             "10.96.0.0/12")
        if prefix > NARROWEST_SERVICE_PREFIX:
            raise ValueError(f"{value} is narrower than /{NARROWEST_SERVICE_PREFIX}: the cluster DNS service takes "
                             "its 10th address; use e.g. 10.96.0.0/12")
        return value

    @model_validator(mode="after")
    def _cidrs_disjoint(self) -> KubernetesSettings:
        if ipaddress.ip_network(self.pod_cidr).overlaps(ipaddress.ip_network(self.service_cidr)):
            raise ValueError(f"pod_cidr {self.pod_cidr} overlaps service_cidr {self.service_cidr}: "
                             "choose disjoint ranges, e.g. pod_cidr 10.244.0.0/16 and service_cidr 10.96.0.0/12")
        return self

    @property
    def minor(self) -> str:
        """'1.31' for both '1.31' and '1.31.4'."""
        return ".".join(self.version.split(".")[:2])

    @property
    def patch(self) -> str | None:
        """The release the version pins ('1.31.4'), or None for a bare minor ('1.31': the newest patch the package
        repository has). Decided here once: the package specs, kubeadm's kubernetesVersion and the API server's
        check read it."""
        return self.version if self.version.count(".") == 2 else None

    def is_running(self, version: str) -> bool:
        """Whether a component reporting `version` ('v1.31.4', 'v1.31.4+k3s1') runs what this setting asks for:
        the pinned release, or any patch of the minor."""
        running = version.lstrip("v").split("+")[0]
        return running == self.patch if self.patch else running.startswith(self.minor + ".")

    @property
    def minor_number(self) -> int:
        return int(self.version.split(".")[1])


class KubeletSettings(_Section):
    # From Kubernetes 1.35 the kubelet refuses cgroup v1 hosts (KEP-5573). true sets failCgroupV1: false and
    # skips kubeadm's SystemVerification check, so such hosts still run: unsupported, warned about on every run.
    allow_cgroup_v1: bool = False
    # The other way out: prepare boots cgroup v1 nodes with systemd.unified_cgroup_hierarchy=1 (a reboot).
    switch_to_cgroup_v2: bool = False

    @model_validator(mode="after")
    def _one_way_out(self) -> KubeletSettings:
        if self.allow_cgroup_v1 and self.switch_to_cgroup_v2:
            raise ValueError("allow_cgroup_v1 and switch_to_cgroup_v2 are both true: they are two ways out of cgroup "
                             "v1, keep one (switch_to_cgroup_v2 reboots the nodes into cgroup v2, the supported way)")
        return self


class ControlPlaneSettings(_Section):
    # Where the nodes and this machine reach the API servers. vip: a virtual IP address kube-vip (a static pod on
    # every control plane) moves to a healthy one; proxy: a local proxy on every node in front of all API servers;
    # none: the (only) control plane's own address. auto: vip when `vip` is set, else proxy with several control
    # planes, else none.
    endpoint: Literal["auto", "vip", "proxy", "none"] = "auto"
    # The virtual IP: a free address in the control planes' own subnet (checked by preflight), held by one of
    # them at a time (ARP).
    vip: str | None = None
    # The interface kube-vip announces the VIP on; left out, each control plane's route to the VIP decides.
    interface: InterfaceName | None = None
    kube_vip_image: ImageReference = versions.KUBE_VIP_IMAGE
    proxy_image: ImageReference = versions.API_PROXY_IMAGE

    @field_validator("vip")
    @classmethod
    def _vip(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if IPV4_UNICAST.problem(value):
            raise ValueError(f"{shown(value)} is not an IPv4 address of a machine: write a free address of the "
                             "control planes' subnet, e.g. 192.168.10.100")
        address = ipaddress.IPv4Address(value)
        if address.is_unspecified or address.is_loopback or address.is_multicast or address.is_reserved \
                or address.is_link_local:
            raise ValueError(f"{value} cannot be a virtual IP (unspecified, loopback, link-local, multicast or "
                             "reserved): pick a free address of the control planes' subnet")
        return str(address)

    @model_validator(mode="after")
    def _vip_goes_with_its_mode(self) -> ControlPlaneSettings:
        if self.endpoint == "vip" and self.vip is None:
            raise ValueError("endpoint vip needs control_plane.vip: a free address of the control planes' subnet")
        if self.vip is not None and self.endpoint in ("proxy", "none"):
            raise ValueError(f"vip {self.vip} is only used with endpoint vip (it is {self.endpoint}): set endpoint "
                             "vip (or auto), or leave vip out")
        if self.interface is not None and self.vip is None:
            raise ValueError("interface names where kube-vip announces control_plane.vip, which is not set: set vip, "
                             "or leave interface out")
        return self


class EtcdSettings(_Section):
    # How many snapshots are kept: on this machine (`bootstrap etcd snapshot`) and on each control plane (the timer).
    snapshot_keep: int = Field(default=5, ge=1, le=1000)
    # Opt in: a systemd timer on each control plane takes a snapshot on `snapshot_schedule`, keeping the last N there.
    snapshot_timer: bool = False
    # When the timer fires: systemd's OnCalendar (hourly, daily, or an expression such as '*-*-* 00/6:00:00').
    snapshot_schedule: SystemdCalendar = "hourly"
    # Also send each `bootstrap etcd snapshot` to an S3-compatible store (s3://BUCKET/PREFIX), with the control
    # planes' /etc/kubernetes/pki sealed with the operator's key (pki_key_file): losing every control plane is then
    # recoverable (`bootstrap etcd restore --from s3://...`). Credentials: the AWS environment or profile.
    snapshot_target: S3Url | None = None
    # The store's endpoint: an S3-compatible server (MinIO, Ceph RGW, OSS, ...); unset: AWS's own.
    s3_endpoint: Url | None = None
    s3_region: S3Region = "us-east-1"
    # A file on this machine whose first line is the passphrase the certificates are sealed with (mode 0600).
    pki_key_file: str | None = None

    @field_validator("pki_key_file")
    @classmethod
    def _key_file(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or LOCAL_PATH.problem(value)):
            raise ValueError(f"{shown(value)} is not a file name: name the file that holds your passphrase")
        return value

    @model_validator(mode="after")
    def _target_needs_a_key(self) -> EtcdSettings:
        if self.snapshot_target is not None and self.pki_key_file is None:
            raise ValueError("snapshot_target sends /etc/kubernetes/pki off the nodes with each snapshot, sealed with "
                             "your key: set pki_key_file too (a file whose first line is your passphrase, mode 0600)")
        return self


class CertificatesSettings(_Section):
    # A systemd timer on every control plane renews kubeadm's certificates (and restarts the control-plane static
    # pods) once one of them expires within renew_before_days. Off: `bootstrap certs renew` does it when asked.
    renew_timer: bool = False
    # The renewal timer's threshold; `bootstrap certs check` warns about certificates below it too.
    renew_before_days: int = Field(default=30, ge=1, le=300)


class UpgradeSettings(_Section):
    # How long `bootstrap upgrade` waits for a node's pods to be evicted (a PodDisruptionBudget may hold one back)
    # before it stops, naming the pod that blocks; the node stays cordoned and a re-run goes on from it.
    drain_timeout_s: int = Field(default=300, ge=10, le=86400)


class FirewallSettings(_Section):
    # open-ports: open the kubeadm and Calico ports in firewalld/ufw; disable: stop the firewall; leave: touch nothing.
    mode: Literal["open-ports", "disable", "leave"] = "open-ports"
