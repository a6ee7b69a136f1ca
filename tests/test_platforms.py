"""The platform table (provision/inputs/platforms.py): one row per OS and release, and everything that names a
supported system is held to it: preflight's lookups, what the roles receive, the interpreter each run's inventory
names, the Vagrant lab's OS choices and docs/os-support.md."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provision.cli.app import app
from provision.inputs.files import parse_yaml
from provision.inputs.inventory import Cluster, Node
from provision.inputs.platforms import (
    NODE_PYTHON_FLOOR,
    PLATFORMS,
    NodePython,
    Platform,
    PythonFound,
    Refusal,
    bootstrap_script,
    choose_python,
    platform_for,
    role_rows,
    supported_text,
)
from provision.inputs.settings import parse_settings
from provision.lab.boxes import lab_os_choices
from provision.nodes.runner import run_inventory
from provision.render.playbook_vars import playbook_vars, python_host_vars
from provision.resources import VAGRANT_DIR
from tests.lab.lab import FLAVOURS
from tests.support.paths import REPO_ROOT

CLUSTER = Cluster(inventory_path=Path("hosts.ini"), nodes=(
    Node(name="cp1", address="192.0.2.10", role="control_plane", user="root"),
    Node(name="el8", address="192.0.2.11", role="worker", user="root"),
    Node(name="own", address="192.0.2.12", role="worker", user="root", python_interpreter="/opt/python/bin/python3"),
))
EL8 = NodePython("/usr/bin/python3.12", "python3.12", "rocky", "8")


def test_every_release_has_one_row_and_every_row_its_facts() -> None:
    keys = [(row.os_id.lower(), release) for row in PLATFORMS for release in row.releases]
    assert len(keys) == len(set(keys))
    for row in PLATFORMS:
        if isinstance(row, Refusal):
            assert row.reason and row.fix, row.name
            continue
        assert row.family in ("Debian", "RedHat") and row.package_manager == ("apt" if row.family == "Debian" else "dnf")
        assert row.python.startswith("/") and (row.cuda is not None or row.no_cuda_reason), row.name
        assert (row.support == "warned") == bool(row.note), row.name
        # Ansible finds the row by its distribution and major version: no two rows may share them.
    seen = [(r["ansible_distribution"], v) for r in role_rows() for v in r["ansible_versions"]]
    assert len(seen) == len(set(seen))


@pytest.mark.parametrize(("os_release", "name"), [
    ({"ID": "rocky", "VERSION_ID": "8.10"}, "Rocky Linux 8"),
    ({"ID": "anolis", "VERSION_ID": "8.8", "PLATFORM_ID": "platform:an8"}, "Anolis OS 8"),
    ({"ID": "alinux", "VERSION_ID": "3", "PLATFORM_ID": "platform:al8"}, "Alibaba Cloud Linux 3"),
    ({"ID": "openEuler", "VERSION_ID": "24.03"}, "openEuler 24.03 LTS"),
    ({"ID": "ol", "VERSION_ID": "9.5"}, "Oracle Linux 9"),
    ({"ID": "almalinux", "VERSION_ID": "10.0"}, "AlmaLinux 10"),
    ({"ID": "debian", "PRETTY_NAME": "Debian GNU/Linux forky/sid"}, "Debian testing/unstable"),
    ({"ID": "centos", "VERSION_ID": "7"}, "CentOS 7"),
])
def test_a_node_is_found_by_its_os_release(os_release: dict[str, str], name: str) -> None:
    assert platform_for(os_release).name == name


def test_the_el8_family_is_managed_with_python_3_12_while_dnf_stays_on_platform_python() -> None:
    for row in PLATFORMS:
        if isinstance(row, Platform) and row.package_set == "el8":
            assert (row.python, row.python_package, row.dnf_python, row.min_ansible_core) == \
                ("/usr/bin/python3.12", "python3.12", "/usr/libexec/platform-python", (2, 21)), row.name
    assert {row.name for row in PLATFORMS if isinstance(row, Platform) and row.min_ansible_core > (2, 19)} == {
        "Rocky Linux 8", "AlmaLinux 8", "Red Hat Enterprise Linux 8", "Oracle Linux 8", "Anolis OS 8",
        "Alibaba Cloud Linux 3"}


def test_the_bootstrap_installs_python_through_the_configured_mirror_once() -> None:
    rocky8 = platform_for({"ID": "rocky", "VERSION_ID": "8.10"})
    assert isinstance(rocky8, Platform)
    plain = bootstrap_script(rocky8, "python3.12", None)
    assert plain == ("[ -x /usr/bin/python3.12 ] && exit 0; dnf -y -q install python3.12 && echo "
                     "cb-python-installed")
    mirrored = bootstrap_script(rocky8, "python3.12", "https://mirrors.aliyun.com")
    assert "'--disablerepo=*' --enablerepo=baseos,appstream" in mirrored
    assert ("'--setopt=appstream.baseurl=https://mirrors.aliyun.com/rockylinux/$releasever/AppStream/$basearch/os/'"
            " --setopt=appstream.mirrorlist= --setopt=appstream.metalink=") in mirrored
    # Alibaba Cloud Linux keeps its own repositories (they are Aliyun's already).
    alinux = platform_for({"ID": "alinux", "VERSION_ID": "3"})
    assert isinstance(alinux, Platform)
    assert "--setopt" not in bootstrap_script(alinux, "python3.12", "https://mirrors.aliyun.com")


def test_each_runs_inventory_names_the_interpreter_preflight_chose_and_the_users_own_wins(tmp_path: Path) -> None:
    settings = parse_settings({"offline": {"source": "http://repo.internal/cb"}})
    pythons = {"cp1": NodePython("/usr/bin/python3", None, "debian", "12"), "el8": EL8,
               "own": NodePython("/usr/bin/python3.12", "python3.12", "rocky", "8")}
    found = python_host_vars(CLUSTER, settings, pythons)
    assert found["cp1"] == {"ansible_python_interpreter": "/usr/bin/python3"}
    assert found["el8"]["ansible_python_interpreter"] == "/usr/bin/python3.12"
    assert "http://repo.internal/cb/os/rockylinux/$releasever/BaseOS" in found["el8"]["cb_python_bootstrap"]
    # The inventory names an interpreter for this node: it is used as it is, and nothing is installed.
    assert "own" not in found
    (tmp_path / "run").mkdir()
    groups = parse_yaml(run_inventory(CLUSTER, tmp_path / "run", settings, pythons).read_text(), "inventory.yml")
    hosts = groups["all"]["children"]["workers"]["hosts"]
    assert hosts["el8"]["ansible_python_interpreter"] == "/usr/bin/python3.12"
    assert hosts["own"]["ansible_python_interpreter"] == "/opt/python/bin/python3"
    # Without preflight's choice (a playbook run on its own), Ansible's discovery is left to find one.
    alone = parse_yaml(run_inventory(CLUSTER, tmp_path / "run", settings).read_text(), "inventory.yml")
    assert [name for group in ("control_plane", "workers") for name, host in alone["all"]["children"][group]["hosts"].items()
            if "ansible_python_interpreter" in host] == ["own"]


def test_the_roles_receive_the_table() -> None:
    rows = playbook_vars(CLUSTER, parse_settings({}))["cb_platforms"]
    assert rows == role_rows()
    by_name = {row["name"]: row for row in rows}
    assert by_name["Anolis OS 8"]["family"] == "RedHat" and by_name["Anolis OS 8"]["ansible_distribution"] == "Anolis"
    assert by_name["Debian testing/unstable"]["ansible_versions"] == ["sid"]
    assert by_name["Ubuntu 22.04 LTS"]["ansible_versions"] == ["22"]
    assert by_name["CentOS 7"]["support"] == "refused" and "cgroup v1" in by_name["CentOS 7"]["reason"]


# --- the Vagrant lab and the docs, held to the table ------------------------------------------------------------

def lab_boxes() -> dict[str, tuple[str, str]]:
    """The Vagrantfile's OS choices: name -> (box, the os-release "ID VERSION_ID" it boots)."""
    text = (VAGRANT_DIR / "Vagrantfile").read_text()
    body = text.split("def lab_boxes", 1)[1].split("\nend", 1)[0]
    return {name: (box, os) for name, box, os in re.findall(r'"([\w.-]+)" => \{ box: "([^"]+)", os: "([^"]+)" \}',
                                                             body)}


def test_the_vagrant_lab_offers_only_systems_the_table_supports() -> None:
    boxes = lab_boxes()
    assert boxes and "centos7" not in boxes
    for choice, (_box, os) in boxes.items():
        os_id, version = os.split()
        row = platform_for({"ID": os_id, "VERSION_ID": version})
        assert isinstance(row, Platform) and row.support == "supported", choice
    listed = ", ".join(boxes)
    lab_yml = (VAGRANT_DIR / "lab.yml").read_text()
    assert f"# LAB_OS: {listed}." in lab_yml
    docs = (REPO_ROOT / "docs" / "lab.md").read_text()
    for choice, (box, _os) in boxes.items():
        assert f"`{choice}` ({box})" in docs
    assert lab_os_choices() == tuple(boxes)
    shown = CliRunner().invoke(app, ["lab", "up", "--help"], env={"COLUMNS": "300"})
    assert f"{listed} (LAB_OS)" in " ".join(shown.output.split())


def doc_table() -> dict[str, dict[str, str]]:
    text = (REPO_ROOT / "docs" / "os-support.md").read_text()
    section = text.split("<!-- platform table -->", 1)[1].split("<!-- end of platform table -->", 1)[0]
    lines = [line for line in section.strip().splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
        rows[cells["OS"]] = cells
    return rows


def lab_python_check(row: Platform) -> str:
    """docs/os-support.md's lab column: the lab flavour that stands for the row and the Python the modules run with
    there (its lab tests assert that version), or, where no flavour stands for it, the floor check alone."""
    flavour = next((f for f in FLAVOURS.values() if platform_for({"ID": f.stands_for[0], "VERSION_ID": f.stands_for[1]})
                    is row), None)
    if flavour is None:
        return f"not run; vermin holds node code to {'.'.join(map(str, NODE_PYTHON_FLOOR))}"
    shown, wanted = (".".join(map(str, version)) for version in (flavour.python_version, row.python_version))
    return f"`{flavour.name}` node: Python {shown}" + ("" if shown == wanted else f" (not {wanted})")


def test_every_lab_flavour_stands_for_a_row_the_table_manages() -> None:
    for flavour in FLAVOURS.values():
        row = platform_for({"ID": flavour.stands_for[0], "VERSION_ID": flavour.stands_for[1]})
        assert isinstance(row, Platform), flavour.name
        assert (row.ansible_distribution, row.family) == (flavour.distribution, flavour.os_family), flavour.name
        assert row.package_manager == flavour.pkg_mgr, flavour.name


def test_an_el9_node_whose_python3_lacks_dnf_is_managed_when_ansibles_dnf_module_finds_the_bindings() -> None:
    """ansible-core's dnf module, when its interpreter cannot import dnf, tries platform-python, /usr/bin/python3 and
    /usr/bin/python (modules/dnf.py) and runs dnf under the first that can: such a node works, one where none can
    does not."""
    rocky9 = platform_for({"ID": "rocky", "VERSION_ID": "9.6"})
    assert isinstance(rocky9, Platform)
    python39 = PythonFound("/usr/bin/python3", (3, 9))
    with_bindings = PythonFound("/usr/libexec/platform-python", (3, 11), frozenset({"dnf"}))
    assert choose_python(rocky9, {p.path: p for p in (python39, with_bindings)}) == \
        NodePython("/usr/bin/python3", None, "rocky", "9")
    without = PythonFound("/usr/bin/python", (3, 9))
    problem = choose_python(rocky9, {p.path: p for p in (python39, without)})
    assert not isinstance(problem, NodePython)
    assert problem.detail == "none of /usr/bin/python3, /usr/bin/python can import dnf (dnf's Python bindings)"
    assert "python3-dnf" in problem.fix


def test_docs_os_support_lists_every_row_of_the_table_as_it_is() -> None:
    documented = doc_table()
    assert list(documented) == [row.name for row in PLATFORMS]
    for row in PLATFORMS:
        cells = documented[row.name]
        assert cells["support"] == row.support_level, row.name
        if isinstance(row, Refusal):
            assert cells["Python"] == cells["packages"] == cells["version"] == cells["lab"] == "-"
            continue
        assert cells["packages"] == row.package_manager, row.name
        assert cells["Python"] == f"`{row.python}`" + (f" (installed: `{row.python_package}`)"
                                                        if row.python_package else ""), row.name
        assert cells["version"] == ".".join(map(str, row.python_version)), row.name
        assert cells["lab"] == lab_python_check(row), row.name
        assert cells["Docker"] == f"`{row.docker_repo}`", row.name
        assert cells["CUDA"] == (f"`{row.cuda.directory}`" if row.cuda else "-"), row.name
    assert supported_text() in (REPO_ROOT / "docs" / "os-support.md").read_text()
