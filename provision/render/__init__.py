"""What is made from the inputs before any node is touched: kubeadm config, manifests, playbook variables."""
