#!/usr/bin/env bash
# Run a command with a Docker engine and the tool images when this machine can have them.
#
#   .ci/with-docker.sh CMD...
#
# .ci/docker.sh start installs docker.io (root + apt-get), starts dockerd when no engine answers and
# builds the registry-free base image and the tool image (content-hashed: unchanged = not rebuilt).
# With an engine, FTAGENT_REQUIRE_DOCKER=1 makes the Docker tests fail instead of skipping; without
# one they skip with the reason. A dockerd started here is stopped again at the end.
# FTAGENT_DOCKER=0 skips the engine (the Docker tests then skip).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${FTAGENT_DOCKER:-1}" != 0 ]; then
  trap 'bash .ci/docker.sh stop >/dev/null' EXIT
  if bash .ci/docker.sh start; then
    export FTAGENT_REQUIRE_DOCKER=1
  else
    echo "docker: no engine here; the Docker tests will skip with the reason"
  fi
fi
"$@"
