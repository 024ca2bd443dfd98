#!/usr/bin/env bash
# Build the CUDA pass image (images/cuda/Dockerfile, tag $CUDA_IMAGE) on a host that cannot
# pull NVIDIA's base image (no registry; issue 21 part 7). Same Dockerfile and same hashed
# requirements as on a rental; only the base differs:
#
#   1. Base $LOCAL_CUDA_BASE_IMAGE without any registry: Ubuntu 24.04 (noble, CPython 3.12,
#      the NVIDIA base's OS and Python) with debootstrap (minbase) + `docker import`. The
#      Ubuntu archive keyring comes from Ubuntu's pool; its 2018 archive key is checked by
#      fingerprint before debootstrap trusts it.
#   2. A wheelhouse of every wheel of images/requirements-cuda.txt (`pip download
#      --require-hashes`: pip refuses a file whose sha256 differs from the pinned one), kept
#      OUTSIDE the checkout ($CUDA_WHEELHOUSE; several GB: torch's CUDA 13.0 build and the
#      nvidia-* runtime wheels that carry cuBLAS, cuDNN, NCCL... into the venv, which is how
#      PyPI's torch runs without a CUDA base image).
#   3. images/cuda built FROM that base (--network host). The wheelhouse is served on
#      127.0.0.1 for the build (pip --no-index --find-links URL), so no wheel stays in a layer.
#      Labelled with the lab sources' sha256 (the launcher refuses an image of other sources).
#
# Idempotent: each step is skipped when its result exists (image, stamp, input hash).
# Needs root (debootstrap), docker, curl, gpg, python3 with pip. Prints each step's duration.
#   bash scripts/build_cuda_local.sh    # CUDA_WHEELHOUSE=/big/disk/wheels to choose the folder,
#                                       # CUDA_WHEEL_PORT=N if 127.0.0.1:8731 is taken
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
set -a; . images/pins.env; set +a
IMAGES_LIB_NAME=build_cuda_local; . scripts/images_lib.sh
CACHE=$ROOT/.cache/docker
CUDA_WHEELHOUSE=${CUDA_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/iteralab/wheelhouse-cuda}
UBUNTU_MIRROR=${UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}
CUDA_WHEEL_PORT=${CUDA_WHEEL_PORT:-8731}   # where the wheelhouse is served during the build
# ubuntu-keyring as Ubuntu 24.04 ships it, and the fingerprint of the key that signs noble's
# archive ("Ubuntu Archive Automatic Signing Key (2018) <ftpmaster@ubuntu.com>").
KEYRING_DEB=pool/main/u/ubuntu-keyring/ubuntu-keyring_2023.11.28.1_all.deb
ARCHIVE_KEY_FPR=F6ECB3762474EDA9D21B7022871920D1991BC93C
mkdir -p "$CACHE" "$CUDA_WHEELHOUSE"
export DOCKER_BUILDKIT=0   # Debian's engine has no buildx; the classic builder is enough here
docker info >/dev/null 2>&1 || { echo "build_cuda_local: no Docker engine answers; start dockerd (scripts/ci_docker.sh does)" >&2; exit 2; }

# 1. Ubuntu noble base without a registry -----------------------------------------------
step "base image $LOCAL_CUDA_BASE_IMAGE (Ubuntu noble, debootstrap)"
if ! docker image inspect "$LOCAL_CUDA_BASE_IMAGE" >/dev/null 2>&1; then
    command -v debootstrap >/dev/null || { echo "build_cuda_local: debootstrap missing (apt-get install debootstrap)" >&2; exit 2; }
    work=$(mktemp -d "${TMPDIR:-/var/tmp}/iteralab-noble.XXXXXX")
    rootfs=$work/rootfs
    cleanup_rootfs() { unmount_rootfs "$rootfs"; rm -rf --one-file-system "$work"; }
    trap cleanup_rootfs EXIT
    curl -fsS --retry 3 -o "$work/keyring.deb" "$UBUNTU_MIRROR/$KEYRING_DEB"
    dpkg-deb -x "$work/keyring.deb" "$work/keyring"
    keyring=$work/keyring/usr/share/keyrings/ubuntu-archive-keyring.gpg
    mkdir -m 700 "$work/gnupg"
    GNUPGHOME=$work/gnupg gpg --batch --show-keys --with-colons "$keyring" 2>/dev/null \
        | grep -q "^fpr:.*:$ARCHIVE_KEY_FPR:" \
        || { echo "build_cuda_local: $KEYRING_DEB lacks archive key $ARCHIVE_KEY_FPR; not trusting it" >&2; exit 1; }
    # Debian's debootstrap may lack a script named noble; Ubuntu's suites all use the gutsy one.
    script=/usr/share/debootstrap/scripts/noble
    [ -e "$script" ] || script=/usr/share/debootstrap/scripts/gutsy
    debootstrap --variant=minbase --keyring="$keyring" --components=main,universe \
        --include=python3,python3-venv,ca-certificates \
        noble "$rootfs" "$UBUNTU_MIRROR" "$script" >"$CACHE/debootstrap-noble.log" 2>&1 \
        || { echo "debootstrap failed; see $CACHE/debootstrap-noble.log" >&2; exit 1; }
    import_rootfs "$rootfs" "$LOCAL_CUDA_BASE_IMAGE"
    cleanup_rootfs; trap - EXIT
fi
docker image inspect "$LOCAL_CUDA_BASE_IMAGE" --format '   {{.Id}} {{.Size}} bytes'
done_step

# 2. wheelhouse (outside the checkout) --------------------------------------------------
step "wheelhouse $CUDA_WHEELHOUSE"
req_sha=$(sha256sum images/requirements-cuda.txt | cut -c1-64)
if [[ "$(cat "$CUDA_WHEELHOUSE/.stamp" 2>/dev/null)" != "$req_sha" ]]; then
    # The image's interpreter, not this host's: CPython 3.12, manylinux x86_64 (every tag the file names).
    plats=()
    for p in manylinux_2_28 manylinux_2_27 manylinux_2_25 manylinux_2_24 manylinux_2_18 manylinux_2_17 \
             manylinux2014 manylinux_2_12 manylinux2010 manylinux_2_5 manylinux1; do
        plats+=(--platform "${p}_x86_64")
    done
    python3 -m pip download -q --no-deps --only-binary=:all: --require-hashes \
        --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none "${plats[@]}" \
        --platform any -r images/requirements-cuda.txt -d "$CUDA_WHEELHOUSE" \
        2> >(grep -v "^WARNING: Location 'file:" >&2)
    echo "$req_sha" >"$CUDA_WHEELHOUSE/.stamp"
fi
wheelhouse_summary "$CUDA_WHEELHOUSE"
done_step

# 3. CUDA image -------------------------------------------------------------------------
step "image $CUDA_IMAGE from $LOCAL_CUDA_BASE_IMAGE"
inputs=$(image_inputs "$LOCAL_CUDA_BASE_IMAGE" images/cuda/Dockerfile images/requirements-cuda.txt pyproject.toml)
if ! image_is_current "$CUDA_IMAGE" "$inputs"; then
    # A fixed port: WHEEL_URL is part of the build cache key, so the same URL lets a build
    # where only lab/ changed reuse the venv layer (seconds, not minutes).
    port=$CUDA_WHEEL_PORT
    if curl -s -o /dev/null "http://127.0.0.1:$port/" 2>/dev/null; then
        echo "build_cuda_local: port $port on 127.0.0.1 is taken; set CUDA_WHEEL_PORT to a free one" >&2; exit 2
    fi
    python3 -m http.server --bind 127.0.0.1 --directory "$CUDA_WHEELHOUSE" "$port" >"$CACHE/wheel-server.log" 2>&1 &
    server=$!
    trap 'kill "$server" 2>/dev/null || true' EXIT
    for _ in $(seq 1 50); do curl -fsS -o /dev/null "http://127.0.0.1:$port/" 2>/dev/null && break; sleep 0.1; done
    curl -fsS -o /dev/null "http://127.0.0.1:$port/" \
        || { echo "build_cuda_local: the wheel server did not answer; see $CACHE/wheel-server.log" >&2; exit 1; }
    # The context is a tar stream of exactly what the Dockerfile needs (no .venv, no runs/).
    tar -C "$ROOT" --exclude=__pycache__ --exclude='*.pyc' \
        -cf - images/cuda/Dockerfile images/requirements-cuda.txt pyproject.toml lab \
      | quiet_build -f images/cuda/Dockerfile \
          --build-arg BASE_IMAGE="$LOCAL_CUDA_BASE_IMAGE" --build-arg WHEEL_URL="http://127.0.0.1:$port/" \
          --label iteralab.inputs="$inputs" -t "$CUDA_IMAGE"
    kill "$server" 2>/dev/null || true; trap - EXIT
    # the previous build of this image, now untagged (only CUDA images this script labelled)
    docker image prune -f --filter label=iteralab.inputs --filter label=iteralab.kind=cuda >/dev/null
fi
docker image inspect "$CUDA_IMAGE" --format '   {{.Id}} {{.Size}} bytes'
done_step
