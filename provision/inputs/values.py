"""The value types of every input: one vocabulary, each shape written once.

A value a user writes (a settings field, an inventory variable the tool reads, a command-line option that stands
for a setting) is parsed into one of these types at the edge and is data from then on. Each shape matches the
whole string in ASCII (`re.fullmatch` with `re.ASCII`: no `$` that matches before a final newline, no `\\d` or
`\\w` that match a full-width or Arabic-Indic digit) and has one message naming its rule, with an example. A
shape is three things with the same name stem:

- `URL` (a `Shape`): `.parse(value) -> str` raises ValueError with the message; `.problem(value)` returns it;
- `Url` (a pydantic type, `Annotated[str, ...]`): for settings models;
- `parse_url` (a plain function): for command-line options (`typer.Option(parser=parse_url)`), where the
  ValueError becomes Click's one-line usage error.

The names below are stable; other modules import them. The shapes themselves live in shapes.py (no pydantic: the
command line's parsers import it alone), paths on this machine in local_paths.py; this module re-exports both and
adds the pydantic types.

| shape | pydantic type | parse function | what it is |
|---|---|---|---|
| URL | Url | parse_url | an http(s):// URL with a host (and a port up to 65535), no quotes, spaces or braces |
| REPOSITORY_URL | RepositoryUrl | parse_repository_url | an http(s):// URL, or file:// and an absolute node path |
| FILE_URL | FileUrl | parse_file_url | file:// and an absolute, normalised node path |
| REGISTRY_HOST | RegistryHost | parse_registry_host | a registry's host[:port] (docker.io, registry.local:5000) |
| REGISTRY | Registry | parse_registry | host[:port][/path]: where images are pulled from (kubeadm's imageRepository) |
| IMAGE_NAME | ImageName | parse_image_name | an image without tag or digest ([registry/]path) |
| IMAGE_REFERENCE | ImageReference | parse_image_reference | an image with a fixed tag (not latest) or a digest |
| DNS_LABEL | DnsLabel | parse_dns_label | RFC 1123 label: lower-case letters, digits, '-', at most 63 |
| DNS_SUBDOMAIN | DnsSubdomain | parse_dns_subdomain | RFC 1123 subdomain: DNS labels joined by '.', at most 253 |
| QUALIFIED_NAME | QualifiedName | parse_qualified_name | a Kubernetes qualified name ([prefix/]name) |
| EXTENDED_RESOURCE | ExtendedResource | parse_extended_resource | domain/name outside kubernetes.io (rdma/hca) |
| ENV_NAME | EnvName | parse_env_name | an environment variable name (letters, digits, '_') |
| TEXT | Text | parse_text | one line of printable text (an environment variable's value) |
| KUBERNETES_VERSION | KubernetesVersion | parse_kubernetes_version | 1.36 or 1.36.4 (a leading v allowed) |
| RELEASE_TAG | ReleaseTag | parse_release_tag | a release tag v1.2.3 |
| VERSION | Version | parse_version | a release version 1.2.3 |
| DRIVER_BRANCH | DriverBranch | parse_driver_branch | an NVIDIA driver branch, 3 or 4 digits (580) |
| NODE_PATH | NodePath | parse_node_path | an absolute, normalised path on the nodes |
| DELETABLE_PATH | DeletablePath | parse_deletable_path | a NODE_PATH reset may remove: 2+ deep, outside system directories |
| IPV4_UNICAST | Ipv4Unicast | parse_ipv4_unicast | an IPv4 address a machine can have (not 0/8, multicast, 240/4) |
| IPV4_NETWORK | Ipv4Network | parse_ipv4_network | an IPv4 range a.b.c.d/len, the host bits zero |
| HOST_ADDRESS | HostAddress | parse_host_address | where a node is reached: an IPv4 unicast address or a DNS name |
| PORT | Port | parse_port | a TCP port, 1 to 65535 (a number, or its digits) |
| QUANTITY | Quantity | parse_quantity | a Kubernetes quantity above zero (2Gi, 500m, 1) |
| COUNT | Count | parse_count | a whole number from 1 to 999999, as digits (an extended resource's amount) |
| INTERFACE_NAME | InterfaceName | parse_interface_name | a Linux network interface name (eth0) |
| USER_NAME | UserName | parse_user_name | a login name (ubuntu, svc.deploy) |
| MD5 | Md5 | parse_md5 | 32 hexadecimal digits (returned lower-case) |
| FINGERPRINT | Fingerprint | parse_fingerprint | an OpenPGP key fingerprint: 40 or 64 hexadecimal digits (returned upper-case) |
| PLATFORM_KEY | PlatformKey | parse_platform_key | a node system as os-release ID and release, lower case (debian-12, rocky-9) |
| GPU_MODEL | GpuModel | parse_gpu_model | a GPU model as its device name carries it (H100, RTX 6000) |
| LOCAL_PATH | LocalPath | parse_local_path | a path on this machine: one line, no control characters |
| - | - | whole_number(low, high) | a whole number in ASCII digits within bounds (command-line counts) |
| - | FiniteFloat, PositiveFloat | parse_positive_float | a finite number (no NaN, no infinity) |

Two names per node are two types a checker tells apart: `HostName` (the inventory's name for a host: what
Ansible calls it) and `NodeName` (the Kubernetes node name and the machine's hostname).
"""
from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

from provision.inputs.local_paths import LOCAL_PATH as LOCAL_PATH
from provision.inputs.local_paths import VIRTUAL_FILE_SYSTEMS as VIRTUAL_FILE_SYSTEMS
from provision.inputs.local_paths import creatable_directory_problem as creatable_directory_problem
from provision.inputs.local_paths import parse_local_path as parse_local_path
from provision.inputs.shapes import *  # noqa: F403 - this module is the vocabulary's one public name
from provision.inputs.shapes import (
    COUNT,
    DELETABLE_PATH,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    DRIVER_BRANCH,
    ENV_NAME,
    EXTENDED_RESOURCE,
    FILE_URL,
    FINGERPRINT,
    GPU_MODEL,
    HOST_ADDRESS,
    IMAGE_NAME,
    IMAGE_REFERENCE,
    INTERFACE_NAME,
    IPV4_NETWORK,
    IPV4_UNICAST,
    KUBERNETES_VERSION,
    MD5,
    NODE_PATH,
    PLATFORM_KEY,
    QUALIFIED_NAME,
    QUANTITY,
    REGISTRY,
    REGISTRY_HOST,
    RELEASE_TAG,
    REPOSITORY_URL,
    S3_REGION,
    S3_URL,
    SYSTEMD_CALENDAR,
    TEXT,
    URL,
    USER_NAME,
    VERSION,
    Shape,
    parse_port,
)

# --- the pydantic types ----------------------------------------------------------------------------------------

Url = Annotated[str, AfterValidator(URL.parse)]
RepositoryUrl = Annotated[str, AfterValidator(REPOSITORY_URL.parse)]
FileUrl = Annotated[str, AfterValidator(FILE_URL.parse)]
RegistryHost = Annotated[str, AfterValidator(REGISTRY_HOST.parse)]
Registry = Annotated[str, AfterValidator(REGISTRY.parse)]
ImageName = Annotated[str, AfterValidator(IMAGE_NAME.parse)]
ImageReference = Annotated[str, AfterValidator(IMAGE_REFERENCE.parse)]
DnsLabel = Annotated[str, AfterValidator(DNS_LABEL.parse)]
DnsSubdomain = Annotated[str, AfterValidator(DNS_SUBDOMAIN.parse)]
QualifiedName = Annotated[str, AfterValidator(QUALIFIED_NAME.parse)]
ExtendedResource = Annotated[str, AfterValidator(EXTENDED_RESOURCE.parse)]
EnvName = Annotated[str, AfterValidator(ENV_NAME.parse)]
Text = Annotated[str, AfterValidator(TEXT.parse)]
KubernetesVersion = Annotated[str, AfterValidator(KUBERNETES_VERSION.parse)]
ReleaseTag = Annotated[str, AfterValidator(RELEASE_TAG.parse)]
Version = Annotated[str, AfterValidator(VERSION.parse)]
DriverBranch = Annotated[str, AfterValidator(DRIVER_BRANCH.parse)]
NodePath = Annotated[str, AfterValidator(NODE_PATH.parse)]
DeletablePath = Annotated[str, AfterValidator(DELETABLE_PATH.parse)]
Ipv4Unicast = Annotated[str, AfterValidator(IPV4_UNICAST.parse)]
Ipv4Network = Annotated[str, AfterValidator(IPV4_NETWORK.parse)]
HostAddress = Annotated[str, AfterValidator(HOST_ADDRESS.parse)]
Port = Annotated[int, BeforeValidator(parse_port)]
Quantity = Annotated[str, AfterValidator(QUANTITY.parse)]
Count = Annotated[str, AfterValidator(COUNT.parse)]
InterfaceName = Annotated[str, AfterValidator(INTERFACE_NAME.parse)]
UserName = Annotated[str, AfterValidator(USER_NAME.parse)]
Md5 = Annotated[str, AfterValidator(lambda value: MD5.parse(value).lower())]
Fingerprint = Annotated[str, AfterValidator(lambda value: FINGERPRINT.parse(value).upper())]
PlatformKey = Annotated[str, AfterValidator(PLATFORM_KEY.parse)]
GpuModel = Annotated[str, AfterValidator(GPU_MODEL.parse)]
SystemdCalendar = Annotated[str, AfterValidator(SYSTEMD_CALENDAR.parse)]
S3Url = Annotated[str, AfterValidator(S3_URL.parse)]
S3Region = Annotated[str, AfterValidator(S3_REGION.parse)]
LocalPath = Annotated[str, AfterValidator(LOCAL_PATH.parse)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
PositiveFloat = Annotated[float, Field(allow_inf_nan=False, gt=0)]

# Every shape, by name (tests sweep them; docs list them).
SHAPES: dict[str, Shape] = {name: value for name, value in globals().items() if isinstance(value, Shape)}
