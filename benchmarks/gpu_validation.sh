#!/usr/bin/env bash
# The GPU validation in one command: check the environment, then run benchmarks/gpu_validation.py
# under a hard time limit (meter truth, the traps at 7B, then the rest; each part written as it
# ends), and print its one summary.
#
#   bash benchmarks/gpu_validation.sh OUT_DIR [--tiny] [more gpu_validation.py options]
#
# Environment: PYTHON (default python3), GPU_VALIDATION_LIMIT_S (default 470; the script's own
# limit, after which the running cell is cut and the summary written; this wrapper kills it 60 s
# later if it has not ended). Exit status: the script's (0 all parts ran, 1 a part failed or no
# cell was measured, 2 the environment cannot run it, 130 cut short), or 124 if killed here.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then
  echo "usage: bash benchmarks/gpu_validation.sh OUT_DIR [--tiny] [options]" >&2
  exit 2
fi
out="$1"
shift
python="${PYTHON:-python3}"
limit="${GPU_VALIDATION_LIMIT_S:-470}"
tiny=0
for arg in "$@"; do [ "$arg" = "--tiny" ] && tiny=1; done
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"

echo "== environment"
if [ "$tiny" = 0 ]; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,power.limit --format=csv,noheader
  else
    echo "nvidia-smi: not found (no NVIDIA driver?); --tiny runs on the CPU with a fake driver" >&2
    exit 2
  fi
fi
"$python" - "$tiny" <<'EOF' || exit 2
import importlib.metadata as md
import sys

tiny = sys.argv[1] == "1"
for name in ("torch", "transformers", "accelerate", "bitsandbytes", "torchao", "zeus", "nvidia-ml-py"):
    try:
        print(f"{name:>14}: {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"{name:>14}: not installed")
import ecoguard  # noqa: F401  (the repository on PYTHONPATH, or an installed copy)
import pynvml  # noqa: F401

if not tiny:  # (tiny mode: the script itself hides CUDA from torch; no import here to save time)
    import torch

    print(f"{'torch.cuda':>14}: {torch.cuda.is_available()} (CUDA {torch.version.cuda})")
    if not torch.cuda.is_available():
        sys.exit("torch sees no CUDA GPU: install a CUDA build of torch, or use --tiny")
    print(f"{'GPU 0':>14}: {torch.cuda.get_device_name(0)}, capability {torch.cuda.get_device_capability(0)}")
    pynvml.nvmlInit()
    print(f"{'NVML driver':>14}: {pynvml.nvmlSystemGetDriverVersion()}")
    pynvml.nvmlShutdown()
EOF

echo "== gpu_validation.py --out $out --time-limit $limit $*"
timeout --signal=KILL "$((${limit%.*} + 60))" \
  "$python" "$here/gpu_validation.py" --out "$out" --time-limit "$limit" "$@"
status=$?
[ "$status" = 137 ] && status=124 && echo "gpu_validation: killed $((${limit%.*} + 60)) s in" >&2
echo "== results in $out (exit $status)"
exit "$status"
