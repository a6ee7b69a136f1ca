"""The value vocabulary (provision/inputs/values.py): each shape takes the whole string in ASCII, refuses what only
looks right (a trailing newline, a full-width or Arabic-Indic digit, a template), and says its rule in one line."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from provision.inputs import values
from provision.inputs.values import SHAPES, Shape

# (shape, accepted, refused)
CASES: list[tuple[Shape, list[str], list[str]]] = [
    (values.URL, ["https://mirror.example.com/x", "http://10.0.0.5:8080/a%20b?x=1#y", "HTTPS://m.example.com"],
     ["https://m.example.com/\n", "https://m.example.com:99999/", "https://m.example.com/{{ lookup('pipe','id') }}",
      "https://１.example.com", "ftp://x.example.com", "https://x.example.com/a b", "https://x.example.com/$(id)",
      "https://x.example.com/'", "https://", "mirror.example.com", "https://x.example.com/%zz"]),
    (values.REPOSITORY_URL, ["file:///srv/offline", "https://mirror.example.com"],
     ["file://srv", "file:///srv/../etc", "file:///srv//x", "file:///srv\n"]),
    (values.REGISTRY_HOST, ["docker.io", "localhost:5000", "10.0.0.5:5000"], ["registry:65536", "docker.io/", "a b"]),
    (values.REGISTRY, ["registry.example.com/google_containers", "10.0.0.5:5000"],
     ["https://registry.example.com", "registry.example.com/K8s", "registry.example.com:0/x"]),
    (values.IMAGE_REFERENCE, ["busybox:1.36", "docker.io/library/busybox:1.36", f"a@sha256:{'0' * 64}"],
     ["busybox:latest", "busybox", "busybox:1.36\n", "busybox:1.36 ", "a: b", "registry:99999/a:1",
      "busybox:1.٣٦"]),
    (values.IMAGE_NAME, ["nvcr.io/nvidia/k8s-device-plugin"], ["nvcr.io/nvidia/k8s-device-plugin:v1"]),
    (values.DNS_LABEL, ["cluster-bootstrap", "a"], ["Cluster", "a-", "-a", "a.b", "a\n", "ａ", "a" * 64]),
    (values.DNS_SUBDOMAIN, ["cluster.local"], ["cluster.local.", "Cluster.local", "my_cluster", "cluster.local\n"]),
    (values.EXTENDED_RESOURCE, ["rdma/hca", "example.com/fpga"],
     ["kubernetes.io/x", "foo.kubernetes.io/x", "hca", "rdma/hca\n", "requests.example.com/x"]),
    (values.ENV_NAME, ["NCCL_DEBUG", "_x"], ["1A", "A-B", "A\n", "Ａ"]),
    (values.TEXT, ["INFO", "a b: c # d", "{{ x }}"], ["a\nb", "a\0", "a\u2028b"]),
    (values.KUBERNETES_VERSION, ["1.36", "v1.36.4"], ["1.36\n", "1.３6", "1.031", " 1.36", "2.0", "1.36.0-rc.1"]),
    (values.RELEASE_TAG, ["v1.2.3"], ["1.2.3", "v1.2.3\n", "v1.٢.3"]),
    (values.VERSION, ["1.19.1"], ["v1.19.1", "1.19.1\n"]),
    (values.DRIVER_BRANCH, ["580", "1000"], ["58", "580\n", "٥٨٠", "058"]),
    (values.NODE_PATH, ["/var/lib/x", "/a"], ["var/lib", "/var/./lib", "//usr", "/var/lib/", "/a/../b", "/a b"]),
    (values.DELETABLE_PATH, ["/var/lib/cluster-bootstrap/cache", "/srv/cache"],
     ["/./etc", "//usr", "/var/lib", "/var", "/opt", "/var/lib/kubelet/cache", "/etc/cache", "/usr/local/cache",
      "/", "/cache"]),
    (values.IPV4_UNICAST, ["10.0.0.1", "127.0.0.1"],
     ["0.0.0.0", "224.0.0.1", "255.255.255.255", "240.0.0.1", "10.0.0.01", "10.0.0.1\n", "١٠.0.0.1", "10.0.0"]),
    (values.IPV4_NETWORK, ["10.244.0.0/16"], ["10.244.0.1/16", "10.244.0.0/33", "10.244.0.0", "10.244.0.0/16\n"]),
    (values.HOST_ADDRESS, ["10.0.0.1", "node1.example.com", "node1.example.com."],
     ["1.2.3", "a_b", "0.0.0.0", "node1\n", "{{ x }}"]),
    (values.QUANTITY, ["2Gi", "500m", "0.5", "1"], ["0", "0Gi", "1e3", "2Gi\n", "-1", "2GB", "２Gi"]),
    (values.COUNT, ["1", "8"], ["0", "0.5", "500m", "1\n", "01"]),
    (values.INTERFACE_NAME, ["eth0", "ens1f0.100"], ["eth0\n", "a" * 16, "..", "eth 0"]),
    (values.USER_NAME, ["ubuntu", "svc.deploy"], ["", "a b", "root\n", "$(id)"]),
    (values.MD5, ["c58f30108f718f92721af3b95e74349a"], ["c58f", "c58f30108f718f92721af3b95e74349a\n"]),
    (values.GPU_MODEL, ["H100", "RTX 6000"], ["H100\n", " H100", ""]),
]


@pytest.mark.parametrize(("shape", "accepted", "refused"), CASES, ids=[c[0].what for c in CASES])
def test_each_shape_takes_the_whole_ascii_string_and_names_its_rule(shape: Shape, accepted: list[str],
                                                                    refused: list[str]) -> None:
    for value in accepted:
        assert shape.parse(value) == value
    for value in refused:
        problem = shape.problem(value)
        assert problem is not None, value
        assert "\n" not in problem and repr(value)[:20] in problem
        with pytest.raises(ValueError, match=r"e\.g\.|port|zero|latest|tag|inside|holds|below|kubernetes\.io|"
                                             r"this network|multicast|reserved|host bits"):
            shape.parse(value)


def test_every_shape_refuses_a_trailing_newline_and_non_strings() -> None:
    for name, shape in SHAPES.items():
        assert shape.problem(f"{shape.example.split(' ')[0].strip(chr(39))}\n") is not None, name
        assert shape.problem(7) is not None, name


def test_shapes_are_pydantic_types() -> None:
    class Model(BaseModel):
        model_config = ConfigDict(strict=True)
        url: values.Url
        port: values.Port
        rate: values.PositiveFloat

    assert Model(url="https://mirror.example.com", port="22", rate=1.5).port == 22  # type: ignore[arg-type]
    for bad in ({"url": "https://x.example.com\n", "port": 22, "rate": 1.0},
                {"url": "https://x.example.com", "port": 70000, "rate": 1.0},
                {"url": "https://x.example.com", "port": 22, "rate": math.nan},
                {"url": "https://x.example.com", "port": 22, "rate": math.inf}):
        with pytest.raises(ValidationError):
            Model.model_validate(bad)


def test_parse_functions_for_command_line_options() -> None:
    assert values.parse_port("65535") == 65535
    for bad in ("0", "65536", "２２", True, "22\n"):
        with pytest.raises(ValueError, match="port"):
            values.parse_port(bad)
    assert values.parse_positive_float("2.5") == 2.5
    for bad_number in ("nan", "inf", "0", "-1", "1e400"):
        with pytest.raises(ValueError, match="finite number"):
            values.parse_positive_float(bad_number)
    assert values.parse_md5("C58F30108F718F92721AF3B95E74349A") == "c58f30108f718f92721af3b95e74349a"


def test_a_directory_that_cannot_be_created_is_named(tmp_path: Path) -> None:
    assert values.creatable_directory_problem(tmp_path / "new" / "deeper") is None
    (tmp_path / "file").write_text("")
    assert "is a file" in (values.creatable_directory_problem(tmp_path / "file" / "x") or "")
    assert "kernel" in (values.creatable_directory_problem(Path("/proc/x")) or "")
