#!/usr/bin/env bash
# Create a Cloud TPU VM, or with --queued a queued resource that provisions one.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<EOF
Usage: $SBJAX_SCRIPT [flags] [-- EXTRA_GCLOUD_FLAGS...]

  gcloud compute tpus tpu-vm create NAME --accelerator-type=T --version=V ...
or with --queued:
  gcloud compute tpus queued-resources create NAME --node-id=NAME ...

  --queued   a queued resource (wait until 'gcloud compute tpus queued-resources describe
             NAME' says ACTIVE)
  --spot     Spot capacity
  -- FLAGS   passed to gcloud as they are (e.g. --network=NET)

$(sbjax_common_help)
EOF
}

queued=0
spot=()
extra=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --queued) queued=1; shift ;;
    --spot) spot=(--spot); shift ;;
    --) shift; extra=("$@"); break ;;
    *) sbjax_common_flag "$@"; shift "$SBJAX_SHIFT" ;;
  esac
done
sbjax_require_location
if [ -z "$SBJAX_TPU_VERSION" ]; then  # https://cloud.google.com/tpu/docs/runtimes
  case "$SBJAX_TPU_TYPE" in
    v2-* | v3-* | v4-*) SBJAX_TPU_VERSION=tpu-ubuntu2204-base ;;
    v5litepod-* | v5e-*) SBJAX_TPU_VERSION=v2-alpha-tpuv5-lite ;;
    v5p-*) SBJAX_TPU_VERSION=v2-alpha-tpuv5 ;;
    v6e-*) SBJAX_TPU_VERSION=v2-alpha-tpuv6e ;;
    *) sbjax_die "no default runtime for '$SBJAX_TPU_TYPE': pass --version" ;;
  esac
fi

if [ "$queued" = 1 ]; then
  sbjax_run gcloud compute tpus queued-resources create "$SBJAX_TPU_NAME" \
    --node-id="$SBJAX_TPU_NAME" "${LOC[@]}" --accelerator-type="$SBJAX_TPU_TYPE" \
    --runtime-version="$SBJAX_TPU_VERSION" ${spot[@]+"${spot[@]}"} ${extra[@]+"${extra[@]}"}
else
  sbjax_run gcloud compute tpus tpu-vm create "$SBJAX_TPU_NAME" "${LOC[@]}" \
    --accelerator-type="$SBJAX_TPU_TYPE" --version="$SBJAX_TPU_VERSION" \
    ${spot[@]+"${spot[@]}"} ${extra[@]+"${extra[@]}"}
fi
