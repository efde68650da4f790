#!/usr/bin/env bash
# Everything CI needs for the Docker runner; idempotent, safe to call again.
#
#   .ci/docker.sh [start]   install docker.io + debootstrap when missing, start dockerd in the background
#                           when no engine answers, build the local base image (debootstrap, no registry)
#                           when absent, then the tool image (`ftagent env build-images`, content-hashed:
#                           an unchanged Dockerfile/pin set is not rebuilt). Exit 0 = the Docker tests can run.
#   .ci/docker.sh stop      stop the dockerd this script started (nothing else)
#   .ci/docker.sh plan      say what `start` would install, start and build (make test prints it first)
#
# Needs .venv (make dev). Logs: /tmp/ftagent-dockerd.log (engine), FT_FILE_PATH/docker/build-*.log (image).
set -euo pipefail
cd "$(dirname "$0")/.."
PIDFILE="${FTAGENT_DOCKERD_PIDFILE:-/tmp/ftagent-dockerd.pid}"
DLOG=/tmp/ftagent-dockerd.log

engine_up() { docker info >/dev/null 2>&1; }

stop_dockerd() {
  if [ -f "$PIDFILE" ]; then
    pid="$(cat "$PIDFILE")"
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid"
      for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
      echo "docker: stopped dockerd (pid $pid)"
    fi
    rm -f "$PIDFILE"
  else
    echo "docker: no dockerd started by .ci/docker.sh"
  fi
}

if [ "${1:-start}" = stop ]; then stop_dockerd; exit 0; fi

if [ "${1:-start}" = plan ]; then  # what `start` would install, start and build; nothing is done
  if [ "${FTAGENT_DOCKER:-1}" = 0 ]; then
    echo "docker: FTAGENT_DOCKER=0: no engine, no images (the Docker tests skip)"; exit 0
  fi
  need=()
  command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
  if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "docker: will apt-get install as root: ${need[*]}"
  fi
  engine_up || echo "docker: will start dockerd as root in the background where it can (stopped after the tests)"
  echo "docker: will build the images ftagent-base:bookworm (debootstrap) and ftagent-tools (about 3 GB) when absent"
  echo "docker: FTAGENT_DOCKER=0 skips the engine and the images (the Docker tests then skip)"
  exit 0
fi

start=$(date +%s)
# 1. the engine and debootstrap
need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "docker: apt-get install ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null \
      || { echo "docker: cannot install ${need[*]}; the Docker tests will skip"; exit 1; }
  elif ! command -v docker >/dev/null 2>&1; then
    echo "docker: no docker and no root/apt-get to install it; the Docker tests will skip"; exit 1
  fi
fi

# 2. a running engine
if ! engine_up; then
  if ! command -v dockerd >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
    echo "docker: no engine answers and dockerd cannot be started here; the Docker tests will skip"; exit 1
  fi
  echo "docker: starting dockerd in the background (log: $DLOG)"
  nohup dockerd >"$DLOG" 2>&1 &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 60); do engine_up && break; sleep 1; done
  if ! engine_up; then
    tail -20 "$DLOG" >&2
    stop_dockerd
    echo "docker: dockerd did not come up; the Docker tests will skip"; exit 1
  fi
  echo "docker: engine up; stop it with: .ci/docker.sh stop   (or: kill \$(cat $PIDFILE))"
fi

# 3. the base image: the local debootstrap one (no registry needed) unless FT_DOCKER_BASE_IMAGE names another
if [ -z "${FT_DOCKER_BASE_IMAGE:-}" ]; then
  nice -n 10 docker/base/build-base.sh ftagent-base:bookworm
fi

# 4. the tool image (content-hashed tag: skipped when current)
nice -n 10 .venv/bin/ftagent env build-images --quiet
docker image ls ftagent-tools --format '{{.Repository}}:{{.Tag}} {{.Size}}'
echo "docker: ready in $(( $(date +%s) - start ))s"
