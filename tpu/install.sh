#!/usr/bin/env bash
# Install sbjax (the `train` and `tpu` extras: training and jax[tpu]) on every worker of the TPU VM.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<EOF
Usage: $SBJAX_SCRIPT [flags]

Ships the committed files of REF (git archive) to every worker, unpacks them into ~/sbjax
(replacing it) and runs pip install -e '.[train,tpu]' gcsfs there (gcsfs: --workdir=gs://...).

  --ref REF   the git ref to ship [default HEAD]

$(sbjax_common_help)
EOF
}

ref=HEAD
while [ "$#" -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --ref) ref="${2:?--ref needs a value}"; shift 2 ;;
    --ref=*) ref="${1#*=}"; shift ;;
    *) sbjax_common_flag "$@"; shift "$SBJAX_SHIFT" ;;
  esac
done
sbjax_require_location
if [ "$ref" = HEAD ] && ! git -C "$SBJAX_ROOT" diff --quiet HEAD --; then
  printf '%s: note: uncommitted changes are not shipped\n' "$SBJAX_SCRIPT" >&2
fi
tarball="$(mktemp -d)/sbjax.tar.gz"
trap 'rm -rf "$(dirname "$tarball")"' EXIT
libtpu="https://storage.googleapis.com/jax-releases/libtpu_releases.html"
sbjax_run git -C "$SBJAX_ROOT" archive --format=tar.gz -o "$tarball" "$ref"
sbjax_run gcloud compute tpus tpu-vm scp "$tarball" "$SBJAX_TPU_NAME:sbjax.tar.gz" \
  --worker=all "${LOC[@]}"
sbjax_run gcloud compute tpus tpu-vm ssh "$SBJAX_TPU_NAME" --worker=all "${LOC[@]}" \
  --command="set -e; rm -rf ~/sbjax; mkdir ~/sbjax; tar -xzf ~/sbjax.tar.gz -C ~/sbjax; \
cd ~/sbjax; python3 -m pip install -e '.[train,tpu]' gcsfs -f $libtpu; \
python3 -c 'import jax, sbjax; print(jax.devices())'"
