#!/usr/bin/env bash
# Prepared GPU check (issue 13, part 6): confirms the CUDA path on a lent device or a rental
# in one command (about 5-12 minutes on one GPU; each step has its own time limit):
#   1. the demo campaign with device = "cuda", plus a precision series (fp32 and bf16);
#   2. the memory lab on cuda (what `make memory` runs, with --device cuda);
#   3. one pass that must run out of GPU memory (a batch sized from the card's memory, at
#      max_length 512), kept as a failure row with its items completed;
#   4. a vLLM series (engine = ["transformers", "vllm"], batch 8), when the vLLM venv is there;
#   5. a server series (issue 36): the native demo generator served by vLLM's server at 8 and 32
#      req/s, 200 requests each, judged against an offline reference, when the vLLM venv and
#      `make model-gen-native` are there and 240 s of the budget are left (GPU_CHECK_BUDGET_S,
#      default 840: set it below a shorter limit, e.g. 540 under a 600 s one);
# then prints ONE verdict line (scripts/gpu_check.py). Outputs under runs/gpu_check/.
# Without a CUDA GPU it says so in one line on stderr and exits 2 within seconds; exit 1 = checks failed.
#   bash scripts/gpu_check.sh            # PYTHON=... to use another interpreter (needs CUDA torch)
#   GPU_CHECK_REPETITIONS=2 (default) passes per variant
set -uo pipefail
case "${1:-}" in
  -h|--help)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"  # the whole header comment
    echo "usage: bash scripts/gpu_check.sh   (no options; exit 0 = checks passed, 1 = checks failed, 2 = no usable CUDA GPU)"
    exit 0 ;;
  "") ;;
  *)
    echo "gpu_check: unknown argument $1; it takes none (see bash scripts/gpu_check.sh --help)" >&2
    exit 2 ;;
esac
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! timeout 10 nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no CUDA GPU on this host (nvidia-smi missing or lists no GPU); nothing checked" >&2
  exit 2
fi
if ! timeout 60 "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() and not torch.version.hip else 1)" 2>/dev/null; then
  echo "gpu_check: nvidia-smi sees a GPU but $PY's torch cannot use it (CPU build or driver mismatch); set PYTHON to a CUDA build of torch or run inside the cuda image" >&2
  exit 2
fi
exec timeout 900 "$PY" scripts/gpu_check.py "$@"
