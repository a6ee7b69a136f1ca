"""Work on the nodes over SSH: the one shell interface, the Ansible driver, preflight and prepare."""
