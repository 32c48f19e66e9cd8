#!/usr/bin/env bash
# Copy results (metrics, reports, checkpoints) from GCS to a local directory.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<EOF
Usage: $SBJAX_SCRIPT [flags] SRC [DEST]

  gcloud storage cp -r gs://BUCKET/SRC DEST
SRC is a gs:// URL or a path in --bucket; DEST defaults to results/.

$(sbjax_common_help)
EOF
}

args=()
while [ "$#" -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    -*) sbjax_common_flag "$@"; shift "$SBJAX_SHIFT" ;;
    *) args+=("$1"); shift ;;
  esac
done
[ "${#args[@]}" -ge 1 ] && [ "${#args[@]}" -le 2 ] || sbjax_die "expected SRC [DEST] (see --help)"
src="${args[0]}"
if [ "${src#gs://}" = "$src" ]; then
  [ -n "$SBJAX_BUCKET" ] || sbjax_die "$src is not a gs:// URL: pass --bucket or set SBJAX_BUCKET"
  src="gs://${SBJAX_BUCKET#gs://}/${src#/}"
fi
dest="${args[1]:-results/}"
sbjax_run mkdir -p "$dest"
sbjax_run gcloud storage cp -r "$src" "$dest"
