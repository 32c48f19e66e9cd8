#!/usr/bin/env bash
# Install sbjax (with the `tpu` extra, i.e. jax[tpu]) on every TPU worker.
set -euo pipefail

# shellcheck source=SCRIPTDIR/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  cat <<EOF
Usage: $SBJAX_SCRIPT [flags]

Install sbjax on all workers of the TPU VM:
  1. git archive --format=tar.gz REF   (the local checkout; committed files only)
  2. gcloud compute tpus tpu-vm scp TARBALL NAME:sbjax.tar.gz --worker=all ...
  3. gcloud compute tpus tpu-vm ssh NAME --worker=all --command='
       unpack into ~/REMOTE_DIR; pip install -e ".[tpu]"'
With --clone URL, step 1-2 are replaced by 'git clone URL' on every worker.

Required: --project, --zone, --name (or their SBJAX_* variables).

Flags:
  --ref REF               git ref to ship or check out   [default HEAD]
  --clone URL             clone URL on the workers instead of copying a tarball
  --extras EXTRAS         pip extras to install          [default tpu]
  --pip-args ARGS         extra words for 'pip install' (word-split), e.g.
                          --pip-args '--upgrade --no-cache-dir'
                                                         [SBJAX_PIP_ARGS]

$(sbjax_common_help)

Note: the remote directory is replaced (rm -rf) on each install.
EOF
}

ref=HEAD
clone_url=""
extras=tpu
pip_args="${SBJAX_PIP_ARGS:-}"
while [ "$#" -gt 0 ]; do
  case "$1" in
    -h | --help)
      usage
      exit 0
      ;;
    --ref | --ref=*)
      sbjax_flag_into ref --ref "$@"
      shift "$SBJAX_SHIFT"
      ;;
    --clone | --clone=*)
      sbjax_flag_into clone_url --clone "$@"
      shift "$SBJAX_SHIFT"
      ;;
    --extras | --extras=*)
      sbjax_flag_into extras --extras "$@"
      shift "$SBJAX_SHIFT"
      ;;
    --pip-args | --pip-args=*)
      sbjax_flag_into pip_args --pip-args "$@"
      shift "$SBJAX_SHIFT"
      ;;
    *)
      sbjax_common_flag "$@"
      shift "$SBJAX_SHIFT"
      ;;
  esac
done

sbjax_require_location
remote_dir="$(sbjax_remote_dir_word)"
loc=(--project="$SBJAX_TPU_PROJECT" --zone="$SBJAX_TPU_ZONE")

# libtpu wheels for older jax releases live on this index; harmless otherwise.
libtpu_index="https://storage.googleapis.com/jax-releases/libtpu_releases.html"
pkg=".[$extras]"
if [ -z "$extras" ]; then
  pkg="."
fi
# Build the pip command with each word quoted for the remote shell.
# gcsfs: the gs:// file system of etils.epath, for --workdir=gs://BUCKET/... .
pip_cmd="python3 -m pip install -e $(sbjax_quote "$pkg") gcsfs -f $(sbjax_quote "$libtpu_index")"
if [ -n "$pip_args" ]; then
  read -r -a pip_words <<<"$pip_args"
  for word in ${pip_words[@]+"${pip_words[@]}"}; do
    pip_cmd="$pip_cmd $(sbjax_quote "$word")"
  done
fi

remote_tarball="sbjax.tar.gz"
tmpdir=""
cleanup() {
  if [ -n "$tmpdir" ]; then
    rm -rf "$tmpdir"
  fi
}
trap cleanup EXIT

if [ -n "$clone_url" ]; then
  fetch_cmd="rm -rf $remote_dir && git clone $(sbjax_quote "$clone_url") $remote_dir && cd $remote_dir && git checkout $(sbjax_quote "$ref")"
else
  if ! sbjax_is_true "$SBJAX_DRY_RUN"; then
    git -C "$SBJAX_ROOT" rev-parse --verify -q "$ref^{commit}" >/dev/null ||
      sbjax_die "git ref '$ref' not found in $SBJAX_ROOT (commit your work, or pass --ref)"
    if [ "$ref" = HEAD ] && ! git -C "$SBJAX_ROOT" diff --quiet HEAD --; then
      sbjax_warn "uncommitted changes are NOT shipped (git archive uses committed files only)"
    fi
    tmpdir="$(mktemp -d)"
    tarball="$tmpdir/$remote_tarball"
  else
    tarball="${TMPDIR:-/tmp}/sbjax.XXXXXX/$remote_tarball"
  fi
  sbjax_run git -C "$SBJAX_ROOT" archive --format=tar.gz -o "$tarball" "$ref"
  sbjax_gcloud compute tpus tpu-vm scp "$tarball" "$SBJAX_TPU_NAME:$remote_tarball" \
    --worker=all "${loc[@]}"
  fetch_cmd="rm -rf $remote_dir && mkdir -p $remote_dir && tar -xzf ~/$remote_tarball -C $remote_dir && rm -f ~/$remote_tarball && cd $remote_dir"
fi

remote_cmd="set -e; $fetch_cmd && python3 -m pip install -U pip && $pip_cmd && python3 -c 'import jax, sbjax; print(\"jax\", jax.__version__)'"
sbjax_gcloud compute tpus tpu-vm ssh "$SBJAX_TPU_NAME" --worker=all "${loc[@]}" \
  --command="$remote_cmd"
