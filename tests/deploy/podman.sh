#!/usr/bin/env bash
# tests/deploy/podman.sh: builds the Dockerfile with buildah and serves a
# completion from the container with podman (recipe: ENVIRONMENT.md).
#
#   tests/deploy/podman.sh            # from anywhere; exit 77 = skipped
#
# Steps: debootstrap a bookworm minbase root from the mirror apt already
# uses (tests/deploy/apt-mirror.sh; cached in $STRATA_CTR_DIR,
# default /tmp/strata-ctr) and import it as debian:bookworm-slim and
# debian:bookworm (no registry can be reached here); buildah bud
# --isolation chroot; podman run --network host with explicit ulimits and
# --cpus 1, stories260K mounted read-only at /models; /health, /status
# (threads from the cgroup quota), a completion, the image HEALTHCHECK,
# non-root user; podman stop (SIGTERM) and exit status 0.
# Slow: debootstrap ~2 min and the image build several minutes on a 2-core box
# (first run); later runs reuse the cached base image.
# Skipped (77) without podman/buildah/debootstrap/runc or without root.
# Prints `RESULT container: N passed, M failed`.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
shared=${STRATA_SHARED_DIR:-$src/../shared}
model_dir=$(cd "$shared/models" 2>/dev/null && pwd) || model_dir=""

for t in podman buildah debootstrap runc curl python3; do
    if ! command -v "$t" >/dev/null; then
        echo "$t not installed (apt-get install -y podman buildah debootstrap runc): skipped"
        exit 77
    fi
done
if [ "$(id -u)" != 0 ]; then
    echo "needs root (debootstrap, rootful podman): skipped"
    exit 77
fi
if [ -z "$model_dir" ] || [ ! -f "$model_dir/stories260K.gguf" ]; then
    echo "missing $shared/models/stories260K.gguf (set STRATA_SHARED_DIR)"
    echo "RESULT container: 0 passed, 1 failed"
    exit 1
fi

ctr=${STRATA_CTR_DIR:-/tmp/strata-ctr}
S=(--root "$ctr/root" --runroot "$ctr/run" --storage-driver vfs)
P=(podman "${S[@]}" --cgroup-manager cgroupfs --events-backend file --runtime runc)
name="strata-test-$$"
passed=0
failed=0
t0=$(date +%s)
check() { # check NAME COND-EXIT-STATUS [DETAIL]
    if [ "$2" = 0 ]; then
        passed=$((passed + 1))
        echo "ok   $1"
    else
        failed=$((failed + 1))
        echo "FAIL $1 ${3:-}"
    fi
}
finish() {
    "${P[@]}" rm -f "$name" >/dev/null 2>&1
    echo "container test took $(($(date +%s) - t0)) s"
    echo "RESULT container: $passed passed, $failed failed"
    [ "$failed" = 0 ]
    exit $?
}
trap finish EXIT
mkdir -p "$ctr"

# 1. base image: debootstrap once, import under both names the Dockerfile uses
if ! "${P[@]}" image exists docker.io/library/debian:bookworm-slim; then
    if [ ! -x "$ctr/rootfs/usr/bin/apt-get" ]; then
        rm -rf "$ctr/rootfs"
        # the mirror this machine's apt uses (ENVIRONMENT.md), not a fixed host
        mirror=$("$here/apt-mirror.sh") || {
            echo "no apt mirror configured: skipped"
            trap - EXIT
            exit 77
        }
        debootstrap --variant=minbase bookworm "$ctr/rootfs" "$mirror" \
            >"$ctr/debootstrap.log" 2>&1
        check "debootstrap bookworm" $? "(see $ctr/debootstrap.log)"
    fi
    tar -C "$ctr/rootfs" -c . | "${P[@]}" import --change 'CMD ["bash"]' - \
        docker.io/library/debian:bookworm-slim >/dev/null
    check "import base image" $?
fi
"${P[@]}" tag docker.io/library/debian:bookworm-slim docker.io/library/debian:bookworm

# 2. build (docker format keeps HEALTHCHECK; OCI drops it)
tb=$(date +%s)
buildah "${S[@]}" bud --isolation chroot --pull=false --format docker -t localhost/strata \
    -f "$src/Dockerfile" "$src" >"$ctr/build.log" 2>&1
rc=$?
echo "image build took $(($(date +%s) - tb)) s"
check "buildah bud" $rc "$(tail -20 "$ctr/build.log")"
[ $rc = 0 ] || exit 1

# 3. run: a free port on the host network, the model read-only at /models
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"${P[@]}" run -d --name "$name" --network host --cpus 1 \
    --ulimit nofile=20000:20000 --ulimit nproc=1024:1024 \
    -v "$model_dir:/models:ro" -e STRATA_MODEL=/models/stories260K.gguf -e STRATA_PORT="$port" \
    localhost/strata >/dev/null 2>"$ctr/run.log"
check "podman run" $? "$(cat "$ctr/run.log")" # (without systemd podman logs timer errors there)
code=000
for _ in $(seq 1 120); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")
    [ "$code" = 200 ] && break
    sleep 0.5
done
check "/health 200" "$([ "$code" = 200 ]; echo $?)" "(last $code; logs: $("${P[@]}" logs "$name" 2>&1 | tail -5))"

status=$(curl -s "http://127.0.0.1:$port/status")
python3 - "$status" <<'PY'
import json, sys
t = json.loads(sys.argv[1])["threads"]
sys.exit(0 if t["effective"] == 1 and t["source"] == "cgroup" else 1)
PY
check "/status threads from the --cpus 1 quota" $? "$status"

body='{"model":"stories260K","prompt":"Once upon a time","max_tokens":12,"temperature":0}'
resp=$(curl -s -H 'Content-Type: application/json' -d "$body" "http://127.0.0.1:$port/v1/completions")
python3 - "$resp" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
text = r["choices"][0]["text"]
print("completion:", repr(text))
sys.exit(0 if len(text) > 0 and r["usage"]["completion_tokens"] > 0 else 1)
PY
check "completion served" $? "$resp"

uid=$("${P[@]}" exec "$name" id -u 2>&1)
check "runs as non-root (uid $uid)" "$([ "$uid" != 0 ] && [ -n "$uid" ]; echo $?)"
"${P[@]}" healthcheck run "$name" >/dev/null 2>&1
check "image HEALTHCHECK passes" $?

# 4. stop: SIGTERM (STOPSIGNAL), drain, exit 0
"${P[@]}" stop -t 30 "$name" >/dev/null 2>>"$ctr/run.log"
check "podman stop" $?
ec=$("${P[@]}" inspect --format '{{.State.ExitCode}}' "$name")
check "exit status 0 after SIGTERM" "$([ "$ec" = 0 ]; echo $?)" "(got $ec; $("${P[@]}" logs "$name" 2>&1 | tail -5))"
"${P[@]}" logs "$name" 2>&1 | grep -q "draining"
check "drained on SIGTERM" $?
