#!/usr/bin/env bash
# Prepare a real Docker engine and the CPU image for the container tests, on a machine
# with no image registry (CI, development; ../shared/CONTAINERS-HERE.md).
#
#   1. Debian's docker.io and debootstrap (apt-get), if missing.
#   2. dockerd in the background, if `docker info` does not answer; left running.
#   3. The base image $LOCAL_BASE_IMAGE without any registry: debootstrap (minbase,
#      bookworm, python3 + venv + pip) with this machine's CA bundle as pip's `cert`,
#      then `docker import`.
#   4. A wheelhouse under .cache/wheelhouse: the torch CPU wheel from /opt/wheels and
#      the other wheels of images/requirements-cpu.txt (`pip download`, hash-checked).
#   5. images/cpu built FROM that base with the wheelhouse (--network host).
# Idempotent: each step is skipped when its result exists (image, stamp, input hash).
# Needs root (apt, dockerd, debootstrap). Prints each step's duration.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
set -a; . images/pins.env; set +a
IMAGES_LIB_NAME=ci_docker; . scripts/images_lib.sh
CACHE=$ROOT/.cache/docker
WHEELHOUSE=$ROOT/.cache/wheelhouse
TORCH_WHEEL_DIR=${TORCH_WHEEL_DIR:-/opt/wheels}
mkdir -p "$CACHE" "$WHEELHOUSE"
export DOCKER_BUILDKIT=0   # Debian's engine has no buildx; the classic builder is enough here

# 1. packages ---------------------------------------------------------------------------
step "engine and debootstrap packages"
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if ((${#missing[@]})); then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
done_step

# 2. engine -----------------------------------------------------------------------------
step "docker engine"
if ! docker info >/dev/null 2>&1; then
    nohup dockerd >"$CACHE/dockerd.log" 2>&1 &
    echo $! >"$CACHE/dockerd.pid"
    for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
    docker info >/dev/null 2>&1 || { echo "dockerd did not answer; see $CACHE/dockerd.log" >&2; exit 1; }
    echo "   started dockerd, pid $(cat "$CACHE/dockerd.pid") (left running for the tests)"
fi
docker version --format '   engine {{.Server.Version}}, API {{.Server.APIVersion}}'
done_step

# 3. base image without a registry ------------------------------------------------------
step "base image $LOCAL_BASE_IMAGE"
if ! docker image inspect "$LOCAL_BASE_IMAGE" >/dev/null 2>&1; then
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    mirror=${mirror:-http://deb.debian.org/debian}
    ca=$(python3 -m pip config get global.cert 2>/dev/null || true)
    ca=${ca:-${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}}
    rootfs=$(mktemp -d "${TMPDIR:-/var/tmp}/iteralab-rootfs.XXXXXX")
    # debootstrap mounts /proc and /sys inside the rootfs: unmount before any removal.
    cleanup_rootfs() { unmount_rootfs "$rootfs"; rm -rf --one-file-system "$rootfs"; }
    trap cleanup_rootfs EXIT
    debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
        bookworm "$rootfs" "$mirror" >"$CACHE/debootstrap.log" 2>&1 \
        || { echo "debootstrap failed; see $CACHE/debootstrap.log" >&2; exit 1; }
    cp "$ca" "$rootfs/etc/ssl/certs/iteralab-host-ca.pem"
    printf '[global]\ncert = /etc/ssl/certs/iteralab-host-ca.pem\n' >"$rootfs/etc/pip.conf"
    import_rootfs "$rootfs" "$LOCAL_BASE_IMAGE"
    cleanup_rootfs; trap - EXIT
fi
docker image inspect "$LOCAL_BASE_IMAGE" --format '   {{.Id}} {{.Size}} bytes'
done_step

# 4. wheelhouse -------------------------------------------------------------------------
step "wheelhouse $WHEELHOUSE"
req_sha=$(sha256sum images/requirements-cpu.txt | cut -c1-64)
if [[ "$(cat "$WHEELHOUSE/.stamp" 2>/dev/null)" != "$req_sha" ]]; then
    cp -n "$TORCH_WHEEL_DIR"/torch-2.13.0+cpu-*.whl "$WHEELHOUSE/" 2>/dev/null || true
    PIP_FIND_LINKS="$WHEELHOUSE $TORCH_WHEEL_DIR" python3 -m pip download -q --no-deps \
        --only-binary=:all: --require-hashes -r images/requirements-cpu.txt -d "$WHEELHOUSE" \
        2> >(grep -v "^WARNING: Location 'file:" >&2)
    echo "$req_sha" >"$WHEELHOUSE/.stamp"
fi
wheelhouse_summary "$WHEELHOUSE"
done_step

# 5. CPU image --------------------------------------------------------------------------
step "image $CPU_IMAGE from $LOCAL_BASE_IMAGE"
inputs=$(image_inputs "$LOCAL_BASE_IMAGE" images/cpu/Dockerfile images/requirements-cpu.txt pyproject.toml)
if ! image_is_current "$CPU_IMAGE" "$inputs"; then
    # The context is a tar stream of exactly what the Dockerfile needs (no .venv, no runs/).
    tar -C "$ROOT" --exclude=__pycache__ --exclude='*.pyc' \
        --transform 's,^\.cache/wheelhouse,wheelhouse,' \
        -cf - images/cpu/Dockerfile images/requirements-cpu.txt pyproject.toml lab .cache/wheelhouse \
      | quiet_build -f images/cpu/Dockerfile \
          --build-arg BASE_IMAGE="$LOCAL_BASE_IMAGE" --build-arg WHEELHOUSE=wheelhouse \
          --label iteralab.inputs="$inputs" -t "$CPU_IMAGE"
    # the previous build of this image, now untagged (only images this script labelled)
    docker image prune -f --filter label=iteralab.inputs >/dev/null
fi
docker image inspect "$CPU_IMAGE" --format '   {{.Id}} {{.Size}} bytes'
done_step
