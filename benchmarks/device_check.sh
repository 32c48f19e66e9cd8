#!/usr/bin/env bash
# One check of sbjax on a GPU or TPU machine, in under 8 minutes (NOT run in CI).
#   bash benchmarks/device_check.sh [gpu|tpu]      (default: gpu if nvidia-smi exists)
# 1. installs sbjax with the accelerator's jax; 2. train-step benchmark of pythia-70m and
# pythia-160m in bf16 with MFU against the device's peak; 3. the metrics benchmark
# (quick sizes); 4. the 1-vs-N-device equivalence tests. Writes device_check/*.log.
set -euo pipefail

cd "$(dirname "$0")/.."
KIND="${1:-}"
if [[ -z "${KIND}" ]]; then
  if command -v nvidia-smi >/dev/null 2>&1; then KIND=gpu; else KIND=tpu; fi
fi
OUT=device_check
mkdir -p "${OUT}"
START=$(date +%s)
step() { echo "== [$(($(date +%s) - START)) s] $*"; }

# Dense bf16 peak TFLOP/s per chip, for MFU (override with PEAK_TFLOPS=...).
peak_for() {
  case "$1" in
    *H200*|*H100*) echo 989 ;;
    *A100*) echo 312 ;;
    *L4*) echo 121 ;;
    *v5e*|*v5litepod*|*"TPU v5 lite"*) echo 197 ;;
    *v5p*) echo 459 ;;
    *v4*) echo 275 ;;
    *v6e*|*"TPU v6"*) echo 918 ;;
    *) echo 0 ;;
  esac
}

step "install (${KIND})"
if [[ "${KIND}" == gpu ]]; then
  python -m pip install -q -e '.[cuda12,test]' 2>&1 | tail -n 3
else
  python -m pip install -q -e '.[tpu,test]' 2>&1 | tail -n 3
fi
DEVICE=$(python -c 'import jax; d = jax.devices()[0]; print(d.device_kind)')
NDEV=$(python -c 'import jax; print(jax.device_count())')
PEAK="${PEAK_TFLOPS:-$(peak_for "${DEVICE}")}"
step "devices: ${NDEV} x ${DEVICE}; bf16 peak ${PEAK} TFLOP/s per device"
if [[ "${PEAK}" == 0 ]]; then
  echo "unknown device peak: set PEAK_TFLOPS=<bf16 TFLOP/s per device> for MFU" >&2
  PEAK=1
fi

step "train step, bf16, pythia-70m and pythia-160m (sbjax only, 1 device)"
timeout 240 python benchmarks/train_step_vs_hf.py --configs=pythia-70m,pythia-160m \
  --sides=sbjax --dtype=bfloat16 --batch=16 --seq=1024 --loss_chunk=4096 --reps=5 \
  --peak_tflops="${PEAK}" 2>&1 | tee "${OUT}/train_step.log" | grep -v '^BENCH' || true

step "metrics benchmark (quick sizes)"
timeout 120 python benchmarks/metrics_bench.py --quick 2>&1 | tee "${OUT}/metrics.log" \
  | tail -n 12 || true

step "1-vs-N-device equivalence"
timeout 120 python -m pytest tests/test_sharding.py -q -x 2>&1 | tee "${OUT}/sharding.log" \
  | tail -n 5 || true

step "done; logs in ${OUT}/"
grep -h '^BENCH' "${OUT}/train_step.log" | python -c '
import json, sys
for line in sys.stdin:
  r = json.loads(line[6:])
  if "mfu" in r:
    print("%-12s %12.0f tok/s  MFU %.1f%%" % (r["config"], r["tokens_per_s"], 100 * r["mfu"]))
'
