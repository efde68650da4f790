#!/usr/bin/env bash
# The README's two commands on a fresh clone in a fresh container: what a newcomer (and CI) gets.
#
#   .ci/fresh-container.sh [REF] [OUT_DIR]      (root, a running Docker engine: .ci/docker.sh start)
#
# A clone of REF (default HEAD; only committed work) goes into a new container of the registry-free
# base image (ftagent-base:bookworm: Debian + python3 + venv, nothing else). The container gets what a
# machine of this kind has on day one and nothing of this checkout: gcc, make, git and the Python
# headers (installed from Debian), this machine's pip configuration, wheel folders and CA bundle (read
# only), the package registries (--network host). It is privileged (or as near as the engine allows) so that bubblewrap and a Docker
# engine of its own (docker-in-docker, state under OUT_DIR/docker; no bridge, no iptables, since it
# shares the host's network) can run as on a CI machine.
# Then `make demo` and `make test`, each timed; the logs and a summary land in OUT_DIR
# (default /tmp/ftagent-fresh). Nothing outside OUT_DIR is written.
set -euo pipefail
cd "$(dirname "$0")/.."
ref="${1:-HEAD}"; out="${2:-/tmp/ftagent-fresh}"
image="${FTAGENT_FRESH_IMAGE:-ftagent-base:bookworm}"
rm -rf "$out/src"; mkdir -p "$out/docker"
git clone -q --no-hardlinks . "$out/src"; git -C "$out/src" checkout -q "$(git rev-parse "$ref")"
echo "fresh clone of $(git rev-parse --short "$ref") in $out/src; logs: $out/{demo,test}.log"

mounts=()
for p in /opt/wheels /opt/pypi /opt/pypi-more /etc/xdg/pip /etc/pip.conf /root/.config/pip \
         /etc/ssl/certs/ca-certificates.crt; do
  [ -e "$p" ] && mounts+=(-v "$p:$p:ro")
done
envs=()
for v in $(env | grep -oE '^(PIP_[A-Z_]+|SSL_CERT_FILE|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE)=' | tr -d =); do
  envs+=(-e "$v")
done

# --privileged where the engine may grant it; else every capability this host has (this kind of machine
# lacks CAP_SYS_RESOURCE, which --privileged asks for), no seccomp/AppArmor filter, a writable cgroup tree
if docker run --rm --privileged "$image" true 2>/dev/null; then priv=(--privileged)
else priv=(--cap-add ALL --cap-drop SYS_RESOURCE --security-opt seccomp=unconfined --security-opt apparmor=unconfined
           --security-opt systempaths=unconfined --cgroupns host -v /sys/fs/cgroup:/sys/fs/cgroup:rw); fi
docker run --rm "${priv[@]}" --network host --name "ftagent-fresh-$$" \
  "${mounts[@]}" "${envs[@]}" -e PYTEST_ADDOPTS="${PYTEST_ADDOPTS:---durations=40}" \
  -v "$out/src:/src" -v "$out/docker:/var/lib/docker" -v "$out:/out" -w /src "$image" bash -c '
    set -u
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq make git gcc g++ python3-dev >/dev/null
    # the inner engine shares the host network namespace (--network host): it must not touch its
    # bridge or iptables; every ftagent container and build uses the host network anyway
    mkdir -p /etc/docker && echo "{\"iptables\": false, \"ip6tables\": false, \"bridge\": \"none\"}" > /etc/docker/daemon.json
    t0=$(date +%s); make demo > /out/demo.log 2>&1; rc_demo=$?; t1=$(date +%s)
    make test > /out/test.log 2>&1; rc_test=$?; t2=$(date +%s)
    { echo "make demo: rc $rc_demo in $((t1 - t0)) s"; echo "make test: rc $rc_test in $((t2 - t1)) s"
      tail -n 1 /out/test.log; } | tee /out/summary.txt'
