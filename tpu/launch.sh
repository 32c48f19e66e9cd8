#!/usr/bin/env bash
# Launch the same command on every TPU worker at once, in the background.
set -euo pipefail

# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<EOF
Usage: $SBJAX_SCRIPT [flags] [--] COMMAND [ARGS...]

Run COMMAND ARGS... on all workers of the TPU VM (gcloud compute tpus tpu-vm
ssh NAME --worker=all), from the checkout made by install.sh, detached with
nohup; each worker writes its output to ~/LOG_DIR/RUN_NAME.log and the pid to
~/LOG_DIR/RUN_NAME.pid. COMMAND and its arguments are passed through verbatim
(each word is shell-quoted for the remote shell). Everything from the first
argument that is not a flag of this script, or everything after --, is the
command.

Required: --project, --zone, --name (or their SBJAX_* variables).

Flags:
  --run-name NAME         names the log/pid files   [SBJAX_RUN_NAME,
                          default run-YYYYmmdd-HHMMSS]
  --log-dir DIR           log dir on workers, relative to \$HOME
                                                    [default sbjax-logs]
  --env KEY=VALUE         set an environment variable for the command
                          (repeatable); PYTHONUNBUFFERED=1 is always set
  --worker W              workers to run on         [default all]
  --foreground            run attached, streaming output, instead of nohup
  --skip-bucket-check     do not check first that every gs:// bucket named in
                          the command (and --bucket) is writable

$(sbjax_common_help)

Examples:
  $SBJAX_SCRIPT --name my-tpu -- python3 -m experiments.train \\
      --config=pythia-70m --workdir=gs://\$SBJAX_BUCKET/runs/pythia-70m
  $SBJAX_SCRIPT --run-name sweep1 python3 -m experiments.sweep --grid=grids/lr.yaml
EOF
}

run_name="${SBJAX_RUN_NAME:-}"
log_dir=sbjax-logs
worker=all
foreground=0
bucket_check=1
envs=(PYTHONUNBUFFERED=1)
cmd=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    -h | --help)
      usage
      exit 0
      ;;
    --run-name | --run-name=*)
      sbjax_flag_into run_name --run-name "$@"
      shift "$SBJAX_SHIFT"
      ;;
    --log-dir | --log-dir=*)
      sbjax_flag_into log_dir --log-dir "$@"
      shift "$SBJAX_SHIFT"
      ;;
    --env | --env=*)
      _sbjax_flag_value --env "$@"
      case "$SBJAX_VALUE" in
        [A-Za-z_]*=*) ;;
        *) sbjax_die "--env expects KEY=VALUE, got '$SBJAX_VALUE'" ;;
      esac
      key="${SBJAX_VALUE%%=*}"
      case "$key" in
        *[!A-Za-z0-9_]*) sbjax_die "--env: invalid variable name '$key'" ;;
      esac
      envs+=("$SBJAX_VALUE")
      shift "$SBJAX_SHIFT"
      ;;
    --worker | --worker=*)
      sbjax_flag_into worker --worker "$@"
      shift "$SBJAX_SHIFT"
      ;;
    --foreground)
      foreground=1
      shift
      ;;
    --skip-bucket-check)
      bucket_check=0
      shift
      ;;
    --)
      shift
      cmd=("$@")
      break
      ;;
    -*)
      sbjax_parse_common "$@" ||
        sbjax_die "unknown argument: $1 (put the command to run after --)"
      shift "$SBJAX_SHIFT"
      ;;
    *)
      cmd=("$@")
      break
      ;;
  esac
done

sbjax_require_location
if [ "${#cmd[@]}" -eq 0 ]; then
  sbjax_die "no command given, e.g.: $SBJAX_SCRIPT -- python3 -m experiments.train --config=pythia-70m"
fi
if [ -z "$run_name" ]; then
  run_name="run-$(date +%Y%m%d-%H%M%S)"
fi
case "$run_name" in
  *[!A-Za-z0-9._-]* | .*) sbjax_die "--run-name may only contain letters, digits, '.', '_' and '-' (and not start with '.')" ;;
esac
case "$log_dir" in
  /* | *..* | '') sbjax_die "--log-dir must be a non-empty path relative to \$HOME without '..'" ;;
esac
remote_dir="$(sbjax_remote_dir_word)"
if [ "$bucket_check" = 1 ]; then
  while IFS= read -r bucket; do
    sbjax_check_bucket "$bucket"
  done < <(sbjax_buckets_in "${cmd[@]}" ${SBJAX_BUCKET:+"gs://${SBJAX_BUCKET#gs://}"})
fi
loc=(--project="$SBJAX_TPU_PROJECT" --zone="$SBJAX_TPU_ZONE")

# Quote every word for the remote (bash) shell, so arguments with spaces,
# quotes or $ arrive unchanged.
quoted="env"
for word in "${envs[@]}" "${cmd[@]}"; do
  quoted="$quoted $(sbjax_quote "$word")"
done
# The literal ~ is expanded by the remote shell, not here.
# shellcheck disable=SC2088
log_dir_word="~/$(sbjax_quote "${log_dir%/}")"
log_base="$log_dir_word/$run_name"

if [ "$foreground" = 1 ]; then
  remote_cmd="cd $remote_dir && $quoted"
else
  remote_cmd="set -e; cd $remote_dir; mkdir -p $log_dir_word; nohup $quoted > $log_base.log 2>&1 < /dev/null & echo \$! > $log_base.pid; echo \"\$(hostname): started pid \$!, log $log_base.log\""
fi

sbjax_gcloud compute tpus tpu-vm ssh "$SBJAX_TPU_NAME" --worker="$worker" "${loc[@]}" \
  --command="$remote_cmd"

if [ "$foreground" = 0 ] && ! sbjax_is_true "$SBJAX_DRY_RUN"; then
  sbjax_info "launched '$run_name'; follow worker 0 (process 0 writes the logs) with:"
  sbjax_print_cmd gcloud compute tpus tpu-vm ssh "$SBJAX_TPU_NAME" --worker=0 "${loc[@]}" \
    --command="tail -f $log_base.log" >&2
fi
