# shellcheck shell=bash
# Variables defined here are used by the scripts that source this file.
# shellcheck disable=SC2034
# Shared helpers for the sbjax Cloud TPU scripts (tpu/*.sh).
#
# This file is sourced, never executed. It reads the SBJAX_* environment
# variables, parses the flags shared by every script, and wraps command
# execution so that --dry-run / SBJAX_DRY_RUN=1 prints commands instead of
# running them.
#
# Kept compatible with bash 3.2 (macOS): no associative arrays, no mapfile,
# and empty arrays are expanded with ${a[@]+"${a[@]}"} under `set -u`.

# Repository root (the parent of tpu/).
SBJAX_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SBJAX_SCRIPT="$(basename "$0")"

# --- settings: environment first, flags override ---------------------------
SBJAX_TPU_PROJECT="${SBJAX_TPU_PROJECT:-}"
SBJAX_TPU_ZONE="${SBJAX_TPU_ZONE:-}"
SBJAX_TPU_TYPE="${SBJAX_TPU_TYPE:-v5litepod-8}"
SBJAX_TPU_NAME="${SBJAX_TPU_NAME:-}"
SBJAX_TPU_VERSION="${SBJAX_TPU_VERSION:-}"
SBJAX_BUCKET="${SBJAX_BUCKET:-}"
SBJAX_TPU_QUEUED="${SBJAX_TPU_QUEUED:-0}"
SBJAX_TPU_REMOTE_DIR="${SBJAX_TPU_REMOTE_DIR:-sbjax}"
SBJAX_DRY_RUN="${SBJAX_DRY_RUN:-0}"

sbjax_common_help() {
  cat <<'EOF'
Common flags (each has an environment-variable equivalent; flags win):
  --project ID            GCP project             [SBJAX_TPU_PROJECT]
  --zone ZONE             GCP zone, e.g. us-west4-a [SBJAX_TPU_ZONE]
  --accelerator-type T    TPU type                [SBJAX_TPU_TYPE, default v5litepod-8]
  --name NAME             TPU VM / queued-resource name [SBJAX_TPU_NAME]
  --version V             TPU runtime version     [SBJAX_TPU_VERSION,
                          default derived from the accelerator type]
  --bucket BUCKET         GCS bucket (gs:// optional) [SBJAX_BUCKET]
  --queued                the TPU was/is created as a queued resource
                                                  [SBJAX_TPU_QUEUED=1]
  --remote-dir DIR        checkout dir on workers, relative to $HOME
                                                  [SBJAX_TPU_REMOTE_DIR, default sbjax]
  --dry-run               print commands (prefixed "+ ") instead of running them
                                                  [SBJAX_DRY_RUN=1]
  -h, --help              show help and exit
Flags accept both "--flag VALUE" and "--flag=VALUE".
EOF
}

# --- messages ---------------------------------------------------------------
sbjax_info() { printf '%s: %s\n' "$SBJAX_SCRIPT" "$*" >&2; }
sbjax_warn() { printf '%s: warning: %s\n' "$SBJAX_SCRIPT" "$*" >&2; }
sbjax_die() {
  printf '%s: error: %s\n' "$SBJAX_SCRIPT" "$*" >&2
  printf "Run '%s --help' for usage.\n" "$SBJAX_SCRIPT" >&2
  exit 2
}

sbjax_is_true() {
  case "${1:-}" in
    1 | true | TRUE | True | yes | YES | on | ON) return 0 ;;
    *) return 1 ;;
  esac
}

# --- flag parsing -----------------------------------------------------------
# sbjax_parse_common "$@": if "$1" is a common flag, consume it (and its value)
# and set SBJAX_SHIFT to the number of words to shift; return 0. Otherwise
# return 1. Usage in a script's argument loop (sbjax_common_flag dies on an
# unknown flag):
#   *) sbjax_common_flag "$@"
#      shift "$SBJAX_SHIFT" ;;
SBJAX_SHIFT=0
SBJAX_VALUE=""

# _sbjax_flag_value FLAG "$@": read the value of FLAG from "--flag=V" or
# "--flag V"; sets SBJAX_VALUE and SBJAX_SHIFT.
_sbjax_flag_value() {
  local flag="$1"
  shift
  case "$1" in
    "$flag"=*)
      SBJAX_VALUE="${1#*=}"
      SBJAX_SHIFT=1
      ;;
    *)
      if [ "$#" -lt 2 ]; then
        sbjax_die "$flag needs a value"
      fi
      SBJAX_VALUE="$2"
      SBJAX_SHIFT=2
      ;;
  esac
}

# sbjax_flag_into VAR FLAG "$@": the value of FLAG ("--flag=V" or "--flag V")
# into the variable named VAR; sets SBJAX_SHIFT. Usage in an argument loop:
#   --ref | --ref=*) sbjax_flag_into ref --ref "$@"
#      shift "$SBJAX_SHIFT" ;;
sbjax_flag_into() {
  local _sbjax_var="$1"
  shift
  _sbjax_flag_value "$@"
  printf -v "$_sbjax_var" '%s' "$SBJAX_VALUE"
}

sbjax_parse_common() {
  local flag="${1%%=*}"
  case "$flag" in
    --project | --zone | --accelerator-type | --name | --version | --bucket | --remote-dir)
      _sbjax_flag_value "$flag" "$@"
      case "$flag" in
        --project) SBJAX_TPU_PROJECT="$SBJAX_VALUE" ;;
        --zone) SBJAX_TPU_ZONE="$SBJAX_VALUE" ;;
        --accelerator-type) SBJAX_TPU_TYPE="$SBJAX_VALUE" ;;
        --name) SBJAX_TPU_NAME="$SBJAX_VALUE" ;;
        --version) SBJAX_TPU_VERSION="$SBJAX_VALUE" ;;
        --bucket) SBJAX_BUCKET="$SBJAX_VALUE" ;;
        --remote-dir) SBJAX_TPU_REMOTE_DIR="$SBJAX_VALUE" ;;
      esac
      return 0
      ;;
    --queued)
      SBJAX_TPU_QUEUED=1
      SBJAX_SHIFT=1
      return 0
      ;;
    --dry-run)
      SBJAX_DRY_RUN=1
      SBJAX_SHIFT=1
      return 0
      ;;
  esac
  return 1
}

# sbjax_common_flag "$@": sbjax_parse_common, or die naming the unknown argument.
sbjax_common_flag() {
  sbjax_parse_common "$@" || sbjax_die "unknown argument: $1"
}

# --- validation ---------------------------------------------------------------
# sbjax_require VALUE FLAG ENV DESCRIPTION
sbjax_require() {
  if [ -z "$1" ]; then
    sbjax_die "$4 is not set: pass $2 or set $3"
  fi
}

sbjax_require_project() { sbjax_require "$SBJAX_TPU_PROJECT" --project SBJAX_TPU_PROJECT "GCP project"; }
sbjax_require_zone() { sbjax_require "$SBJAX_TPU_ZONE" --zone SBJAX_TPU_ZONE "zone"; }
sbjax_require_name() { sbjax_require "$SBJAX_TPU_NAME" --name SBJAX_TPU_NAME "TPU name"; }
# The TPU VM every script but fetch.sh acts on: project, zone and name.
sbjax_require_location() {
  sbjax_require_project
  sbjax_require_zone
  sbjax_require_name
}
sbjax_require_type() { sbjax_require "$SBJAX_TPU_TYPE" --accelerator-type SBJAX_TPU_TYPE "accelerator type"; }

sbjax_require_bucket() {
  sbjax_require "$SBJAX_BUCKET" --bucket SBJAX_BUCKET "GCS bucket"
  # Accept "gs://bucket" as well as "bucket"; strip a trailing slash.
  SBJAX_BUCKET="${SBJAX_BUCKET#gs://}"
  SBJAX_BUCKET="${SBJAX_BUCKET%/}"
}

# Default runtime version for an accelerator type (see
# https://cloud.google.com/tpu/docs/runtimes). Sets SBJAX_TPU_VERSION if empty.
sbjax_require_version() {
  if [ -n "$SBJAX_TPU_VERSION" ]; then
    return 0
  fi
  case "$SBJAX_TPU_TYPE" in
    v2-* | v3-* | v4-*) SBJAX_TPU_VERSION="tpu-ubuntu2204-base" ;;
    v5litepod-* | v5e-*) SBJAX_TPU_VERSION="v2-alpha-tpuv5-lite" ;;
    v5p-*) SBJAX_TPU_VERSION="v2-alpha-tpuv5" ;;
    v6e-*) SBJAX_TPU_VERSION="v2-alpha-tpuv6e" ;;
    *) sbjax_die "no default runtime version for accelerator type '$SBJAX_TPU_TYPE': pass --version or set SBJAX_TPU_VERSION" ;;
  esac
}

# The remote checkout dir as a shell word for the remote command: a relative
# dir is placed under the remote $HOME via an unquoted "~/" prefix.
sbjax_remote_dir_word() {
  local dir="$SBJAX_TPU_REMOTE_DIR"
  [ -n "$dir" ] || sbjax_die "remote dir is empty: pass --remote-dir or set SBJAX_TPU_REMOTE_DIR"
  case "/$dir/" in
    */../* | */./* | //)
      sbjax_die "bad remote dir '$dir': must not be '/' or contain '.' or '..' components"
      ;;
  esac
  dir="${dir%/}"
  # The literal ~ is expanded by the remote shell, not here.
  # shellcheck disable=SC2088
  case "$dir" in
    /*) sbjax_quote "$dir" ;;
    *) printf '~/%s' "$(sbjax_quote "$dir")" ;;
  esac
}

# --- execution ----------------------------------------------------------------
# sbjax_quote WORD: print WORD quoted for a POSIX shell. Words made only of
# safe characters are printed as they are; "--flag=value" keeps "--flag=" bare
# and quotes the value; anything else is single-quoted ('\'' for a quote).
# Words with control characters (e.g. newlines) fall back to bash's printf %q.
sbjax_quote() {
  local word="$1" prefix="" rest out
  case "$word" in
    *[[:cntrl:]]*)
      printf '%q' "$word"
      return 0
      ;;
    '')
      printf "''"
      return 0
      ;;
    *[!A-Za-z0-9_./:=@%+,-]*) ;;
    *)
      printf '%s' "$word"
      return 0
      ;;
  esac
  case "$word" in
    --*=*)
      prefix="${word%%=*}="
      case "$prefix" in
        *[!A-Za-z0-9_=-]*) prefix="" ;;
        *) word="${word#*=}" ;;
      esac
      ;;
  esac
  rest="$word"
  out=""
  while :; do
    case "$rest" in
      *"'"*)
        out="$out${rest%%"'"*}'\\''"
        rest="${rest#*"'"}"
        ;;
      *) break ;;
    esac
  done
  printf "%s'%s'" "$prefix" "$out$rest"
}

# sbjax_print_cmd CMD ARGS...: print "+ CMD ARGS..." with shell quoting, so the
# line can be copy-pasted into a shell.
sbjax_print_cmd() {
  local out="+" arg
  for arg in "$@"; do
    out="$out $(sbjax_quote "$arg")"
  done
  printf '%s\n' "$out"
}

# sbjax_run CMD ARGS...: run a command, or print it under --dry-run. The
# command line is also echoed to stderr when it is really run.
sbjax_run() {
  if sbjax_is_true "$SBJAX_DRY_RUN"; then
    sbjax_print_cmd "$@"
    return 0
  fi
  sbjax_print_cmd "$@" >&2
  "$@"
}

# sbjax_buckets_in WORDS...: the distinct buckets of the gs:// URLs in WORDS,
# one a line.
sbjax_buckets_in() {
  local word rest
  for word in "$@"; do
    rest="$word"
    while [[ "$rest" == *gs://* ]]; do
      rest="${rest#*gs://}"
      printf '%s\n' "${rest%%[/ \"\',;]*}"
    done
  done | sort -u
}

# sbjax_check_bucket BUCKET: write then delete a probe object in gs://BUCKET
# (gcloud storage), so that a run never starts with a workdir it cannot write.
# Under --dry-run the probe is printed to stderr, not run.
sbjax_check_bucket() {
  local bucket="$1" probe
  case "$bucket" in
    '' | *[!a-z0-9._-]*)
      sbjax_warn "not checking gs://$bucket: not a literal bucket name"
      return 0
      ;;
  esac
  probe="gs://$bucket/.sbjax-write-probe-$(date +%s)-$$"
  if sbjax_is_true "$SBJAX_DRY_RUN"; then
    sbjax_info "would check that gs://$bucket is writable:"
    sbjax_print_cmd gcloud storage cp - "$probe" >&2
    sbjax_print_cmd gcloud storage rm "$probe" >&2
    return 0
  fi
  if ! command -v gcloud >/dev/null 2>&1; then
    sbjax_die "gcloud not found on PATH; install the Google Cloud CLI (https://cloud.google.com/sdk/docs/install)"
  fi
  # a here-string, not a pipe: a gcloud that exits before reading stdin must not fail the
  # probe by SIGPIPE under pipefail
  if ! gcloud storage cp - "$probe" <<<'sbjax write probe' >/dev/null 2>&1; then
    sbjax_die "the bucket gs://$bucket is not writable (gcloud storage cp to $probe failed); check that the bucket exists and that your account may write to it (roles/storage.objectUser), or pass --skip-bucket-check"
  fi
  gcloud storage rm "$probe" >/dev/null 2>&1 ||
    sbjax_warn "could not delete the probe object $probe"
}

# sbjax_gcloud ARGS...: run gcloud ARGS... (or print it under --dry-run).
sbjax_gcloud() {
  if ! sbjax_is_true "$SBJAX_DRY_RUN" && ! command -v gcloud >/dev/null 2>&1; then
    sbjax_die "gcloud not found on PATH; install the Google Cloud CLI (https://cloud.google.com/sdk/docs/install)"
  fi
  sbjax_run gcloud "$@"
}

