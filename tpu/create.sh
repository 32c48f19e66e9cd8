#!/usr/bin/env bash
# Create a Cloud TPU VM, or a queued resource that provisions one.
set -euo pipefail

# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<EOF
Usage: $SBJAX_SCRIPT [flags] [-- EXTRA_GCLOUD_FLAGS...]

Create a TPU VM:
  gcloud compute tpus tpu-vm create NAME --accelerator-type=T --version=V ...
or, with --queued, a queued resource whose node has the same name:
  gcloud compute tpus queued-resources create NAME --node-id=NAME \\
      --accelerator-type=T --runtime-version=V ...

Required: --project, --zone, --name (or their SBJAX_* variables).

Flags:
  --spot                  request Spot capacity (TPU VM or queued resource)
  --best-effort           queued resource at the best-effort tier (implies
                          --queued; uses 'gcloud alpha')
  --async                 return without waiting for the operation
  -- FLAGS...             passed verbatim to gcloud (e.g. --network=NET)

$(sbjax_common_help)

Examples:
  $SBJAX_SCRIPT --project my-proj --zone us-west4-a --name my-tpu
  SBJAX_TPU_TYPE=v4-32 $SBJAX_SCRIPT --queued --spot --name my-pod
EOF
}

spot=0
best_effort=0
async=0
extra=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    -h | --help)
      usage
      exit 0
      ;;
    --spot)
      spot=1
      shift
      ;;
    --best-effort)
      best_effort=1
      SBJAX_TPU_QUEUED=1
      shift
      ;;
    --async)
      async=1
      shift
      ;;
    --)
      shift
      extra=("$@")
      break
      ;;
    *)
      sbjax_common_flag "$@"
      shift "$SBJAX_SHIFT"
      ;;
  esac
done

sbjax_require_location
sbjax_require_type
sbjax_require_version
if [ "$spot" = 1 ] && [ "$best_effort" = 1 ]; then
  sbjax_die "--spot and --best-effort are mutually exclusive"
fi

args=()
if sbjax_is_true "$SBJAX_TPU_QUEUED"; then
  if [ "$best_effort" = 1 ]; then
    args+=(alpha)
  fi
  args+=(compute tpus queued-resources create "$SBJAX_TPU_NAME"
    --node-id="$SBJAX_TPU_NAME"
    --project="$SBJAX_TPU_PROJECT" --zone="$SBJAX_TPU_ZONE"
    --accelerator-type="$SBJAX_TPU_TYPE"
    --runtime-version="$SBJAX_TPU_VERSION")
  if [ "$best_effort" = 1 ]; then
    args+=(--best-effort)
  fi
else
  args+=(compute tpus tpu-vm create "$SBJAX_TPU_NAME"
    --project="$SBJAX_TPU_PROJECT" --zone="$SBJAX_TPU_ZONE"
    --accelerator-type="$SBJAX_TPU_TYPE"
    --version="$SBJAX_TPU_VERSION")
fi
if [ "$spot" = 1 ]; then
  args+=(--spot)
fi
if [ "$async" = 1 ]; then
  args+=(--async)
fi

sbjax_gcloud "${args[@]}" ${extra[@]+"${extra[@]}"}

if sbjax_is_true "$SBJAX_TPU_QUEUED" && ! sbjax_is_true "$SBJAX_DRY_RUN"; then
  sbjax_info "queued resource requested; check its state (wait for ACTIVE) with:"
  sbjax_print_cmd gcloud compute tpus queued-resources describe "$SBJAX_TPU_NAME" \
    --project="$SBJAX_TPU_PROJECT" --zone="$SBJAX_TPU_ZONE" >&2
fi
