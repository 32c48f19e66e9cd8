#!/usr/bin/env bash
# One check of sbjax on a GPU (or TPU) machine: the fast test layer on the device, then the
# benchmarks at device sizes, each under a time limit; their tables replace the device's
# sections of docs/benchmarks.md.
#
#   bash benchmarks/device_check.sh [--out DIR] [--dry-run]
#
# Sections (seconds each; exit status and time in OUT/sections.tsv, output in OUT/NAME.log):
#   tests    (90) pytest -m "not e2e" with SBJAX_TEST_PLATFORM=cuda|tpu
#   train   (250) sbjax vs HF eager and torch.compile, bf16, 16 x 1024 tokens, pythia-160m and
#                 pythia-410m, each side alone in its own process (train_step_vs_hf.py --isolate)
#   series  (150) K=16 pythia-70m revisions: sbjax vs the authors' way on the same device
#   metrics  (60) metrics_bench.py --quick
# OUT (default device_check) gets the logs and the regenerated docs/benchmarks.md.
# PEAK_TFLOPS: the device's dense bf16 peak for MFU (default: 989, an H100/H200).
# --dry-run prints the plan and runs nothing.
set -euo pipefail

cd "$(dirname "$0")/.."
OUT_DIR="device_check"
DRY=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --out) OUT_DIR="${2:?--out needs a directory}"; shift ;;
    --out=*) OUT_DIR="${1#--out=}" ;;
    *) echo "error: unknown argument '$1'; use [--out DIR] [--dry-run]" >&2; exit 2 ;;
  esac
  shift
done
PY="${PYTHON:-python3}"
PEAK="${PEAK_TFLOPS:-989}"
export PYTHONPATH="${PWD}${PYTHONPATH:+:${PYTHONPATH}}" PYTHONUNBUFFERED=1

# section NAME SECONDS CMD...: runs CMD under a time limit into OUT/NAME.log (dry run: prints it)
section() {
  local name="$1" limit="$2" t0 rc=0
  shift 2
  if [[ "${DRY}" == 1 ]]; then
    echo "${name} (at most ${limit} s): $(printf '%q ' "$@")"
    return 0
  fi
  echo "== ${name} (at most ${limit} s)"
  t0=$(date +%s)
  timeout -s INT -k 20 "${limit}" "$@" > "${OUT_DIR}/${name}.log" 2>&1 || rc=$?
  printf '%s\t%s\t%s\n' "${name}" "${rc}" "$(($(date +%s) - t0))" >> "${OUT_DIR}/sections.tsv"
  tail -n 3 "${OUT_DIR}/${name}.log"
}

if [[ "${DRY}" == 0 ]]; then
  BACKEND="$("${PY}" -c 'import jax, sbjax; print(jax.default_backend())')" || {
    echo "error: ${PY} cannot import jax and sbjax; install them: pip install -e '.[test,hf]'" \
         "with jax for the device (e.g. pip install 'jax[cuda12]')" >&2
    exit 3
  }
  if [[ "${BACKEND}" == cpu ]]; then
    echo "error: jax sees no accelerator; install jax for the device (e.g. 'jax[cuda12]')" >&2
    exit 3
  fi
  mkdir -p "${OUT_DIR}"
  : > "${OUT_DIR}/sections.tsv"
fi
PLATFORM=cuda
if [[ "${BACKEND:-gpu}" == tpu ]]; then PLATFORM=tpu; fi

section tests 90 env SBJAX_TEST_PLATFORM="${PLATFORM}" "${PY}" -m pytest tests -m "not e2e" \
  -q -p no:cacheprovider
section train 250 "${PY}" benchmarks/train_step_vs_hf.py --isolate \
  --configs=pythia-160m,pythia-410m --dtype=bfloat16 --batch=16 --seq=1024 --warmup=2 \
  --reps=10 --loss_chunk=preset --remat=preset --hf_device=auto --peak_tflops="${PEAK}" \
  --side_timeout=70 --compile_timeout=150 --write_docs
section series 150 "${PY}" benchmarks/series_analysis.py --device=auto --write_docs
section metrics 60 "${PY}" benchmarks/metrics_bench.py --quick --write_docs
if [[ "${DRY}" == 0 ]]; then
  cp docs/benchmarks.md "${OUT_DIR}/"
  cat "${OUT_DIR}/sections.tsv"
fi
