"""Stand-in kubeadm and kubectl for lab nodes with several control planes (tests/test_ha_lab.py).

Real kubeadm cannot run here, so each node gets scripts that record every call and act out what the plays rely
on: init writes the kubeconfigs as kubeadm lays them out (and keeps the kube-vip manifest it found, to show what
kube-vip ran with during init), `token create` prints a join command through the endpoint, `certs certificate-key`
prints the run's key and `init phase upload-certs` accepts only that key, a control-plane join adds an etcd member
on its node, `kubectl exec etcd-* -- etcdctl` answers from that node's member list. Every call is also written,
with the time, to /root/order, so the order of calls on different nodes can be compared (the nodes share the
host's clock).

The secrets (token, CA hash, certificate key) are random per session: a run's logs and artifacts must contain
none of them.
"""
from __future__ import annotations

import re
import secrets
import string
from pathlib import Path

ALPHABET = string.ascii_lowercase + string.digits
TOKEN = "".join(secrets.choice(ALPHABET) for _ in range(6)) + "." + "".join(secrets.choice(ALPHABET) for _ in range(16))
CA_HASH = "sha256:" + secrets.token_hex(32)
CERTIFICATE_KEY = secrets.token_hex(32)
# Anything shaped like a bootstrap token or a certificate key (64 hex digits), not only ours.
SECRET_PATTERN = re.compile(r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b|\b[0-9a-f]{64}\b")

KUBEADM = r"""#!/bin/sh
# Stand-in for kubeadm (tests/support/kube_stand_ins.py).
echo "$*" >> /root/kubeadm-calls
echo "$(date +%s.%N) $(hostname) kubeadm $*" \
  | sed 's/--token [^ ]*/--token T/; s/--certificate-key [^ ]*/--certificate-key K/' >> /root/order
node_name() { while [ $# -gt 0 ]; do [ "$1" = --node-name ] && { echo "$2"; return; }; shift; done; hostname; }
write_confs() {
  mkdir -p /etc/kubernetes
  for f in "$@"; do
    cat > "/etc/kubernetes/$f" <<EOF
apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: Q0E=
    server: https://ENDPOINT
  name: kubernetes
contexts:
- context:
    cluster: kubernetes
    user: kubernetes-admin
  name: kubernetes-admin@kubernetes
current-context: kubernetes-admin@kubernetes
kind: Config
users:
- name: kubernetes-admin
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
EOF
  done
}
add_member() { echo "$(od -An -N4 -tu4 /dev/urandom | tr -d ' ') $1" >> /root/etcd-members; }
case "$1" in
  config) echo "[config/images] Pulled registry.k8s.io/kube-apiserver:v1.31.0" ;;
  init)
    if [ "$2" = phase ]; then
      case "$*" in *"--certificate-key CERTIFICATE_KEY"*) echo "[upload-certs] Storing the certificates in Secret";;
        *) echo "error: not the key minted for this run" >&2; exit 1;; esac
      exit 0
    fi
    [ -e /etc/kubernetes/manifests/kube-vip.yaml ] && cp /etc/kubernetes/manifests/kube-vip.yaml /root/kube-vip-during-init.yaml
    write_confs admin.conf super-admin.conf kubelet.conf
    add_member "$(hostname)"
    echo "kubeadm join ENDPOINT --token TOKEN --discovery-token-ca-cert-hash CA_HASH --control-plane" \
      "--certificate-key CERTIFICATE_KEY"
    ;;
  certs) echo "CERTIFICATE_KEY" ;;
  token) echo "kubeadm join ENDPOINT --token TOKEN --discovery-token-ca-cert-hash CA_HASH " ;;
  join)
    case "$*" in
      *--control-plane*)
        write_confs admin.conf kubelet.conf
        add_member "$(node_name "$@")" ;;
      *) write_confs kubelet.conf ;;
    esac ;;
  reset) rm -rf /etc/kubernetes/*.conf /etc/kubernetes/manifests /root/etcd-members ;;
esac
"""

KUBECTL = r"""#!/bin/sh
# Stand-in for kubectl (tests/support/kube_stand_ins.py): etcdctl through `exec etcd-*` answers from
# /root/etcd-members ("<decimal id> <name>" lines).
echo "$*" >> /root/kubectl-calls
echo "$(date +%s.%N) $(hostname) kubectl $*" >> /root/order
members_json() {
  printf '{"header":{"cluster_id":1},"members":['
  sep=""
  while read -r id name; do
    printf '%s{"ID":%s,"name":"%s","peerURLs":["https://%s:2380"]}' "$sep" "$id" "$name" "$name"; sep=","
  done < /root/etcd-members
  printf ']}\n'
}
case "$*" in
  *" member list "*) [ -s /root/etcd-members ] || { echo "Error: context deadline exceeded" >&2; exit 1; }; members_json ;;
  *" endpoint health "*)
    printf '['; sep=""
    while read -r id name; do
      printf '%s{"endpoint":"https://%s:2379","health":true,"took":"9ms"}' "$sep" "$name"; sep=","
    done < /root/etcd-members
    printf ']\n' ;;
  *" member remove "*)
    hex=$(echo "$*" | sed 's/.* member remove //')
    while read -r id name; do
      [ "$(printf '%x' "$id")" = "$hex" ] || echo "$id $name"
    done < /root/etcd-members > /root/etcd-members.new
    mv /root/etcd-members.new /root/etcd-members
    echo "Member $hex removed from cluster 1" ;;
  *"--server https://127.0.0.1:6444 "*"get --raw=/readyz"*)
    # /root/proxy-down: the node's local proxy does not answer.
    if [ -e /root/proxy-down ]; then
      echo "The connection to the server 127.0.0.1:6444 was refused - did you specify the right host or port?" >&2
      exit 1
    fi
    echo ok ;;
  *"get --raw=/readyz"*) echo ok ;;
  *" patch configmap kube-proxy "*)
    marker="/root/patched-$(echo "$*" | md5sum | cut -c1-8)"
    if [ -e "$marker" ]; then echo "configmap/kube-proxy patched (no change)"
    else touch "$marker"; echo "configmap/kube-proxy patched"; fi ;;
  *" rollout restart "*) echo "daemonset.apps/kube-proxy restarted" ;;
esac
"""


def kubeadm_script(endpoint: str) -> str:
    return (KUBEADM.replace("ENDPOINT", endpoint).replace("CERTIFICATE_KEY", CERTIFICATE_KEY)
            .replace("TOKEN", TOKEN).replace("CA_HASH", CA_HASH))


def install_command(endpoint: str) -> str:
    """A shell command that installs both stand-ins on a node (run as root there)."""
    return (f"cat > /usr/local/bin/kubeadm <<'CBFAKE'\n{kubeadm_script(endpoint)}CBFAKE\n"
            f"cat > /usr/local/bin/kubectl <<'CBFAKE'\n{KUBECTL}CBFAKE\n"
            "chmod 755 /usr/local/bin/kubeadm /usr/local/bin/kubectl")


def leaked(run_dir: Path) -> list[str]:
    """Files of a run (logs, ansible-runner's artifacts and events) that contain a secret or anything like one."""
    found = []
    for path in run_dir.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="ignore")
            if any(secret in text for secret in (TOKEN, TOKEN.split(".")[1], CA_HASH, CERTIFICATE_KEY)) \
                    or SECRET_PATTERN.search(text):
                found.append(str(path.relative_to(run_dir)))
    return found
