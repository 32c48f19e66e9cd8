#!/usr/bin/env bash
# Delete a Cloud TPU VM, or a queued resource together with its node.
set -euo pipefail

# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<EOF
Usage: $SBJAX_SCRIPT [flags]

Delete the TPU VM:
  gcloud compute tpus tpu-vm delete NAME ...
or, with --queued, the queued resource and its node:
  gcloud compute tpus queued-resources delete NAME --force ...

Required: --project, --zone, --name (or their SBJAX_* variables).

Flags:
  -y, --yes               do not ask for confirmation (gcloud --quiet)
  --async                 return without waiting for the operation

$(sbjax_common_help)
EOF
}

yes=0
async=0
while [ "$#" -gt 0 ]; do
  case "$1" in
    -h | --help)
      usage
      exit 0
      ;;
    -y | --yes)
      yes=1
      shift
      ;;
    --async)
      async=1
      shift
      ;;
    *)
      sbjax_common_flag "$@"
      shift "$SBJAX_SHIFT"
      ;;
  esac
done

sbjax_require_location

if sbjax_is_true "$SBJAX_TPU_QUEUED"; then
  # --force also deletes the node the queued resource provisioned.
  args=(compute tpus queued-resources delete "$SBJAX_TPU_NAME" --force)
else
  args=(compute tpus tpu-vm delete "$SBJAX_TPU_NAME")
fi
args+=(--project="$SBJAX_TPU_PROJECT" --zone="$SBJAX_TPU_ZONE")
if [ "$async" = 1 ]; then
  args+=(--async)
fi
if [ "$yes" = 1 ]; then
  args+=(--quiet)
fi

sbjax_gcloud "${args[@]}"
