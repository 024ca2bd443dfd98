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
#   2b. The same for images/requirements-cuda-vllm.txt, the image's vLLM venv ($CUDA_VLLM_WHEELHOUSE;
#      manylinux tags up to 2_39, noble's glibc: llguidance ships only manylinux_2_31 wheels).
#      Wheels of the same name already in $CUDA_WHEELHOUSE (torch, nvidia-*) are hard-linked, not
#      downloaded again; pip re-checks their sha256. CUDA_VLLM=0 skips it and builds without vLLM.
#   3. images/cuda built FROM that base (--network host). The wheelhouses are served on
#      127.0.0.1 for the build (pip --no-index --find-links URL), so no wheel stays in a layer.
#      Labelled with the lab sources' sha256 (the launcher refuses an image of other sources).
#
# Idempotent: each step is skipped when its result exists (image, stamp, input hash).
# Needs root (debootstrap), docker, curl, gpg, python3 with pip. Prints each step's duration.
#   bash scripts/build_cuda_local.sh    # CUDA_WHEELHOUSE=/big/disk/wheels to choose the folder,
#                                       # CUDA_WHEEL_PORT=N if 127.0.0.1:8731 (and N+1) is taken
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
set -a; . images/pins.env; set +a
IMAGES_LIB_NAME=build_cuda_local; . scripts/images_lib.sh
CACHE=$ROOT/.cache/docker
CUDA_WHEELHOUSE=${CUDA_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/iteralab/wheelhouse-cuda}
UBUNTU_MIRROR=${UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}
CUDA_VLLM_WHEELHOUSE=${CUDA_VLLM_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/iteralab/wheelhouse-cuda-vllm}
CUDA_VLLM=${CUDA_VLLM:-1}                  # 0: the image without its vLLM venv
[[ "$CUDA_VLLM" == 0 || "$CUDA_VLLM" == 1 ]] || { echo "build_cuda_local: CUDA_VLLM must be 0 or 1, not '$CUDA_VLLM'" >&2; exit 2; }
CUDA_WHEEL_PORT=${CUDA_WHEEL_PORT:-8731}   # where the wheelhouse is served during the build (vLLM's: +1)
# ubuntu-keyring as Ubuntu 24.04 ships it, and the fingerprint of the key that signs noble's
# archive ("Ubuntu Archive Automatic Signing Key (2018) <ftpmaster@ubuntu.com>").
KEYRING_DEB=pool/main/u/ubuntu-keyring/ubuntu-keyring_2023.11.28.1_all.deb
ARCHIVE_KEY_FPR=F6ECB3762474EDA9D21B7022871920D1991BC93C
mkdir -p "$CACHE" "$CUDA_WHEELHOUSE" "$CUDA_VLLM_WHEELHOUSE"
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

# 2. wheelhouses (outside the checkout) -------------------------------------------------
# download_wheels REQUIREMENTS DIR GLIBC_MINOR: every wheel of REQUIREMENTS into DIR for the
# image's interpreter, not this host's: CPython 3.12, manylinux x86_64 tags up to
# manylinux_2_GLIBC_MINOR. pip refuses a file whose sha256 is not the pinned one. Skipped when
# DIR's stamp holds REQUIREMENTS' sha256.
download_wheels() {
    local req=$1 dir=$2 top=$3 req_sha plats=() g
    req_sha=$(sha256sum "$req" | cut -c1-64)
    if [[ "$(cat "$dir/.stamp" 2>/dev/null)" != "$req_sha" ]]; then
        for g in $(seq "$top" -1 17) 12 5; do plats+=(--platform "manylinux_2_${g}_x86_64"); done
        plats+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
        python3 -m pip download -q --no-deps --only-binary=:all: --require-hashes \
            --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none "${plats[@]}" \
            --platform any -r "$req" -d "$dir" \
            2> >(grep -v "^WARNING: Location 'file:" >&2)
        echo "$req_sha" >"$dir/.stamp"
    fi
    wheelhouse_summary "$dir"
}
step "wheelhouse $CUDA_WHEELHOUSE"
download_wheels images/requirements-cuda.txt "$CUDA_WHEELHOUSE" 28
done_step
if [[ "$CUDA_VLLM" == 1 ]]; then
    step "wheelhouse $CUDA_VLLM_WHEELHOUSE (the vLLM venv)"
    # hard-link (or copy) the wheels both files pin at the same version
    python3 - images/requirements-cuda-vllm.txt "$CUDA_WHEELHOUSE" "$CUDA_VLLM_WHEELHOUSE" <<'EOF'
import os, re, shutil, sys
req, src, dst = sys.argv[1:]
norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()
pinned = {(norm(n), v) for n, v in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", open(req).read(), re.M)}
for f in sorted(os.listdir(src)):
    name, version = (f.split("-") + [""])[:2]
    if f.endswith(".whl") and (norm(name), version) in pinned and not os.path.exists(os.path.join(dst, f)):
        try:
            os.link(os.path.join(src, f), os.path.join(dst, f))
        except OSError:
            shutil.copy2(os.path.join(src, f), os.path.join(dst, f))
EOF
    download_wheels images/requirements-cuda-vllm.txt "$CUDA_VLLM_WHEELHOUSE" 39
    done_step
fi

# 3. CUDA image -------------------------------------------------------------------------
step "image $CUDA_IMAGE from $LOCAL_CUDA_BASE_IMAGE"
inputs=$(image_inputs "$LOCAL_CUDA_BASE_IMAGE" images/cuda/Dockerfile images/requirements-cuda.txt \
         images/requirements-cuda-vllm.txt pyproject.toml <(echo "CUDA_VLLM=$CUDA_VLLM"))
if ! image_is_current "$CUDA_IMAGE" "$inputs"; then
    # A fixed port: WHEEL_URL is part of the build cache key, so the same URL lets a build
    # where only lab/ changed reuse the venv layer (seconds, not minutes).
    port=$CUDA_WHEEL_PORT vport=$((CUDA_WHEEL_PORT + 1))
    servers=()
    trap 'kill "${servers[@]}" 2>/dev/null || true' EXIT
    serve() {  # serve DIR PORT: DIR on http://127.0.0.1:PORT/ until this script ends
        if curl -s -o /dev/null "http://127.0.0.1:$2/" 2>/dev/null; then
            echo "build_cuda_local: port $2 on 127.0.0.1 is taken; set CUDA_WHEEL_PORT to a free one (it uses N and N+1)" >&2; exit 2
        fi
        python3 -m http.server --bind 127.0.0.1 --directory "$1" "$2" >"$CACHE/wheel-server-$2.log" 2>&1 &
        servers+=($!)
        for _ in $(seq 1 50); do curl -fsS -o /dev/null "http://127.0.0.1:$2/" 2>/dev/null && break; sleep 0.1; done
        curl -fsS -o /dev/null "http://127.0.0.1:$2/" \
            || { echo "build_cuda_local: the wheel server did not answer; see $CACHE/wheel-server-$2.log" >&2; exit 1; }
    }
    serve "$CUDA_WHEELHOUSE" "$port"
    [[ "$CUDA_VLLM" == 0 ]] || serve "$CUDA_VLLM_WHEELHOUSE" "$vport"
    # The context is a tar stream of exactly what the Dockerfile needs (no .venv, no runs/).
    tar -C "$ROOT" --exclude=__pycache__ --exclude='*.pyc' \
        -cf - images/cuda/Dockerfile images/requirements-cuda.txt images/requirements-cuda-vllm.txt pyproject.toml lab \
      | quiet_build -f images/cuda/Dockerfile \
          --build-arg BASE_IMAGE="$LOCAL_CUDA_BASE_IMAGE" --build-arg WHEEL_URL="http://127.0.0.1:$port/" \
          --build-arg WITH_VLLM="$CUDA_VLLM" --build-arg VLLM_WHEEL_URL="http://127.0.0.1:$vport/" \
          --label iteralab.inputs="$inputs" -t "$CUDA_IMAGE"
    kill "${servers[@]}" 2>/dev/null || true; trap - EXIT
    # the previous build of this image, now untagged (only CUDA images this script labelled)
    docker image prune -f --filter label=iteralab.inputs --filter label=iteralab.kind=cuda >/dev/null
fi
docker image inspect "$CUDA_IMAGE" --format '   {{.Id}} {{.Size}} bytes'
done_step
