#!/usr/bin/env bash
# Delete a Cloud TPU VM, or with --queued a queued resource together with its node.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<EOF
Usage: $SBJAX_SCRIPT [flags]

  gcloud compute tpus tpu-vm delete NAME ...
or with --queued:
  gcloud compute tpus queued-resources delete NAME --force ...

  --queued   the TPU is a queued resource (--force deletes its node too)
  -y, --yes  do not ask for confirmation

$(sbjax_common_help)
EOF
}

kind=tpu-vm
quiet=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --queued) kind=queued-resources; shift ;;
    -y | --yes) quiet=(--quiet); shift ;;
    *) sbjax_common_flag "$@"; shift "$SBJAX_SHIFT" ;;
  esac
done
sbjax_require_location
force=()
if [ "$kind" = queued-resources ]; then force=(--force); fi
sbjax_run gcloud compute tpus "$kind" delete "$SBJAX_TPU_NAME" ${force[@]+"${force[@]}"} \
  "${LOC[@]}" ${quiet[@]+"${quiet[@]}"}
