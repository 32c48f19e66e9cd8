#!/usr/bin/env bash
# One check of sbjax on a lent GPU or TPU machine, in under 8 minutes, run as is:
#   bash benchmarks/device_check.sh [gpu|tpu|cpu] [--dry-run]
# (kind default: gpu if nvidia-smi exists, else tpu if /dev/accel* or /dev/vfio exist, else cpu)
# 1. installs sbjax with the accelerator's jax (skipped with --dry-run or kind cpu);
# 2. train-step tokens/s and MFU against the device's bf16 peak, pythia-70m and pythia-160m
#    (on tpu also with attn_impl=splash); 3. the metrics benchmark (quick sizes);
# 4. 1-vs-N-device equality (benchmarks/device_equal.py); 5. the series-analysis
#    throughput (benchmarks/stacked_forward.py: K checkpoints in one vmapped forward).
# Writes device_check/results.json (every BENCH row, per-section exit codes and times) and
# device_check/*.log. --dry-run: tiny sizes, no install, XLA at -O0, for the CPU test
# (tests/e2e/test_device_check.py). PEAK_TFLOPS=<bf16 TFLOP/s per device> overrides the
# table below; OUT=<dir> changes the output directory; SECTIONS=train_step,metrics,...
# runs only those (default: all).
set -euo pipefail

cd "$(dirname "$0")/.."
KIND=""
DRY=0
for arg in "$@"; do
  case "${arg}" in
    gpu|tpu|cpu) KIND="${arg}" ;;
    --dry-run) DRY=1 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "error: unknown argument '${arg}'; use [gpu|tpu|cpu] [--dry-run]" >&2; exit 2 ;;
  esac
done
if [[ -z "${KIND}" ]]; then
  if command -v nvidia-smi >/dev/null 2>&1; then KIND=gpu
  elif compgen -G "/dev/accel*" >/dev/null || [[ -d /dev/vfio ]]; then KIND=tpu
  else KIND=cpu; fi
fi
OUT="${OUT:-device_check}"
mkdir -p "${OUT}"
START=$(date +%s)
step() { echo "== [$(($(date +%s) - START)) s] $*"; }
export PYTHONPATH="${PWD}${PYTHONPATH:+:${PYTHONPATH}}"
SECTIONS_ENV="${SECTIONS:-}"
TSV="${OUT}/sections.tsv"
: > "${TSV}"

ONLY=",${SECTIONS_ENV},"
# run NAME TIMEOUT_S CMD...: log to OUT/NAME.log, record the exit status and the seconds
# (a dry run on a CPU gets 4x the time: the limits are for the accelerator)
run() {
  local name="$1" limit="$2" t0 rc=0
  shift 2
  if [[ "${ONLY}" != ",," && "${ONLY}" != *",${name},"* ]]; then return 0; fi
  if [[ "${DRY}" == 1 ]]; then limit=$((limit * 4)); fi
  t0=$(date +%s)
  timeout "${limit}" "$@" > "${OUT}/${name}.log" 2>&1 || rc=$?
  printf '%s\t%s\t%s\n' "${name}" "${rc}" "$(($(date +%s) - t0))" >> "${TSV}"
  grep -v '^BENCH' "${OUT}/${name}.log" | tail -n 6 || true
}

# Dense bf16 peak TFLOP/s per chip, for MFU.
peak_for() {
  case "$1" in
    *H200*|*H100*) echo 989 ;;
    *A100*) echo 312 ;;
    *L4*) echo 121 ;;
    *v5e*|*v5litepod*|*"TPU v5 lite"*) echo 197 ;;
    *v5p*|*"TPU v5"*) echo 459 ;;
    *v4*) echo 275 ;;
    *v6e*|*"TPU v6"*) echo 918 ;;
    *) echo 0 ;;
  esac
}

if [[ "${DRY}" == 1 || "${KIND}" == cpu ]]; then
  step "install skipped (${KIND}, dry run ${DRY})"
elif [[ "${KIND}" == gpu ]]; then
  step "install (gpu)"
  python -m pip install -q -e '.[cuda12,test]' 2>&1 | tail -n 3
else
  step "install (tpu)"
  python -m pip install -q -e '.[tpu,test]' 2>&1 | tail -n 3
fi
if [[ "${DRY}" == 1 ]]; then  # a dry run checks the script, not speed: skip LLVM's passes
  export XLA_FLAGS="${XLA_FLAGS:+${XLA_FLAGS} }--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
fi
read -r NDEV DEVICE < <(python -c 'import jax; print(jax.device_count(), jax.devices()[0].device_kind)')
PEAK="${PEAK_TFLOPS:-$(peak_for "${DEVICE}")}"
step "devices: ${NDEV} x ${DEVICE}; bf16 peak ${PEAK} TFLOP/s per device"
PEAK_ARG=()
if [[ "${PEAK}" != 0 ]]; then PEAK_ARG=(--peak_tflops="${PEAK}"); fi  # 0: measured (CPU)
if [[ "${DRY}" == 1 && "${PEAK}" == 0 ]]; then PEAK_ARG=(--peak_tflops=1); fi  # skip measuring

if [[ "${DRY}" == 1 ]]; then
  TRAIN=(--configs=pythia-14m --batch=1 --seq=32 --reps=1 --loss_chunk=32
         "--shrink=n_layers=1,vocab_size=512")
  METRICS=(--cases=spectra --heads=2 --spec-v=256 --spec-d=32 --reps=1
           --spec-methods=auto)
  EQUAL=(--steps=1)
  SERIES=(--k=2 --batch=2 --seq=32 --reps=1)
else
  TRAIN=("--configs=pythia-70m,pythia-160m" --batch=16 --seq=1024 --reps=5 --loss_chunk=4096)
  METRICS=(--quick)
  EQUAL=(--steps=3)
  SERIES=(--config=pythia-70m --k=16 --batch=16 --seq=1024 --reps=3)
fi

step "train step, bf16, 1 device"
run train_step 200 python benchmarks/train_step_vs_hf.py "${TRAIN[@]}" --sides=sbjax \
  --dtype=bfloat16 "${PEAK_ARG[@]}"
if [[ "${KIND}" == tpu ]]; then
  step "train step, bf16, attn_impl=splash (Pallas TPU kernel)"
  run train_step_splash 120 python benchmarks/train_step_vs_hf.py "${TRAIN[@]}" \
    --sides=sbjax --dtype=bfloat16 --attn_impl=splash "${PEAK_ARG[@]}"
fi

step "metrics benchmark"
run metrics 90 python benchmarks/metrics_bench.py "${METRICS[@]}"

step "1-vs-N-device equality (${NDEV} devices)"
run device_equal 120 python benchmarks/device_equal.py "${EQUAL[@]}"

step "series analysis throughput (stacked checkpoints)"
run series 60 python benchmarks/stacked_forward.py "${SERIES[@]}"

step "writing ${OUT}/results.json"
python - "${OUT}" "${KIND}" "${DEVICE}" "${NDEV}" "${PEAK}" "${DRY}" "${START}" <<'PY'
import json, pathlib, sys, time
out, kind, device, ndev, peak, dry, start = sys.argv[1:]
out = pathlib.Path(out)
sections = {}
for line in (out / "sections.tsv").read_text().splitlines():
  name, rc, secs = line.split("\t")
  rows = [json.loads(l[6:]) for l in (out / f"{name}.log").read_text().splitlines()
          if l.startswith("BENCH ")]
  sections[name] = {"rc": int(rc), "seconds": int(secs), "rows": rows}
res = {"kind": kind, "device": device, "n_devices": int(ndev), "peak_tflops": float(peak),
       "dry_run": dry == "1", "seconds": round(time.time() - int(start)), "sections": sections}
(out / "results.json").write_text(json.dumps(res, indent=1))
for r in sections.get("train_step", {}).get("rows", []):
  if "mfu" in r:
    print("%-12s %12.0f tok/s  MFU %.1f%%" % (r["config"], r["tokens_per_s"], 100 * r["mfu"]))
bad = [n for n, s in sections.items() if s["rc"] != 0]
print("sections failed: %s" % bad if bad else "all sections ran")
PY
step "done"
