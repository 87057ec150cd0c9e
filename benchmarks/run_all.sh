#!/usr/bin/env bash
# Run every benchmark once, in one session, and keep the raw output beside RESULTS.md.
# Usage: bash benchmarks/run_all.sh [OUT_DIR]   (default benchmarks/results)
# ZEUS_PATH may point at a directory holding the zeus package (pip install --no-deps zeus
# --target DIR) so energy_accuracy.py also runs ZeusMonitor on the same fake driver.
set -u
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
out=${1:-benchmarks/results}
mkdir -p "$out"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "python: $($py -c 'import sys; print(sys.version.split()[0])')"
  # getconf, not nproc: nproc reports OMP_NUM_THREADS when it is set, not the machine's cores.
  echo "cpus: $(getconf _NPROCESSORS_ONLN); OMP_NUM_THREADS: ${OMP_NUM_THREADS:-unset}; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "torch: $($py -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  echo "git: $(git rev-parse --short HEAD 2>/dev/null)"
} > "$out/machine.txt"
run() {
  local name=$1; shift
  echo "== $name: $*"
  { echo "\$ $*"; "$@"; echo "exit: $?"; } > "$out/$name.txt" 2>&1
  tail -n 3 "$out/$name.txt"
}
run import_time      "$py" benchmarks/import_time.py --repeats 15
run guard_overhead   "$py" benchmarks/guard_overhead.py --calls 100000 --rounds 5 --real --real-rounds 15
run measured_call    "$py" benchmarks/measured_call_overhead.py --calls 2000 --rounds 9
run advise_latency   "$py" benchmarks/advise_latency.py --repeat 5
run scrape_time      "$py" benchmarks/scrape_time.py
run ledger           "$py" benchmarks/ledger_throughput.py
run energy_accuracy  "$py" benchmarks/energy_accuracy.py
run sampler_cost     "$py" benchmarks/sampler_cost.py
run batching         "$py" benchmarks/batching.py
run audit_scaling    "$py" benchmarks/audit_scaling.py --mcp
