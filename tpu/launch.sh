#!/usr/bin/env bash
# Launch the same command on every TPU worker at once, in the background.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<EOF
Usage: $SBJAX_SCRIPT [flags] -- COMMAND [ARGS...]

Runs COMMAND in ~/sbjax on all workers (gcloud compute tpus tpu-vm ssh --worker=all) under
nohup; each worker writes ~/sbjax-logs/RUN_NAME.log and .pid. Every word of the command
arrives as it is (quoted for the remote shell).

  --run-name NAME   names the log and pid files [default run-YYYYmmdd-HHMMSS]

$(sbjax_common_help)

Example:
  $SBJAX_SCRIPT --run-name lr -- python3 -m experiments.sweep --grid=grid.json \\
      --sweep_dir=gs://\$SBJAX_BUCKET/sweeps/lr
EOF
}

run_name="run-$(date +%Y%m%d-%H%M%S)"
cmd=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --run-name) run_name="${2:?--run-name needs a value}"; shift 2 ;;
    --run-name=*) run_name="${1#*=}"; shift ;;
    --) shift; cmd=("$@"); break ;;
    *) sbjax_common_flag "$@"; shift "$SBJAX_SHIFT" ;;
  esac
done
sbjax_require_location
if [ "${#cmd[@]}" -eq 0 ]; then
  sbjax_die "no command: put it after --, e.g. -- python3 -m experiments.train"
fi
case "$run_name" in
  *[!A-Za-z0-9._-]*) sbjax_die "--run-name: letters, digits, '.', '_' and '-' only" ;;
esac
log="\$HOME/sbjax-logs/$run_name"  # expanded by the remote shell
sbjax_run gcloud compute tpus tpu-vm ssh "$SBJAX_TPU_NAME" --worker=all "${LOC[@]}" \
  --command="mkdir -p ~/sbjax-logs && cd ~/sbjax && PYTHONUNBUFFERED=1 nohup \
$(sbjax_quote "${cmd[@]}") > $log.log 2>&1 < /dev/null & echo \$! > $log.pid; \
echo \"\$(hostname): started, log $log.log\""
