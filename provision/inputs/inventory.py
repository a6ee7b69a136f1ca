"""The inventory: Ansible INI or YAML, read with Ansible's own parser, turned into a validated Cluster.

`load_inventory` reads the file into plain data (inventory_reader.py: the only module that meets Ansible's
objects), then builds the Cluster from it (inventory_builder.py: pure, every group and host checked where it is
read); the model is inventory_model.py. A Node has two names: `name`, its Kubernetes node name and the machine's
hostname, and `host`, what Ansible calls it (the inventory's host name: run limits, the groups file and
`inventory_hostname` in the roles). They differ only where the inventory names the node in a variable.

The names other modules import are re-exported here.
"""
from __future__ import annotations

from pathlib import Path

from provision.inputs.host_values import address_problem as address_problem
from provision.inputs.host_values import connection_problem as connection_problem
from provision.inputs.host_values import key_file_problem as key_file_problem
from provision.inputs.host_values import node_name_problem as node_name_problem
from provision.inputs.host_values import port_problem as port_problem
from provision.inputs.inventory_builder import build_cluster
from provision.inputs.inventory_model import MAX_CONTROL_PLANES as MAX_CONTROL_PLANES
from provision.inputs.inventory_model import Cluster as Cluster
from provision.inputs.inventory_model import GpuMode as GpuMode
from provision.inputs.inventory_model import InventoryData as InventoryData
from provision.inputs.inventory_model import InventoryFormat as InventoryFormat
from provision.inputs.inventory_model import Node as Node
from provision.inputs.inventory_model import Role as Role
from provision.inputs.inventory_model import node_ip_addresses as node_ip_addresses
from provision.inputs.inventory_reader import MAX_GROUP_DEPTH as MAX_GROUP_DEPTH
from provision.inputs.inventory_reader import MAX_HOSTS as MAX_HOSTS
from provision.inputs.inventory_reader import ansible_inventory_env as ansible_inventory_env
from provision.inputs.inventory_reader import read_inventory
from provision.inputs.inventory_reader import unread_vars_files as unread_vars_files


def load_inventory(path: Path) -> Cluster:
    """Parse and validate an inventory. Raises InputError (one line, names the file and host) on bad input."""
    return build_cluster(read_inventory(path))
