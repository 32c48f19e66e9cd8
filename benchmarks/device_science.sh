#!/usr/bin/env bash
# One science part on a GPU machine: one experiment preset of <= 8 minutes on one H200.
#
#   bash benchmarks/device_science.sh PART [--out DIR] [--tokens DIR] [--dry-run]
#
# PART             python -m experiments.NAME  --data
# collapse         collapse --preset=gpu       TOKENS/V1024/{train,val}.uint16.bin
# collapse-grid    collapse --preset=gpu-grid  the same
# vocab_threshold  vocab_threshold --preset=gpu  TOKENS (V1024..V8192, each with its tokenizer)
# saturation       saturation.planted --preset=gpu  none (the language is drawn on the device)
#
# TOKENS (default device_tokens) is built once on a CPU machine:
#   python benchmarks/build_device_tokens.py --data=DIR_OF_TXT --out=device_tokens
# The runs and checkpoints stay in device_runs/PART (git-ignored); the report files (markdown,
# CSV, JSON, figures) and the log are copied to OUT/PART (default device_science). The run is
# stopped (SIGTERM, which saves a checkpoint) after RUN_LIMIT_S (default 520) seconds; a run
# that stops at its own budget exits 75: the same command again resumes after what finished.
# --dry-run prints the plan and runs nothing.
set -euo pipefail

cd "$(dirname "$0")/.."
PART=""
OUT_DIR="device_science"
TOKENS="device_tokens"
DRY=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    collapse|collapse-grid|vocab_threshold|saturation) PART="$1" ;;
    --dry-run) DRY=1 ;;
    --out) OUT_DIR="${2:?--out needs a directory}"; shift ;;
    --out=*) OUT_DIR="${1#--out=}" ;;
    --tokens) TOKENS="${2:?--tokens needs a directory}"; shift ;;
    --tokens=*) TOKENS="${1#--tokens=}" ;;
    *) echo "error: unknown argument '$1'; use PART [--out DIR] [--tokens DIR] [--dry-run]," \
         "PART one of collapse, collapse-grid, vocab_threshold, saturation" >&2
       exit 2 ;;
  esac
  shift
done
V1024="${TOKENS}/V1024/train.uint16.bin,${TOKENS}/V1024/val.uint16.bin"
case "${PART}" in
  collapse) EXP=collapse; PRESET=gpu; DATA="${V1024}" ;;
  collapse-grid) EXP=collapse; PRESET=gpu-grid; DATA="${V1024}" ;;
  vocab_threshold) EXP=vocab_threshold; PRESET=gpu; DATA="${TOKENS}" ;;
  saturation) EXP=saturation.planted; PRESET=gpu; DATA="" ;;
  *) echo "error: no PART; use one of collapse, collapse-grid, vocab_threshold, saturation" >&2
     exit 2 ;;
esac
PY="${PYTHON:-python3}"
export PYTHONPATH="${PWD}${PYTHONPATH:+:${PYTHONPATH}}" PYTHONUNBUFFERED=1
LIMIT="${RUN_LIMIT_S:-520}"
RUN_DIR="device_runs/${PART}"
CMD=("${PY}" -m "experiments.${EXP}" "--preset=${PRESET}" "--out=${RUN_DIR}"
     ${DATA:+"--data=${DATA}"})
if [[ "${DRY}" == 1 ]]; then
  echo "run (at most ${LIMIT} s): $(printf '%q ' "${CMD[@]}")"
  echo "then: the report files of ${RUN_DIR} and the log to ${OUT_DIR}/${PART}"
  exit 0
fi
for f in ${DATA//,/ }; do
  if [[ ! -e "${f}" ]]; then
    echo "error: ${f} is missing; build the token files on a CPU machine:" \
         "python benchmarks/build_device_tokens.py --data=DIR_OF_TXT --out=${TOKENS}" >&2
    exit 3
  fi
done
if ! "${PY}" -c "import jax, sbjax; assert jax.default_backend() == 'gpu'" 2>/dev/null; then
  echo "error: ${PY} has no jax that sees a GPU, or cannot import sbjax; install them:" \
       "pip install -e . 'jax[cuda12]'" >&2
  exit 3
fi
mkdir -p "${RUN_DIR}" "${OUT_DIR}/${PART}"
DEST="$(cd "${OUT_DIR}/${PART}" && pwd)"
echo "== ${CMD[*]}"
RC=0
timeout -s TERM -k 30 "${LIMIT}" "${CMD[@]}" > "${DEST}/run.log" 2>&1 || RC=$?
# the report files, never the runs, checkpoints or arrays
(cd "${RUN_DIR}" && find . -type f \( -name '*.md' -o -name '*.csv' -o -name '*.json' \
   -o -name '*.png' \) -not -path '*/runs/*' -not -path '*/checkpoints/*' -print0 \
   | xargs -0 -r cp --parents -t "${DEST}")
case "${RC}" in
  0) echo "${PART}: finished" ;;
  75|124|137) echo "${PART}: stopped (exit ${RC}); run the same command again to resume" ;;
  *) echo "${PART}: failed (exit ${RC})"; tail -n 5 "${DEST}/run.log" >&2 ;;
esac
exit "${RC}"
