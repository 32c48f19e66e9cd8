#!/usr/bin/env bash
# Copy results (checkpoints, metrics, logs) from GCS to a local directory.
set -euo pipefail

# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<EOF
Usage: $SBJAX_SCRIPT [flags] [SRC [DEST]]

Copy a run directory from GCS:
  gcloud storage cp -r gs://BUCKET/SRC DEST

SRC is a path inside the bucket (default: runs/NAME, using --name) or a
full gs:// URL (then --bucket is not needed). DEST defaults to results/.

Flags:
  --no-clobber            skip files that already exist locally

$(sbjax_common_help)

Examples:
  $SBJAX_SCRIPT --bucket my-bucket runs/pythia-70m results/
  SBJAX_BUCKET=my-bucket $SBJAX_SCRIPT --name my-tpu   # gs://my-bucket/runs/my-tpu
EOF
}

no_clobber=0
positional=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    -h | --help)
      usage
      exit 0
      ;;
    --no-clobber)
      no_clobber=1
      shift
      ;;
    --)
      shift
      positional+=("$@")
      break
      ;;
    -*)
      sbjax_common_flag "$@"
      shift "$SBJAX_SHIFT"
      ;;
    *)
      positional+=("$1")
      shift
      ;;
  esac
done

if [ "${#positional[@]}" -gt 2 ]; then
  sbjax_die "expected at most two arguments (SRC DEST), got ${#positional[@]}"
fi
src="${positional[0]:-}"
dest="${positional[1]:-results/}"

case "$src" in
  gs://*) url="$src" ;;
  *)
    sbjax_require_bucket
    if [ -z "$src" ]; then
      sbjax_require "$SBJAX_TPU_NAME" --name SBJAX_TPU_NAME \
        "source path (no SRC argument given, so the default runs/NAME needs a TPU name)"
      src="runs/$SBJAX_TPU_NAME"
    fi
    url="gs://$SBJAX_BUCKET/${src#/}"
    ;;
esac

sbjax_run mkdir -p "$dest"
args=(storage cp -r)
if [ "$no_clobber" = 1 ]; then
  args+=(--no-clobber)
fi
args+=("$url" "$dest")
if [ -n "$SBJAX_TPU_PROJECT" ]; then
  args+=(--project="$SBJAX_TPU_PROJECT")
fi
sbjax_gcloud "${args[@]}"
