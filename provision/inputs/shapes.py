"""The shapes of the values a user writes (see values.py for the vocabulary's table): each a whole-string ASCII
pattern, a rule in words, an example, and the checks a pattern cannot say.

No pydantic here: the command line's parsers (cli/option_table.py) import this module alone, and start quickly.
`values.py` adds the pydantic types the settings models use and re-exports every name of this module.
"""
from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import NewType

from provision.inputs.files import shown

# The inventory's name for a host (Ansible's inventory_hostname: run limits, the groups file) and the Kubernetes
# node name (kubeadm's --node-name, the machine's hostname, the API's Node). They differ where the inventory names
# the node in k8s_nodename; keys of one must never be looked up with the other.
HostName = NewType("HostName", str)
NodeName = NewType("NodeName", str)


@dataclass(frozen=True)
class Shape:
    """One kind of value: its name (with its article), the whole-string pattern, the rule in words, an example,
    and checks the pattern cannot say (a port's range, a tag that is not latest)."""

    what: str
    pattern: re.Pattern[str]
    rule: str
    example: str
    max_length: int = 253
    # Each returns the problem (completing "<value> ...") or None.
    checks: tuple[Callable[[str], str | None], ...] = field(default=(), compare=False)
    # Where the pattern fails, a closer look may name the part that is wrong (the character a URL may not have, a
    # URL scheme where a registry was asked for); None keeps the shape's own message.
    diagnose: Callable[[str], str | None] | None = field(default=None, compare=False)

    @property
    def message_rule(self) -> str:
        return f"{self.what} ({self.rule}): write it as {self.example}"

    def named(self, what: str, example: str | None = None) -> Shape:
        """The same shape under the name a field gives it ("a Calico release tag")."""
        return replace(self, what=what, example=example or self.example)

    def problem(self, value: object) -> str | None:
        """Why `value` is not of this shape, as one line naming the rule, or None."""
        if not isinstance(value, str):
            return f"{shown(value)} is not {self.message_rule}"
        if len(value) > self.max_length:
            return f"{shown(value)} is not {self.message_rule} (it is longer than {self.max_length} characters)"
        if not self.pattern.fullmatch(value):
            closer = self.diagnose(value) if self.diagnose else None
            return f"{shown(_hidden_password(value))} {closer}" if closer else \
                f"{shown(_hidden_password(value))} is not {self.message_rule}"
        for check in self.checks:
            problem = check(value)
            if problem:
                return f"{shown(value)} {problem}"
        return None

    def parse(self, value: object) -> str:
        """`value` itself when it has this shape; else ValueError with the one message."""
        problem = self.problem(value)
        if problem:
            raise ValueError(problem)
        assert isinstance(value, str)
        return value


def _hidden_password(value: str) -> str:
    """A URL's password (scheme://user:password@host) out of the value a refusal shows: secrets never reach output."""
    return re.sub(r"(://[^/?#@:]*:)[^/?#@]*@", r"\1(hidden)@", value)


def _shape(what: str, pattern: str, rule: str, example: str, *checks: Callable[[str], str | None],
           max_length: int = 253, diagnose: Callable[[str], str | None] | None = None) -> Shape:
    return Shape(what, re.compile(pattern, re.ASCII), rule, example, max_length, checks, diagnose)


# --- building blocks (regular expression text, all ASCII) ---------------------------------------------------------

_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_ANY_CASE_LABEL = r"[A-Za-z0-9](?:[-A-Za-z0-9]{0,61}[A-Za-z0-9])?"
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
# A DNS name: labels of letters, digits and '-', the last one not all digits (else it is a mistyped address).
_DNS_NAME = rf"(?:{_ANY_CASE_LABEL}\.)*(?=[A-Za-z0-9-]*[A-Za-z-])(?:{_ANY_CASE_LABEL})"
_HOST = rf"(?:{_IPV4}|{_DNS_NAME})"
_PORT = r"[0-9]{1,5}"
# What a URL's path, query and fragment may hold: RFC 3986's characters less quotes, parentheses, '*', ',', ';',
# '!', '$' and braces (none needed by a repository; each means something to a shell, a configuration file or a
# template), with '%' only as an escape.
_URL_TAIL = r"(?:[A-Za-z0-9\-._~:/?#\[\]@&+=]|%[0-9A-Fa-f]{2})*"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NODE_PATH = r"(?:/(?!\.{1,2}(?:/|\Z))[A-Za-z0-9._+@-]+)+"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"sha256:[0-9a-f]{64}"
_NUMBER = r"(?:0|[1-9][0-9]{0,3})"


def _port_problem(authority: str) -> str | None:
    _host, colon, port = authority.rpartition(":")
    if colon and port.isdigit() and not 0 < int(port) < 65536:
        return f"has port {port}: a port is 1 to 65535"
    return None


def _port_in_range(value: str) -> str | None:
    """A URL or host[:port][/path] whose port is past 65535 (or 0)."""
    return _port_problem(value.split("://", 1)[-1].split("/", 1)[0])


def _registry_port_in_range(value: str) -> str | None:
    """An image whose registry (the first component, where a '/' follows it) has a port past 65535."""
    return _port_problem(value.split("/", 1)[0]) if "/" in value else None


# --- URLs ------------------------------------------------------------------------------------------------------

_URL_CHARACTER = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@&+=%]", re.ASCII)


def _url_diagnosis(value: str, schemes: tuple[str, ...] = ("http", "https")) -> str | None:
    """The character a URL may not have, or the scheme or host it lacks."""
    bad = next((c for c in value if not _URL_CHARACTER.fullmatch(c)), None)
    if bad is not None:
        return f"has a character a URL may not have ({shown(bad)})"
    scheme, _, rest = value.partition("://")
    authority = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    host = authority.rsplit("@", 1)[-1]
    if "@" in authority:
        # It would be written into the nodes' package and registry configuration, and shown by `config show`.
        return ("has a user name or password in it: bootstrap writes URLs into the nodes' configuration and its "
                "own output, so use a mirror that needs no login")
    if scheme.lower() not in schemes:
        return f"is not a {' or '.join(f'{s}://' for s in schemes)} URL with a host"
    if not host or host.startswith(":"):
        return f"is not a {' or '.join(f'{s}://' for s in schemes)} URL with a host"
    return None


def _file_url_diagnosis(value: str) -> str | None:
    return "is not an absolute path on the nodes: write e.g. file:///srv/offline"


def _repository_url_diagnosis(value: str) -> str | None:
    if value.startswith("file://"):
        return _file_url_diagnosis(value)
    return _url_diagnosis(value)


URL = _shape("an http(s):// URL", rf"(?i:https?)://{_HOST}(?::{_PORT})?(?:/{_URL_TAIL})?",
             "a host, an optional port and path; no spaces, quotes or braces", "https://mirror.example.com/path",
             _port_in_range, max_length=2048, diagnose=_url_diagnosis)
FILE_URL = _shape("a file:// URL", rf"file://{_NODE_PATH}/?",
                  "file:// and an absolute path on the nodes, without '.', '..' or '//'", "file:///srv/offline",
                  max_length=1024, diagnose=_file_url_diagnosis)
REPOSITORY_URL = _shape("a repository URL", rf"(?:(?i:https?)://{_HOST}(?::{_PORT})?(?:/{_URL_TAIL})?|"
                        rf"file://{_NODE_PATH}/?)",
                        "http(s):// with a host, or file:// and an absolute path on the nodes",
                        "https://mirror.example.com/path or file:///srv/offline", _port_in_range, max_length=2048,
                        diagnose=_repository_url_diagnosis)


# --- object stores ---------------------------------------------------------------------------------------------


def _no_dot_segment(value: str) -> str | None:
    segments = value.split("/")[3:]
    if any(segment in (".", "..") for segment in segments):
        return "has a '.' or '..' segment: name the path itself"
    return None


S3_URL = _shape("an s3:// URL", r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](?:/(?:[A-Za-z0-9._-]+/)*[A-Za-z0-9._-]*)?",
                "s3:// and a bucket of 3 to 63 lowercase letters, digits, dots and hyphens, then path segments of "
                "letters, digits, '.', '_' and '-'", "s3://etcd-backups/prod", _no_dot_segment, max_length=1024)


def parse_s3_url(value: str) -> str:
    return S3_URL.parse(value)


S3_REGION = _shape("an S3 region", r"[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?", "lowercase letters, digits and hyphens",
                   "us-east-1", max_length=32)


# --- registries and images -------------------------------------------------------------------------------------

REGISTRY_HOST = _shape("a registry host", rf"{_HOST}(?::{_PORT})?", "a DNS name or IPv4 address, an optional port",
                       "registry.example.com:5000", _port_in_range)


def _scheme_diagnosis(value: str) -> str | None:
    if "://" in value:
        return "has a URL scheme: write the registry and path only, e.g. registry.example.com/team"
    return None


REGISTRY = _shape("a registry", rf"{_HOST}(?::{_PORT})?(?:/{_PATH_COMPONENT})*",
                  "host[:port][/path] without a URL scheme, the path in lower case",
                  "registry.example.com/google_containers", _port_in_range, max_length=255,
                  diagnose=_scheme_diagnosis)
_IMAGE_NAME = rf"(?:{_HOST}(?::{_PORT})?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"


def _fixed_tag(value: str) -> str | None:
    name, _, digest = value.partition("@")
    tail = name.rsplit("/", 1)[-1]
    tag = tail.partition(":")[2] if ":" in tail else None
    if not digest and tag in (None, "latest"):
        return "has no fixed tag: name a release (e.g. :1.36), not latest, so every node runs the same"
    return None


def _image_name_diagnosis(value: str) -> str | None:
    if re.fullmatch(rf"{_IMAGE_NAME}(?::{_TAG})?(?:@{_DIGEST})?", value, re.ASCII):
        return "carries a tag: give the image without it"
    return _scheme_diagnosis(value)


IMAGE_NAME = _shape("an image name", _IMAGE_NAME, "[registry/]path in lower case, without a tag or digest",
                    "nvcr.io/nvidia/k8s-device-plugin", _registry_port_in_range, max_length=255,
                    diagnose=_image_name_diagnosis)
IMAGE_REFERENCE = _shape("an image reference", rf"{_IMAGE_NAME}(?::{_TAG})?(?:@{_DIGEST})?",
                         "[registry/]path:tag or @sha256:digest, the path in lower case",
                         "docker.io/library/busybox:1.36", _registry_port_in_range, _fixed_tag, max_length=255,
                         diagnose=_scheme_diagnosis)


# --- names -----------------------------------------------------------------------------------------------------

DNS_LABEL = _shape("a DNS label", _LABEL, "lower-case letters, digits and '-', at most 63, starting and ending "
                   "with a letter or digit", "cluster-bootstrap", max_length=63)
DNS_SUBDOMAIN = _shape("a DNS domain", rf"{_LABEL}(?:\.{_LABEL})*",
                       "DNS labels (lower-case letters, digits, '-') joined by '.'", "cluster.local")
_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
QUALIFIED_NAME = _shape("a Kubernetes qualified name", rf"(?:{_LABEL}(?:\.{_LABEL})*/)?{_NAME}",
                        "[DNS subdomain/]name of letters, digits, '-', '_', '.'", "nvidia.com/gpu")


def _not_kubernetes_domain(value: str) -> str | None:
    prefix = value.split("/", 1)[0]
    if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io") or value.startswith("requests."):
        return "is in the kubernetes.io domain, which Kubernetes keeps for its own resources: use your vendor's"
    return None


EXTENDED_RESOURCE = _shape("an extended resource name", rf"{_LABEL}(?:\.{_LABEL})*/{_NAME}",
                           "vendor-domain/name, outside kubernetes.io", "vendor.example/device",
                           _not_kubernetes_domain)
ENV_NAME = _shape("an environment variable name", r"[A-Za-z_][A-Za-z0-9_]*", "letters, digits and '_', not "
                  "starting with a digit", "NCCL_DEBUG", max_length=256)
# One line of text: no control characters (C0, DEL, C1), no line or paragraph separators, no surrogates.
TEXT = _shape("one line of text", r"[^\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]*",
              "printable characters, no newlines or control characters", "INFO", max_length=4096)
INTERFACE_NAME = _shape("a network interface name", r"(?!\.{1,2}\Z)[A-Za-z0-9_.:@-]{1,15}",
                        "at most 15 letters, digits, '_', '.', ':', '@', '-'", "eth0", max_length=15)
USER_NAME = _shape("a user name", r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}", "letters, digits, '_', '.', '-', '@'",
                   "ubuntu", max_length=64)
MD5 = _shape("an md5", r"[0-9a-fA-F]{32}", "32 hex digits", "c58f30108f718f92721af3b95e74349a",
             max_length=32)
FINGERPRINT = _shape("an OpenPGP fingerprint", r"(?:[0-9A-Fa-f]{40}|[0-9A-Fa-f]{64})",
                     "40 (v4 key) or 64 (v6 key) hexadecimal digits, no spaces",
                     "5A1E0D3B6C2F4E8A9B7C1D0E2F3A4B5C6D7E8F90", max_length=64)
PLATFORM_KEY = _shape("a platform", r"[a-z][a-z0-9]*-[a-z0-9]+(?:\.[0-9]+)?",
                      "os-release ID and release joined by '-', lower case", "debian-12", max_length=40)
GPU_MODEL = _shape("a GPU model name", r"[A-Za-z0-9](?:[A-Za-z0-9 ._-]{0,62}[A-Za-z0-9])?",
                   "letters, digits, ' ', '.', '_', '-', as in the device name", "H100", max_length=64)
# systemd's OnCalendar: a shorthand, or an expression of digits, '*' and the separators, in at most three parts
# (`systemd-analyze calendar` judges the rest on the node); nothing that could end the unit file's line.
SYSTEMD_CALENDAR = _shape(
    "a systemd calendar",
    r"minutely|hourly|daily|weekly|monthly|quarterly|semiannually|yearly"
    r"|(?=.*[0-9*])[0-9*:/,.~-]+(?: [0-9*:/,.~-]+){0,2}",
    "hourly, daily, weekly, ..., or an OnCalendar expression of digits, '*', '-', ':', '/', ',', '.', '~'",
    "'*-*-* 00/6:00:00'", max_length=64)


# --- versions --------------------------------------------------------------------------------------------------

KUBERNETES_VERSION = _shape("a Kubernetes version", rf"v?1\.(?:0|[1-9][0-9]{{0,2}})(?:\.{_NUMBER})?",
                            "1.<minor> or 1.<minor>.<patch>", "1.36 or 1.36.4", max_length=16)
RELEASE_TAG = _shape("a release tag", rf"v{_NUMBER}\.{_NUMBER}\.{_NUMBER}", "v<major>.<minor>.<patch>", "v1.2.3",
                     max_length=16)
VERSION = _shape("a release version", rf"{_NUMBER}\.{_NUMBER}\.{_NUMBER}", "<major>.<minor>.<patch>", "1.19.1",
                 max_length=16)
DRIVER_BRANCH = _shape("an NVIDIA driver branch", r"[1-9][0-9]{2,3}", "its number, 3 or 4 digits", "'580'",
                       max_length=4)


# --- paths on the nodes ----------------------------------------------------------------------------------------

NODE_PATH = _shape("an absolute path on the nodes", _NODE_PATH,
                   "'/' and components of letters, digits, '.', '_', '-', '+', '@'; no '.', '..', '//' or trailing '/'",
                   "/var/lib/cluster-bootstrap/cache", max_length=1024)
# Nothing may be removed inside these (the operating system's own trees, and Kubernetes' data, which reset removes
# by its own fixed paths).
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/root", "/run",
                "/sbin", "/sys", "/usr", "/home", "/snap", "/var/run", "/var/lock", "/var/lib/kubelet",
                "/var/lib/etcd", "/var/lib/containerd", "/var/lib/docker", "/var/lib/cni", "/var/lib/calico",
                "/var/lib/dpkg", "/var/lib/rpm", "/var/lib/apt", "/var/lib/dnf", "/var/lib/systemd",
                "/var/log", "/var/spool", "/var/cache/apt", "/var/cache/dnf")
# These may hold a directory of the tool's own, but are not one themselves (nor is any parent of a system tree).
SYSTEM_DIRECTORIES = ("/", "/var", "/var/lib", "/var/cache", "/var/tmp", "/var/opt", "/opt", "/srv", "/tmp",
                      "/mnt", "/media", "/data", "/usr/local")


def _deletable(value: str) -> str | None:
    inside = next((tree for tree in SYSTEM_TREES if value == tree or value.startswith(f"{tree}/")), None)
    if inside:
        return f"is inside the system directory {inside}: use a directory of its own, e.g. " \
               "/var/lib/cluster-bootstrap/cache"
    holds = next((tree for tree in (*SYSTEM_TREES, *SYSTEM_DIRECTORIES) if tree.startswith(f"{value}/")
                  or value == tree), None)
    if holds:
        return f"is (or holds) the system directory {holds}: use a directory of its own, e.g. " \
               "/var/lib/cluster-bootstrap/cache"
    if value.count("/") < 2:
        return "is one level below the root: name a directory of its own, e.g. /var/lib/cluster-bootstrap/cache"
    return None


DELETABLE_PATH = _shape("a path the tool may remove", _NODE_PATH,
                        "an absolute, normalised path on the nodes, at least two components deep, outside the "
                        "system's directories", "/var/lib/cluster-bootstrap/cache", _deletable, max_length=1024)


# --- addresses and numbers -------------------------------------------------------------------------------------

_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")
_BROADCAST = ipaddress.IPv4Address("255.255.255.255")


def _machine_address(value: str) -> str | None:
    address = ipaddress.IPv4Address(value)
    if address in _THIS_NETWORK:
        return "is in 0.0.0.0/8 ('this network'): no machine has it"
    if address.is_multicast:
        return "is a multicast address: no machine has it"
    if address.is_reserved or address == _BROADCAST:
        return "is reserved (240.0.0.0/4) or the broadcast address: no machine has it"
    return None


IPV4_UNICAST = _shape("an IPv4 address", _IPV4, "four numbers 0-255 without leading zeros, of a machine",
                      "10.0.0.5", _machine_address, max_length=15)


def _network(value: str) -> str | None:
    try:
        ipaddress.IPv4Network(value, strict=True)
    except ValueError:
        return "has host bits set: write the range's first address, e.g. 10.244.0.0/16"
    return None


IPV4_NETWORK = _shape("an IPv4 range", rf"{_IPV4}/(?:3[0-2]|[12]?[0-9])", "address/prefix length",
                      "10.244.0.0/16", _network, max_length=18)


def _host_address(value: str) -> str | None:
    if re.fullmatch(_IPV4, value, re.ASCII):
        return _machine_address(value)
    return None


HOST_ADDRESS = _shape("a node address", rf"(?:{_IPV4}|{_DNS_NAME}\.?)",
                      "an IPv4 address or a DNS name (letters, digits, '-' between dots)",
                      "10.0.0.5 or node1.example.com", _host_address)


def _quantity_above_zero(value: str) -> str | None:
    if not re.search(r"[1-9]", value.rstrip("KMGTPEikm"), re.ASCII):
        return "is zero: give an amount above zero"
    return None


QUANTITY = _shape("a Kubernetes quantity", r"(?:0|[1-9][0-9]{0,17})(?:\.[0-9]{1,9})?(?:[KMGTPE]i|[mkMGTPE])?",
                  "a number and an optional suffix (Ki, Mi, Gi, Ti, m, k, M, G, T)", "2Gi", _quantity_above_zero,
                  max_length=32)
COUNT = _shape("a whole number", r"[1-9][0-9]{0,5}", "1 to 999999, without a fraction or suffix", "1", max_length=6)


def _port_digits(value: str) -> str | None:
    return None if 0 < int(value) < 65536 else "is out of range: a port is 1 to 65535"


PORT_SHAPE = _shape("a TCP port", r"[0-9]{1,5}", "a number from 1 to 65535", "22", _port_digits, max_length=5)


def parse_port(value: object) -> int:
    """A port from a number or its digits (an INI inventory gives text); ValueError naming the rule."""
    if isinstance(value, bool):
        raise ValueError(f"{shown(value)} is not {PORT_SHAPE.message_rule}")
    if isinstance(value, int):
        value = str(value) if value >= 0 else f"-{-value}"
    return int(PORT_SHAPE.parse(value))


def parse_positive_float(value: object) -> float:
    """A finite number above zero, from a number or its decimal text."""
    try:
        number = float(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) else math.nan
    except ValueError:
        number = math.nan
    if isinstance(value, str) and not re.fullmatch(r"[0-9]{1,12}(?:\.[0-9]{1,9})?", value, re.ASCII):
        number = math.nan
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"{shown(value)} is not a finite number above zero, e.g. 10")
    return number


# --- whole numbers (command-line counts, sizes, seconds) ---------------------------------------------------------

@dataclass(frozen=True)
class WholeNumber:
    """A whole number from `low` to `high`, written in ASCII digits and nothing else: no sign, spaces, '_', fraction,
    exponent or leading zero (Python's int() takes '+2', ' 2', '2_0' and full-width digits; the docs promise none of
    them). `unit` names what it counts, for the message."""

    low: int
    high: int
    unit: str = ""

    @property
    def rule(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        return f"a whole number from {self.low} to {self.high}{unit}, in digits (e.g. {max(self.low, 1)})"

    def problem(self, value: object) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            return f"{shown(value)} is not {self.rule}"
        text = str(value) if isinstance(value, int) else value
        if len(text) > len(str(self.high)) or not re.fullmatch(r"0|[1-9][0-9]*", text, re.ASCII):
            return f"{shown(text)} is not {self.rule}"
        if not self.low <= int(text) <= self.high:
            return f"{shown(text)} is out of range: {self.rule}"
        return None

    def __call__(self, value: object) -> int:
        """The number; ValueError with the one message (a command-line parser)."""
        problem = self.problem(value)
        if problem:
            raise ValueError(problem)
        return int(str(value))


def whole_number(low: int, high: int, unit: str = "") -> WholeNumber:
    return WholeNumber(low, high, unit)


# --- the parse functions (command-line options) ----------------------------------------------------------------

parse_url = URL.parse
parse_repository_url = REPOSITORY_URL.parse
parse_file_url = FILE_URL.parse
parse_registry_host = REGISTRY_HOST.parse
parse_registry = REGISTRY.parse
parse_image_name = IMAGE_NAME.parse
parse_image_reference = IMAGE_REFERENCE.parse
parse_dns_label = DNS_LABEL.parse
parse_dns_subdomain = DNS_SUBDOMAIN.parse
parse_qualified_name = QUALIFIED_NAME.parse
parse_extended_resource = EXTENDED_RESOURCE.parse
parse_env_name = ENV_NAME.parse
parse_text = TEXT.parse
parse_kubernetes_version = KUBERNETES_VERSION.parse
parse_release_tag = RELEASE_TAG.parse
parse_version = VERSION.parse
parse_driver_branch = DRIVER_BRANCH.parse
parse_node_path = NODE_PATH.parse
parse_deletable_path = DELETABLE_PATH.parse
parse_ipv4_unicast = IPV4_UNICAST.parse
parse_ipv4_network = IPV4_NETWORK.parse
parse_host_address = HOST_ADDRESS.parse
parse_quantity = QUANTITY.parse
parse_count = COUNT.parse
parse_interface_name = INTERFACE_NAME.parse
parse_user_name = USER_NAME.parse
parse_gpu_model = GPU_MODEL.parse
parse_platform_key = PLATFORM_KEY.parse
parse_systemd_calendar = SYSTEMD_CALENDAR.parse


def parse_md5(value: object) -> str:
    return MD5.parse(value).lower()


def parse_fingerprint(value: object) -> str:
    return FINGERPRINT.parse(value).upper()
