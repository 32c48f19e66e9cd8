#!/usr/bin/env bash
# One part of issue 32's science on a lent GPU: one preset of <= 8 minutes on one H200,
# compiles included, no network, no TFDS; everything in ONE archive.
#
# On the lent machine (the `run` tool of the device workplace), in one call:
#   command:   bash benchmarks/device_science.sh collapse --out "$OUT"
#   timeout_s: 560          carry: ["device_tokens", ".whl"]
# (device_tokens: the token files, built here once on the CPU with
#    python benchmarks/build_device_tokens.py --data=DIR_OF_SHAKESPEARE_TXT --out=device_tokens
#  .whl: the wheels that `import sbjax` lacks there, `bash benchmarks/device_wheels.sh`;
#  the archive comes back as $OUT/device_science_collapse.tar.gz, with $OUT/status.json)
# Resume (after exit status 75, a budget stop, or 124/137, a cut-off): make the SAME call
# again at once, while the machine is still warm (it is given back soon after a call ends).
# The runs are in device_runs/PART of the checkout there (git-ignored, so they stay between
# warm calls; never under $OUT, which starts empty each call and comes back whole).
#
# saturation and timing need no token files (the planted language is made on the device):
#   command:   bash benchmarks/device_science.sh saturation --out "$OUT"   (or: timing)
#   timeout_s: 560          carry: [".whl"]
#
#   bash benchmarks/device_science.sh PART [--out DIR] [--work DIR] [--dry-run] [--tokens DIR]
# PART: collapse (24 data-order seeds of L2-d256, V 1024, --preset=gpu) | collapse-grid
# (L {1,2,4} x d {64..512}, --preset=gpu-grid) | vocab_threshold (a d512 L6 trunk and
# frozen-trunk heads at V 1024..8192, --preset=gpu; the 20 heads of each V are one padded
# population, one compile, sharing the trunk's forward; estimated ~4.5 min, and past its
# 450 s budget it stops with exit status 75: a rerun resumes after the finished runs, below) |
# saturation (the planted arms d {32,128,512} x Γ {7.9, 2.4} on the rare-token tail language,
# tokens drawn on the device, one population per width: --preset=gpu-planted; no token files) |
# timing (benchmarks/step_timing.py: every run of the saturation, collapse and vocab_threshold
# gpu presets built at full size, its first 10 + 50 steps timed after compile and
# extrapolated: the measured estimate of each preset, timing.json, written after every run).
# Checks: the token files are present (else it says how to build them on a CPU), jax sees
# the GPU and nvidia-smi reports the free memory the part needs (a dry run skips both, with
# a note). The experiment runs under `timeout` (RUN_LIMIT_S, 520 s) with its --out in
# WORK/PART (--work, default device_runs in the checkout, git-ignored): the runs and their
# checkpoints (23.6 GiB for vocab_threshold) stay there and never go to --out. Into --out go
# only OUT/device_science_PART.tar.gz (report section.md, CSVs, figures, JSON, the log and
# status.json; no checkpoints, per-class or other arrays), also on a failure, and a copy of
# status.json. A run that stops at its own budget (exit status 75) or is cut off (124, 137)
# still reports: section.md covers what finished (vocab_threshold: the V; collapse: the groups,
# its tables marked partial; saturation: the populations) or says that nothing did, with the
# budget clock's estimates and how to resume; each call is recorded in the part's meta ("runs"). It keeps WORK/PART: on the
# lent machine,
# while it is still warm (the run tool's status: warm), call the same command again (a new,
# empty $OUT) and it resumes there after the finished runs; a fresh machine starts over.
# --dry-run: the part's test-size twin (gpu-test, gpu-grid-test) on the CPU, on generated
# token files, in device_runs/dry-run/PART unless --work is given (never mixed with a real
# run's), then the archive and --out are checked (tests/e2e/test_device_science.py).
set -euo pipefail

cd "$(dirname "$0")/.."
PART=""
DRY=0
OUT_DIR="${OUT:-device_science}"
WORK_DIR=""
TOKENS="device_tokens"
while [[ $# -gt 0 ]]; do
  case "$1" in
    collapse|collapse-grid|vocab_threshold|saturation|timing) PART="$1" ;;
    --dry-run) DRY=1 ;;
    --out) OUT_DIR="${2:?--out needs a directory}"; shift ;;
    --out=*) OUT_DIR="${1#--out=}" ;;
    --work) WORK_DIR="${2:?--work needs a directory}"; shift ;;
    --work=*) WORK_DIR="${1#--work=}" ;;
    --tokens) TOKENS="${2:?--tokens needs a directory}"; shift ;;
    --tokens=*) TOKENS="${1#--tokens=}" ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;
    *) echo "error: unknown argument '$1'; use PART [--out DIR] [--work DIR] [--dry-run]" \
         "[--tokens DIR]," \
         "PART one of collapse, collapse-grid, vocab_threshold, saturation, timing" >&2
       exit 2 ;;
  esac
  shift
done
if [[ -z "${PART}" ]]; then
  echo "error: no PART; use one of collapse, collapse-grid, vocab_threshold, saturation," \
       "timing" >&2
  exit 2
fi
# NEED_MIB: the free GPU memory a part needs. XLA's planned arguments + temporaries of the
# largest step (benchmarks/step_flops.py --memory, XLA:CPU): saturation 2.9 GiB, collapse
# 13.9, collapse-grid 4.5, vocab_threshold 33.7 (V 8192's 20-head population: its full
# float32 logits, 20 x 16384 x 8192), with room for the runtime and the device sampler's tables.
case "${PART}" in
  collapse) EXP=collapse; PRESET=gpu; VOCAB=1024; NEED_MIB=20000 ;;
  collapse-grid) EXP=collapse; PRESET=gpu-grid; VOCAB=1024; NEED_MIB=20000 ;;
  vocab_threshold) EXP=vocab_threshold; PRESET=gpu; VOCAB="1024 2048 4096 8192"
    NEED_MIB=48000 ;;
  saturation) EXP=saturation; PRESET=gpu-planted; VOCAB=""; NEED_MIB=30000 ;;
  timing) EXP=timing; VOCAB=""; NEED_MIB=48000
    PRESET="saturation:gpu-planted,collapse:gpu,vocab_threshold:gpu,collapse:gpu-grid" ;;
esac
TIMED=(--warmup=10 --steps=50)
if [[ "${DRY}" == 1 ]]; then
  PRESET="${PRESET}-test"
  VOCAB=64
  if [[ "${EXP}" == vocab_threshold ]]; then VOCAB="96 128"; fi
  if [[ "${EXP}" == saturation ]]; then VOCAB=""; fi
  if [[ "${EXP}" == timing ]]; then
    PRESET="saturation:gpu-planted-test,collapse:gpu-test"; VOCAB=""; TIMED=(--warmup=2 --steps=3)
  fi
fi
PY="${PYTHON:-$(command -v python3 || command -v python)}"
START=$(date +%s)
RUN_LIMIT_S="${RUN_LIMIT_S:-520}"
if [[ -z "${WORK_DIR}" ]]; then
  WORK_DIR="device_runs"
  if [[ "${DRY}" == 1 ]]; then WORK_DIR="device_runs/dry-run"; fi
fi
mkdir -p "${OUT_DIR}" "${WORK_DIR}/${PART}"
OUT_DIR="$(cd "${OUT_DIR}" && pwd)"
RUN_DIR="$(cd "${WORK_DIR}/${PART}" && pwd)"  # kept: a rerun resumes after the finished runs
if [[ "${RUN_DIR}" == "${OUT_DIR}" || "${RUN_DIR}" == "${OUT_DIR}"/* ]]; then
  echo "error: --work ${WORK_DIR} puts the runs inside --out ${OUT_DIR}, whose files all go" \
       "back; use a --work outside it (default: device_runs in the checkout)" >&2
  exit 2
fi
# One call per part at a time: a second call (a resume started before the first ended) stops
# here, before it truncates the first call's logs or removes its status (the experiment's own
# lock, RUN_DIR/LOCK, is taken later by its Python process; this one is beside RUN_DIR, so it is
# never packed). The lock is held by fd 9, which the experiment inherits, until the call ends.
if command -v flock >/dev/null; then
  exec 9>"${RUN_DIR}.call.lock"
  if ! flock -n 9; then
    echo "error: another call of device_science.sh ${PART} is running on ${RUN_DIR}; wait for" \
         "it to end (its archive goes to its --out), then rerun this command to resume" >&2
    exit 2
  fi
fi
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/sbjax_device_science.XXXXXX")"
STATUS="${RUN_DIR}/status.json"
rm -f "${STATUS}" "${RUN_DIR}/section.md"  # this call's, not an earlier call's
step() { echo "== [$(($(date +%s) - START)) s] $*"; }
ARCHIVE="${OUT_DIR}/device_science_${PART}.tar.gz"
# On any exit, also a failed one: the report, tables, figures, JSON and log of WORK/PART go
# into the one archive (never the runs' checkpoints, per-class or other arrays: they stay in
# WORK/PART for a rerun), and status.json beside it.
pack() {
  (cd "$(dirname "${RUN_DIR}")" && find "${PART}" -type f \( -name '*.md' -o -name '*.csv' \
     -o -name '*.json' -o -name '*.png' -o -name '*.log' -o -name '*.out' \) \
     -not -path '*/runs/*' -not -path '*/perclass/*' -not -path '*/data/*' \
     -not -path '*/tfds/*' | LC_ALL=C sort > "${SCRATCH}/files")
  tar -czf "${ARCHIVE}" -C "$(dirname "${RUN_DIR}")" -T "${SCRATCH}/files" \
    && step "archive: ${ARCHIVE} ($(wc -c < "${ARCHIVE}") bytes)"
  if [[ -s "${ARCHIVE}" && "$(wc -c < "${ARCHIVE}")" -gt 16777216 ]]; then
    echo "warning: ${ARCHIVE} is over the 16 MiB one file may take back from the lent" \
         "machine; its files are in ${RUN_DIR}: pack fewer of them and call again" >&2
  fi
  if [[ -s "${STATUS}" ]]; then cp "${STATUS}" "${OUT_DIR}/status.json"; fi
  rm -rf "${SCRATCH}"
}
trap pack EXIT
export PYTHONPATH="${PWD}${PYTHONPATH:+:${PYTHONPATH}}" PYTHONUNBUFFERED=1
if [[ "${DRY}" == 1 ]]; then  # a dry run checks the script, not speed
  DRY_FLAGS="$("${PY}" -c 'from tests._xla import DRY_XLA_FLAGS; print(DRY_XLA_FLAGS)')"
  export XLA_FLAGS="${XLA_FLAGS:+${XLA_FLAGS} }${DRY_FLAGS}"
  export JAX_PLATFORMS=cpu
fi

# --- data: shipped token files (a dry run writes small generated ones; the planted language
# of saturation is drawn on the device, and timing's collapse runs time random tokens) ------
if [[ "${DRY}" == 1 && -n "${VOCAB}" ]]; then
  TOKENS="${SCRATCH}/tokens"
  if [[ "${EXP}" == collapse ]]; then
    mkdir -p "${TOKENS}/V${VOCAB}"
    "${PY}" - "${TOKENS}/V${VOCAB}" "${VOCAB}" <<'EOF'
import sys
import numpy as np
d, v = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
nxt = rng.integers(0, v, (v, 4))  # a 4-way branching chain: learnable, not trivial
for name, n in (("train", 4096), ("val", 1024)):
  x = np.zeros(n, np.uint16)
  for i in range(1, n):
    x[i] = nxt[x[i - 1], rng.integers(0, 4)]
  x.tofile(f"{d}/{name}.uint16.bin")
EOF
  else  # vocab_threshold needs each V's tokenizer: the builder on generated text
    "${PY}" -c "import sys; from pathlib import Path; \
from tests._corpus import generated_docs, write_corpus; \
write_corpus(Path(sys.argv[1]), generated_docs(3, 10))" "${SCRATCH}/corpus"
    "${PY}" benchmarks/build_device_tokens.py --data="${SCRATCH}/corpus" --out="${TOKENS}" \
      --vocabs="${VOCAB// /,}" > "${SCRATCH}/build.log" 2>&1
  fi
fi
NEED=()
for v in ${VOCAB}; do
  NEED+=("${TOKENS}/V${v}/train.uint16.bin" "${TOKENS}/V${v}/val.uint16.bin")
  if [[ "${EXP}" == vocab_threshold ]]; then NEED+=("${TOKENS}/V${v}/tokenizer.model"); fi
done
for f in "${NEED[@]+"${NEED[@]}"}"; do
  if [[ ! -s "${f}" ]]; then
    echo "error: token file ${f} is missing. Build the token files on a CPU machine:" >&2
    echo "  python benchmarks/build_device_tokens.py --data=DIR_OF_SHAKESPEARE_TXT --out=${TOKENS}" >&2
    echo "  then carry them here (the run tool's carry: [\"${TOKENS}\", \".whl\"])." >&2
    exit 3
  fi
done
DATA="${TOKENS}"
if [[ "${EXP}" == collapse ]]; then DATA="${NEED[0]},${NEED[1]}"; fi
if [[ -n "${VOCAB}" ]]; then step "token files: ${DATA}"; fi

# --- the device: jax sees it, and it has the memory ------------------------------------------
if [[ "${DRY}" == 0 ]]; then
  if ! "${PY}" -c "import jax; assert jax.default_backend() == 'gpu'" 2>/dev/null; then
    echo "error: ${PY} has no jax that sees a GPU; install jax with its CUDA plugin (offline:" \
         "pip install --no-index the wheels made on a machine with a network)" >&2
    exit 3
  fi
  FREE=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -n 1)
  if [[ "${FREE}" -lt "${NEED_MIB}" ]]; then
    echo "error: the GPU has ${FREE} MiB free; part ${PART} needs ${NEED_MIB} MiB" >&2
    exit 3
  fi
  step "GPU: ${FREE} MiB free (needs ${NEED_MIB})"
else
  step "dry run: CPU, the device and memory checks skipped"
fi
if ! "${PY}" -c "import sbjax" 2>"${SCRATCH}/import.log"; then
  if compgen -G ".whl/*.whl" >/dev/null; then
    step "import sbjax failed: installing .whl/*.whl (no index)"
    "${PY}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --target "${SCRATCH}/site" .whl/*.whl
    export PYTHONPATH="${PYTHONPATH}:${SCRATCH}/site"
  fi
  if ! "${PY}" -c "import sbjax"; then
    echo "error: import sbjax fails; run bash benchmarks/device_wheels.sh on a machine with a" \
         "network and carry .whl here" >&2
    exit 3
  fi
fi

# --- the experiment ------------------------------------------------------------------------
CMD=("${PY}" -m "experiments.${EXP}" --preset="${PRESET}" --out="${RUN_DIR}")
case "${EXP}" in
  saturation) ;;  # the planted tail language: no --data
  timing) CMD=("${PY}" benchmarks/step_timing.py --runs="${PRESET}" "${TIMED[@]}"
                --out="${RUN_DIR}") ;;
  *) CMD+=(--data="${DATA}") ;;
esac
step "${CMD[*]:1} (at most ${RUN_LIMIT_S} s)"
T0=$(date +%s)
RC=0
timeout -s TERM -k 20 "${RUN_LIMIT_S}" "${CMD[@]}" > "${RUN_DIR}/result.out" \
  2> "${RUN_DIR}/run.log" || RC=$?
write_section() {  # RUN_DIR/section.md by the report module $1's write_section
  "${PY}" -c "import importlib, sys; \
importlib.import_module(sys.argv[1]).write_section(sys.argv[2])" "$1" "${RUN_DIR}"
}
if [[ "${EXP}" == vocab_threshold && -s "${RUN_DIR}/vocab_threshold_meta.json" ]]; then
  # its CLI prints JSON: the section. After a budget stop (75) or a cut-off (124, 137) it
  # covers the V that finished and says which did not and how to resume (no fit over them);
  # with no V finished (no vocab_threshold.csv) it says so, with the budget clock's estimates
  W=0
  write_section experiments.vocab_threshold.report || W=$?
  if [[ "${RC}" == 0 ]]; then RC="${W}"; fi
fi
if [[ "${RC}" != 0 && "${EXP}" == collapse && -s "${RUN_DIR}/collapse_meta.json" ]]; then
  # its CLI writes the section at its end and at a budget stop (75); after a cut-off (124,
  # 137) or a failure: the groups that finished (partial tables), or that none did, with the
  # budget clock's estimates and how to resume
  write_section experiments.collapse.report || true
fi
if [[ "${RC}" =~ ^(75|124|137)$ && "${EXP}" == saturation && -s "${RUN_DIR}/planted_meta.json" ]]
then
  # a budget stop or a cut-off: the report of the populations that finished (its text names
  # the stop, or the arms not run), or, with none finished, the set-up, the budget clock's
  # estimates and how to resume (planted_meta.json is written when the call starts)
  write_section experiments.saturation.planted_report || true
fi
if [[ "${EXP}" == timing ]]; then cat "${RUN_DIR}/result.out"; fi
SECONDS_RUN=$(($(date +%s) - T0))
case "${RC}" in
  0) WHAT="finished" ;;
  75) WHAT="stopped before its budget ran out; rerun the same command to resume" ;;
  124|137) WHAT="cut off at ${RUN_LIMIT_S} s; rerun the same command to resume" ;;
  *) WHAT="failed" ;;
esac
grep '^estimate:' "${RUN_DIR}/run.log" || true  # the experiment's own measured estimates
printf '{"part": "%s", "preset": "%s", "dry_run": %s, "rc": %s, "status": "%s", "seconds": %s}\n' \
  "${PART}" "${PRESET}" "$([[ "${DRY}" == 1 ]] && echo true || echo false)" "${RC}" "${WHAT}" \
  "${SECONDS_RUN}" > "${STATUS}"
step "${PART}: ${WHAT} (exit status ${RC}, ${SECONDS_RUN} s)"
if [[ "${RC}" != 0 ]]; then
  tail -n 5 "${RUN_DIR}/run.log" >&2
  exit "${RC}"
fi

if [[ "${DRY}" == 1 ]]; then  # the archive holds the report, the CSVs and the figures
  trap - EXIT
  pack
  LISTED="$(tar -tzf "${ARCHIVE}")"
  WANT=(section.md collapse_models.csv collapse_meta.json fig_collapse_vs_loss.png)
  if [[ "${EXP}" == vocab_threshold ]]; then
    WANT=(section.md vocab_threshold.csv runs.csv fit.json fig_vocab_threshold.png)
  fi
  if [[ "${EXP}" == saturation ]]; then
    WANT=(section.md planted_arms.csv planted_checkpoints.csv planted_meta.json
          planted_floor.csv fig_planted_loss_gamma.png)
  fi
  if [[ "${EXP}" == timing ]]; then WANT=(timing.json result.out); fi
  for f in "${WANT[@]}" status.json run.log; do
    if ! grep -qx "${PART}/${f}" <<< "${LISTED}"; then
      echo "error: the archive ${ARCHIVE} lacks ${PART}/${f}" >&2
      exit 4
    fi
  done
  # nothing of the runs goes back: no checkpoint, runs folder or array in --out or the archive
  LEAK="$(find "${OUT_DIR}" -mindepth 1 \( -name runs -o -name checkpoints -o -name perclass \
            -o -name '*.npy' -o -name '*.npz' \) -print -quit)"
  LEAK="${LEAK}$(grep -E '/(runs|perclass|checkpoints|data|tfds)/|\.np[yz]$' <<< "${LISTED}" \
                   | head -n 1 || true)"
  if [[ -n "${LEAK}" || ! -s "${OUT_DIR}/status.json" ]]; then
    echo "error: --out ${OUT_DIR} holds ${LEAK:-no status.json}: only the archive and" \
         "status.json belong there (the runs stay in ${RUN_DIR})" >&2
    exit 4
  fi
  step "dry run: the archive holds the report, CSVs, figure, log and status; the runs stay" \
       "in ${RUN_DIR}"
fi
