#!/usr/bin/env bash
# Build the pass image for this host's GPU vendor (or the one named: cpu, nvidia, rocm).
# NVIDIA and AMD rentals pull the pinned base image from its registry; where no registry is
# reachable (CI, development) the CPU image is built by scripts/ci_docker.sh instead, and the
# CUDA image by scripts/build_cuda_local.sh (same Dockerfile, a debootstrap'd Ubuntu base).
#   bash scripts/build_image.sh [cpu|nvidia|rocm]      (make images VENDOR=nvidia)
set -euo pipefail
cd "$(dirname "$0")/.."
vendor=${1:-}
if [ -z "$vendor" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 || [ -e /dev/nvidiactl ]; then vendor=nvidia
  elif [ -e /dev/kfd ]; then vendor=rocm
  else vendor=cpu; fi
fi
set -a; . images/pins.env; set +a
case "$vendor" in
  nvidia)
    if docker image inspect "$CUDA_BASE_IMAGE" >/dev/null 2>&1 || docker pull -q "$CUDA_BASE_IMAGE" >/dev/null 2>&1; then
      base=$CUDA_BASE_IMAGE; tag=$CUDA_IMAGE; file=images/cuda/Dockerfile
    else
      echo "NVIDIA's registry is not reachable: building the CUDA image from a local Ubuntu base"
      exec bash scripts/build_cuda_local.sh
    fi ;;
  rocm)   base=$ROCM_BASE_IMAGE; tag=$ROCM_IMAGE; file=images/rocm/Dockerfile ;;
  cpu)
    if docker pull -q "$CPU_BASE_IMAGE" >/dev/null 2>&1; then
      base=$CPU_BASE_IMAGE; tag=$CPU_IMAGE; file=images/cpu/Dockerfile
    else
      echo "no registry reachable: building the CPU image from a local debootstrap base"
      exec bash scripts/ci_docker.sh
    fi ;;
  *) echo "build_image.sh: unknown vendor '$vendor'; use cpu, nvidia or rocm" >&2; exit 2 ;;
esac
echo "building $tag from $base ($file)"
# labelled with the lab sources' sha256: the launcher refuses an image built from another version
docker build --build-arg BASE_IMAGE="$base" --label iteralab.lab-sha256="$(python3 -m lab.facts.files)" \
  -f "$file" -t "$tag" .
