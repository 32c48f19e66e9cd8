# shellcheck shell=bash
# shellcheck disable=SC2034  # the variables set here are used by the scripts that source it
# Shared by tpu/*.sh (sourced, never run): settings from SBJAX_* variables or flags (a flag
# wins), and sbjax_run, which prints a command instead of running it under --dry-run.

SBJAX_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SBJAX_SCRIPT="$(basename "$0")"
SBJAX_TPU_PROJECT="${SBJAX_TPU_PROJECT:-}"
SBJAX_TPU_ZONE="${SBJAX_TPU_ZONE:-}"
SBJAX_TPU_NAME="${SBJAX_TPU_NAME:-}"
SBJAX_TPU_TYPE="${SBJAX_TPU_TYPE:-v5litepod-8}"
SBJAX_TPU_VERSION="${SBJAX_TPU_VERSION:-}"
SBJAX_BUCKET="${SBJAX_BUCKET:-}"
SBJAX_DRY_RUN="${SBJAX_DRY_RUN:-0}"

sbjax_common_help() {
  cat <<'EOF'
Common flags (or their environment variables; a flag wins):
  --project ID          GCP project               [SBJAX_TPU_PROJECT]
  --zone ZONE           GCP zone, e.g. us-west4-a [SBJAX_TPU_ZONE]
  --name NAME           TPU VM name               [SBJAX_TPU_NAME]
  --accelerator-type T  TPU type                  [SBJAX_TPU_TYPE, default v5litepod-8]
  --version V           TPU runtime version       [SBJAX_TPU_VERSION, default from the type]
  --bucket BUCKET       GCS bucket (fetch.sh)     [SBJAX_BUCKET]
  --dry-run             print the commands (prefixed "+ ") instead of running them
                                                  [SBJAX_DRY_RUN=1]
  -h, --help            this help
EOF
}

sbjax_die() {
  printf '%s: error: %s\n' "$SBJAX_SCRIPT" "$*" >&2
  exit 2
}

# sbjax_common_flag "$@": consume one common flag ("--flag V" or "--flag=V"), setting
# SBJAX_SHIFT to the words used; dies naming an unknown argument.
sbjax_common_flag() {
  local flag="${1%%=*}" value
  SBJAX_SHIFT=1
  if [ "$flag" = --dry-run ]; then
    SBJAX_DRY_RUN=1
    return 0
  fi
  case "$1" in
    --*=*) value="${1#*=}" ;;
    *) value="${2-}"; SBJAX_SHIFT=2 ;;
  esac
  case "$flag" in
    --project) SBJAX_TPU_PROJECT="$value" ;;
    --zone) SBJAX_TPU_ZONE="$value" ;;
    --name) SBJAX_TPU_NAME="$value" ;;
    --accelerator-type) SBJAX_TPU_TYPE="$value" ;;
    --version) SBJAX_TPU_VERSION="$value" ;;
    --bucket) SBJAX_BUCKET="$value" ;;
    *) sbjax_die "unknown argument: $1 (see --help)" ;;
  esac
  [ -n "$value" ] || sbjax_die "$flag needs a value"
}

# The TPU VM every script but fetch.sh acts on; LOC holds its --project and --zone.
sbjax_require_location() {
  [ -n "$SBJAX_TPU_PROJECT" ] || sbjax_die "no GCP project: pass --project or set SBJAX_TPU_PROJECT"
  [ -n "$SBJAX_TPU_ZONE" ] || sbjax_die "no zone: pass --zone or set SBJAX_TPU_ZONE"
  [ -n "$SBJAX_TPU_NAME" ] || sbjax_die "no TPU name: pass --name or set SBJAX_TPU_NAME"
  LOC=(--project="$SBJAX_TPU_PROJECT" --zone="$SBJAX_TPU_ZONE")
}

# sbjax_quote WORD...: the words quoted for a shell (single quotes where needed), one line.
sbjax_quote() {
  local word out="" q="'\\''"
  for word in "$@"; do
    case "$word" in
      "" | *[!A-Za-z0-9_./:=@%+,-]*) out="$out '${word//\'/$q}'" ;;
      *) out="$out $word" ;;
    esac
  done
  printf '%s' "${out# }"
}

# sbjax_run CMD ARGS...: print "+ CMD ARGS..." (shell-quoted), then run it unless --dry-run.
sbjax_run() {
  printf '+ %s\n' "$(sbjax_quote "$@")"
  if [ "$SBJAX_DRY_RUN" != 1 ]; then
    "$@"
  fi
}
