#!/usr/bin/env bash
# `make demo`: run the supervisor as PID 1 of a new PID namespace on an example
# deployment, let it serve for a few seconds, send SIGTERM as the kubelet
# would, and show the graceful shutdown with its timeline.
set -euo pipefail
cd "$(dirname "$0")/.."
SUPERVISOR=.venv/bin/supervisor
CONFIG=${DEMO_CONFIG:-examples/demo.yaml}
RUN_SECONDS=${DEMO_SECONDS:-4}

bold() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

bold "supervisor check -c $CONFIG"
"$SUPERVISOR" check -c "$CONFIG"

bold "supervisor -c $CONFIG   (PID 1 of a new PID namespace, for ${RUN_SECONDS}s)"
unshare -Urpf --mount-proc --kill-child "$SUPERVISOR" -c "$CONFIG" &
launcher=$!
pid1=""
for _ in $(seq 100); do
    pid1=$(cat "/proc/$launcher/task/$launcher/children" 2>/dev/null | awk '{print $1}')
    [ -n "$pid1" ] && break
    sleep 0.05
done
sleep "$RUN_SECONDS"

bold "kill -TERM <supervisor>   (what the kubelet does when the pod is deleted)"
kill -TERM "$pid1"
status=0
wait "$launcher" || status=$?
bold "supervisor exited with status $status"
