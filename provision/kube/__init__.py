"""Work through the Kubernetes API: the client, verification, drain, the kubeconfig and the smoke test."""
