"""The lab's stand-in kubeadm, kubelet and kubectl, as the packages of the stand-in repositories install them
(tests/lab/repos.py): each knows its own release and acts out what the upgrade and the certificate commands rely on.

- `kubeadm version -o short`, `kubelet --version`, `kubectl version --client -o json`: the package's release.
- `kubeadm init` / `join`: a control plane's static pod manifests (images of the release), kubeadm's PKI made by
  openssl on the node (a CA, every certificate kubeadm manages, the kubeconfigs with their client certificates),
  the etcd member list; a worker's kubelet.conf.
- `kubeadm upgrade plan|apply vX`: kubeadm's version policy (cmd/kubeadm/app/phases/upgrade/policy.go): refused
  when kubeadm is older than vX, or vX is more than one minor past the cluster (this control plane's manifests);
  apply runs kubeadm's phases in kubeadm's order (cmd/kubeadm/app/cmd/upgrade/apply.go: control-plane,
  upload-config, kubeconfig, kubelet-config, bootstrap-token, addon, post-upgrade): the static pods at vX, the
  kubeadm-config ConfigMap's kubernetesVersion (STATE/kubeadm-config.yaml, which the stand-in API serves from the first
  control plane and copies to the others' kubeadm: tests/lab/cluster_api.py), the certificates renewed as kubeadm
  does by default, the kubelet configuration, kube-proxy's image (STATE/kube-proxy-image). A test kills it after a
  phase (the phase's name in STATE/kill-apply-after, used once), as a SIGKILL or a lost connection would.
- `kubeadm upgrade node`: a control plane's static pods at the kubernetesVersion of the kubeadm-config ConfigMap it
  fetches from the cluster (cmd/kubeadm/app/cmd/upgrade/node.go: FetchInitConfigurationFromCluster), not at its own
  release, and its certificates renewed; every node's kubelet configuration marked with it.
- `kubeadm certs renew all`: every certificate but the CAs issued again for a year.
- the kubelet as a service: records the release it started with (what its Node reports, through the stand-in
  API: tests/lab/cluster_api.py) and sleeps.
- `kubectl get --raw=/readyz`: this node's API server (--server https://127.0.0.1:6443) is ready while its
  kube-apiserver manifest is in place; another control plane's while its machine answers. `exec etcd-* -- etcdctl
  member list / endpoint health --cluster` (from /var/lib/cb-standin/etcd-members: id, name, address): a member is
  healthy while its machine answers, and etcdctl's exit 1 when one is not. `apply` (unchanged).
- crictl (installed by the tests: `CRICTL`): `pods --label component=X --state ready -q` (or the label
  app.kubernetes.io/name=X, kube-vip's) lists a pod while X's manifest is in the kubelet's directory, as the kubelet
  would run it; `pull IMAGE` keeps the image (STATE/images), `inspecti -q IMAGE` finds it there.
- `kubeadm config images list --image-repository R`: the release's images under R, as kubeadm names them.

Every call is recorded on its node in /var/log/cb-standin/calls as `<start> <end> <node> <tool> <arguments>` (the
nodes share the host's clock), so a test can put the calls of every node in one order, and a benchmark can take
their time out of the whole.
"""
from __future__ import annotations

from collections.abc import Sequence

CALLS = "/var/log/cb-standin/calls"
STATE = "/var/lib/cb-standin"
PKI_LIB = "/usr/lib/cb-standin/pki.sh"

# Shared by the scripts: where calls go, and the record of one (written when the call ends).
_RECORD = r"""
mkdir -p /var/log/cb-standin /var/lib/cb-standin
cb_start=$(date +%s.%N)
cb_args="$*"
cb_record() { echo "$cb_start $(date +%s.%N) $(hostname) TOOL $cb_args" >> /var/log/cb-standin/calls; }
trap cb_record EXIT
"""

# kubeadm's PKI, made with openssl: sourced by kubeadm, and by a test that issues one certificate with a chosen life.
PKI = r"""# Stand-in kubeadm PKI (tests/lab/kube_acting.py): kubeadm's files, made with openssl.
pki=/etc/kubernetes/pki
cb_ca() {  # cb_ca PATH CN: a CA for ten years, kept when there is one
  [ -e "$1.crt" ] && return 0
  mkdir -p "$(dirname "$1")"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$1.key" -out "$1.crt" \
    -days 3650 -subj "/CN=$2" 2>/dev/null
}
cb_leaf() {  # cb_leaf PATH CN CA DAYS: a certificate signed by the CA at CA.crt/CA.key
  mkdir -p "$(dirname "$1")"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$1.key" -subj "/CN=$2" \
    -out "$1.csr" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA "$3.crt" -CAkey "$3.key" -CAcreateserial -days "$4" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr"
}
cb_kubeconfig() {  # cb_kubeconfig FILE CN DAYS: a kubeconfig with a client certificate signed by the cluster CA
  work=$(mktemp -d)
  cb_leaf "$work/client" "$2" "$pki/ca" "$3"
  cat > "/etc/kubernetes/$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
    server: https://$(hostname):6443
  name: kubernetes
contexts:
- context:
    cluster: kubernetes
    user: $2
  name: $2@kubernetes
current-context: $2@kubernetes
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$work/client.crt")
    client-key-data: $(base64 -w0 "$work/client.key")
EOF
  chmod 600 "/etc/kubernetes/$1"
  rm -rf "$work"
}
cb_certificates() {  # cb_certificates DAYS [super-admin]: every certificate kubeadm manages on a control plane
  cb_ca "$pki/ca" kubernetes
  cb_ca "$pki/etcd/ca" etcd-ca
  cb_ca "$pki/front-proxy-ca" front-proxy-ca
  cb_leaf "$pki/apiserver" kube-apiserver "$pki/ca" "$1"
  cb_leaf "$pki/apiserver-kubelet-client" kube-apiserver-kubelet-client "$pki/ca" "$1"
  cb_leaf "$pki/apiserver-etcd-client" kube-apiserver-etcd-client "$pki/etcd/ca" "$1"
  cb_leaf "$pki/front-proxy-client" front-proxy-client "$pki/front-proxy-ca" "$1"
  cb_leaf "$pki/etcd/server" "$(hostname)" "$pki/etcd/ca" "$1"
  cb_leaf "$pki/etcd/peer" "$(hostname)" "$pki/etcd/ca" "$1"
  cb_leaf "$pki/etcd/healthcheck-client" kube-etcd-healthcheck-client "$pki/etcd/ca" "$1"
  cb_kubeconfig admin.conf kubernetes-admin "$1"
  cb_kubeconfig controller-manager.conf system:kube-controller-manager "$1"
  cb_kubeconfig scheduler.conf system:kube-scheduler "$1"
  if [ "${2:-}" = super-admin ] || [ -e /etc/kubernetes/super-admin.conf ]; then
    cb_kubeconfig super-admin.conf kubernetes-super-admin "$1"
  fi
}
"""

KUBEADM = r"""#!/bin/sh
# Stand-in for kubeadm vRELEASE (cluster-bootstrap lab: tests/lab/kube_acting.py says what it acts out).
RELEASE=vRELEASE
# What a bundle build asks the package's kubeadm on the operator's machine: answered before anything is recorded.
case "$*" in
  "version -o short") echo "$RELEASE"; exit 0 ;;
  "config images list"*)
    # Under --image-repository, as kubeadm moves them (registry.k8s.io's paths kept).
    repository=$(echo "$*" | sed -n 's/.*--image-repository[= ]\([^ ]*\).*/\1/p')
    printf '%s\n' IMAGES | sed "s#^registry.k8s.io#${repository:-registry.k8s.io}#"; exit 0 ;;
esac
""" + _RECORD.replace("TOOL", "kubeadm") + r"""
cb_args=$(echo "$cb_args" | sed 's/--token [^ ]*/--token T/; s/--certificate-key [^ ]*/--certificate-key K/')
. /usr/lib/cb-standin/pki.sh
manifests=/etc/kubernetes/manifests
minor() { echo "$1" | sed 's/^v//' | cut -d. -f2; }
patch() { echo "$1" | sed 's/^v//' | cut -d. -f3; }
cluster_release() {
  sed -n 's#^ *image: .*/kube-apiserver:\(v[0-9.]*\)$#\1#p' "$manifests/kube-apiserver.yaml" 2>/dev/null | head -n 1
}
static_pods() {  # static_pods RELEASE
  mkdir -p "$manifests"
  for component in kube-apiserver kube-controller-manager kube-scheduler; do
    cat > "$manifests/$component.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $component
  namespace: kube-system
  labels:
    component: $component
    tier: control-plane
spec:
  containers:
  - name: $component
    image: registry.k8s.io/$component:$1
EOF
  done
  [ -e "$manifests/etcd.yaml" ] || cat > "$manifests/etcd.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: etcd
  namespace: kube-system
  labels:
    component: etcd
    tier: control-plane
spec:
  containers:
  - name: etcd
    image: registry.k8s.io/etcd:3.6.5-0
EOF
}
# The kubeadm-config ConfigMap (its ClusterConfiguration) and kube-proxy's DaemonSet image, as this node's kubeadm
# sees them in the cluster.
cluster_config=/var/lib/cb-standin/kubeadm-config.yaml
upload_config() {  # upload_config RELEASE: kubeadm's upload-config phase
  printf 'apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: %s\n' "$1" > "$cluster_config"
}
configured_release() {
  sed -n 's/^kubernetesVersion: *//p' "$cluster_config" 2>/dev/null | head -n 1
}
kube_proxy() { echo "registry.k8s.io/kube-proxy:$1" > /var/lib/cb-standin/kube-proxy-image; }
killed_after() {  # killed_after PHASE: a test's SIGKILL after this phase of `upgrade apply` (used once)
  if [ "$(cat /var/lib/cb-standin/kill-apply-after 2>/dev/null)" = "$1" ]; then
    rm -f /var/lib/cb-standin/kill-apply-after
    cb_record
    kill -9 $$
  fi
}
kubelet_config() {
  mkdir -p /var/lib/kubelet
  echo "# kubelet configuration of $1 (stand-in kubeadm)" > /var/lib/kubelet/config.yaml
}
add_member() {  # add_member NAME: this node's member, with the address its etcd answers on
  members=/var/lib/cb-standin/etcd-members
  grep -qs " $1 " "$members" || echo "$(od -An -N4 -tu4 /dev/urandom | tr -d ' ') $1 $(hostname -I | cut -d' ' -f1)" \
    >> "$members"
}
fatal() { echo "[upgrade/version] FATAL: Specified version to upgrade to \"$target\" $*" >&2; exit 1; }
policy() {  # policy TARGET: kubeadm's upgrade version policy, against this control plane's manifests
  target=$1
  cluster=$(cluster_release)
  if [ -z "$cluster" ]; then
    echo "[upgrade/config] FATAL: this node runs no control plane (no $manifests/kube-apiserver.yaml)" >&2; exit 1
  fi
  if [ "$(minor "$1")" -gt "$(minor "$RELEASE")" ]; then
    fatal "is at least one minor release higher than the kubeadm minor release ($(minor "$1") >" \
      "$(minor "$RELEASE")). Such an upgrade is not supported"
  fi
  if [ "$(minor "$1")" -eq "$(minor "$RELEASE")" ] && [ "$(patch "$1")" -gt "$(patch "$RELEASE")" ]; then
    fatal "is higher than the kubeadm version \"$RELEASE\". Upgrade kubeadm first using the tool you used to" \
      "install kubeadm"
  fi
  if [ "$(minor "$1")" -gt $(( $(minor "$cluster") + 1 )) ]; then
    fatal "is too high; kubeadm can upgrade only 1 minor version at a time"
  fi
  echo "[upgrade/versions] Cluster version: $cluster"
  echo "[upgrade/versions] kubeadm version: $RELEASE"
}
case "$1 ${2:-}" in
  "version "*)
    case "$*" in
      *short*) echo "$RELEASE" ;;
      *json*) echo "{\"clientVersion\":{\"gitVersion\":\"$RELEASE\",\"platform\":\"linux/amd64\"}}" ;;
      *) echo "kubeadm version: &version.Info{GitVersion:\"$RELEASE\"}" ;;
    esac ;;
  "init "*)
    cb_certificates 365 super-admin; static_pods "$RELEASE"; upload_config "$RELEASE"; kubelet_config "$RELEASE"
    kube_proxy "$RELEASE"; add_member "$(hostname)"
    cp /etc/kubernetes/admin.conf /etc/kubernetes/kubelet.conf ;;
  "join "*)
    case "$*" in
      *--control-plane*) cb_certificates 365; static_pods "$RELEASE"; add_member "$(hostname)" ;;
    esac
    kubelet_config "$RELEASE"; mkdir -p /etc/kubernetes; echo "kind: Config" > /etc/kubernetes/kubelet.conf ;;
  "upgrade plan")
    target=${3:-$RELEASE}; policy "$target"
    echo "You can now apply the upgrade by executing the following command:"
    echo "        kubeadm upgrade apply $target" ;;
  "upgrade apply")
    target=$3; policy "$target"
    static_pods "$target"; killed_after control-plane
    upload_config "$target"; killed_after upload-config
    cb_certificates 365; kubelet_config "$target"; killed_after kubelet-config
    kube_proxy "$target"
    echo "[upgrade/successful] SUCCESS! Your cluster was upgraded to \"$target\". Enjoy!" ;;
  "upgrade node")
    if [ -e "$manifests/kube-apiserver.yaml" ]; then
      configured=$(configured_release)
      [ -n "$configured" ] || { echo "unable to fetch the kubeadm-config ConfigMap" >&2; exit 1; }
      static_pods "$configured"; cb_certificates 365
    fi
    kubelet_config "$RELEASE"
    echo "[upgrade] The configuration for this node was successfully upgraded!" ;;
  "certs renew")
    [ -e "$pki/ca.crt" ] || { echo "error: no kubeadm PKI on this node" >&2; exit 1; }
    cb_certificates 365
    echo "Done renewing certificates. You must restart the kube-apiserver, kube-controller-manager," \
      "kube-scheduler and etcd, so that they can use the new certificates." ;;
  "reset "*) rm -rf /etc/kubernetes/*.conf "$manifests" "$pki" /var/lib/cb-standin/etcd-members ;;
  *) echo "kubeadm placeholder $RELEASE" ;;
esac
"""

KUBELET = r"""#!/bin/sh
# Stand-in for the kubelet vRELEASE (tests/lab/kube_acting.py): run as the service, it records the release it
# started with (what its Node reports) and stays up.
RELEASE=vRELEASE
case "${1:-}" in
  --version) echo "Kubernetes $RELEASE"; exit 0 ;;
esac
""" + _RECORD.replace("TOOL", "kubelet") + r"""
echo "$RELEASE" > /var/lib/cb-standin/kubelet-running
cb_record
trap - EXIT
exec sleep infinity
"""

KUBECTL = r"""#!/bin/sh
# Stand-in for kubectl vRELEASE (tests/lab/kube_acting.py).
RELEASE=vRELEASE
""" + _RECORD.replace("TOOL", "kubectl") + r"""
members() { cat /var/lib/cb-standin/etcd-members 2>/dev/null; }
# Whether the machine at ADDRESS answers (its sshd: the stand-ins run no API server or etcd to ask).
answers() { [ -n "$1" ] && timeout 2 bash -c "exec 3<>/dev/tcp/$1/22" 2>/dev/null; }
case "$*" in
  "version --client -o json"|"version --client --output=json")
    echo "{\"clientVersion\":{\"gitVersion\":\"$RELEASE\",\"platform\":\"linux/amd64\"},\"kustomizeVersion\":\"v5.7.1\"}" ;;
  *"get --raw=/readyz"*)
    server=$(echo "$*" | sed -n 's#.*--server https://\([^:/ ]*\).*#\1#p')
    if [ -n "$server" ] && [ "$server" != 127.0.0.1 ]; then
      # Another control plane's API server: it answers while its machine does.
      if answers "$server"; then echo ok; else
        echo "Unable to connect to the server: dial tcp $server:6443: i/o timeout" >&2; exit 1; fi
    elif [ -e /etc/kubernetes/manifests/kube-apiserver.yaml ]; then echo ok; else
      echo "The connection to the server 127.0.0.1:6443 was refused - did you specify the right host or port?" >&2; exit 1; fi ;;
  *" member list "*)
    [ -s /var/lib/cb-standin/etcd-members ] || { echo "Error: context deadline exceeded" >&2; exit 1; }
    printf '{"header":{"cluster_id":1},"members":['; sep=""
    members | while read -r id name address; do
      printf '%s{"ID":%s,"name":"%s","peerURLs":["https://%s:2380"]}' "$sep" "$id" "$name" "$name"; sep=","
    done
    printf ']}\n' ;;
  *" endpoint health"*)
    # etcdctl's `endpoint health [--cluster] -w json`: this member (while its manifest is in place), or with
    # --cluster every member, unhealthy where its machine does not answer (the stand-ins run no etcd); it exits 1
    # when one is unhealthy, as etcdctl does ("unhealthy cluster").
    unhealthy=0; printf '['; sep=""
    for line in $(members | tr ' ' ','); do
      name=$(echo "$line" | cut -d, -f2); address=$(echo "$line" | cut -d, -f3)
      case "$*" in *--cluster*) ;; *) [ "$name" = "$(hostname)" ] || continue ;; esac
      if { [ "$name" = "$(hostname)" ] && [ -e /etc/kubernetes/manifests/etcd.yaml ]; } \
          || { [ "$name" != "$(hostname)" ] && answers "$address"; }; then
        printf '%s{"endpoint":"https://%s:2379","health":true,"took":"9ms"}' "$sep" "$name"
      else
        unhealthy=1
        printf '%s{"endpoint":"https://%s:2379","health":false,"took":"5s","error":"context deadline exceeded"}' \
          "$sep" "$name"
      fi
      sep=","
    done
    printf ']\n'
    [ "$unhealthy" = 0 ] || { echo "Error: unhealthy cluster" >&2; exit 1; } ;;
  *" apply "*) echo "daemonset.apps/calico-node unchanged" ;;
  *) echo "kubectl placeholder $RELEASE" ;;
esac
"""

CRICTL = r"""#!/bin/sh
# Stand-in crictl (tests/lab/kube_acting.py): a control-plane static pod runs, ready, while its manifest is in the
# kubelet's directory.
""" + _RECORD.replace("TOOL", "crictl") + r"""
images=/var/lib/cb-standin/images
case "$*" in
  "pods --label component="*" --state ready -q"|"pods --label app.kubernetes.io/name="*" --state ready -q")
    component=$(echo "$*" | sed 's/.*--label [^=]*=\([^ ]*\).*/\1/')
    [ -e "/etc/kubernetes/manifests/$component.yaml" ] && echo "pod-$component-$(hostname)" ;;
  "inspecti -q "*) grep -qxF "$3" "$images" 2>/dev/null || { echo "no such image \"$3\" present" >&2; exit 1; } ;;
  "pull "*) echo "$2" >> "$images"; echo "Image is up to date for sha256:$(echo "$2" | sha256sum | cut -c1-64)" ;;
esac
exit 0
"""


def kubeadm_script(release: str, images: Sequence[str] = ()) -> str:
    """kubeadm at `release`; `config images list` names `images` (what a bundle build asks it)."""
    return KUBEADM.replace("vRELEASE", f"v{release}").replace("IMAGES", " ".join(images) or "''")


def kubelet_script(release: str) -> str:
    return KUBELET.replace("vRELEASE", f"v{release}")


def kubectl_script(release: str) -> str:
    return KUBECTL.replace("vRELEASE", f"v{release}")
