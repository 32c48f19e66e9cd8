#!/usr/bin/env bash
# The wheels that `import sbjax` lacks on the lent GPU machine, for device_check.sh to install
# offline (pip --no-index). Run on a machine with a network, from anywhere:
#   bash benchmarks/device_wheels.sh [DIR]      (default: .whl in the repository root)
# The GPU machine's image has python 3.12 with jax (CUDA), flax, optax, orbax, torch and
# transformers, but not these (seen there, see the accelerator issue); each is pinned to the
# version installed beside this script's python, so the device runs what the suite tested.
# promise has no wheel on PyPI: it is built here (pure python). About 10 MiB in all; the
# directory must be ignored by git (device_check.sh's help: carry [".whl"]).
set -euo pipefail

cd "$(dirname "$0")/.."
DIR="${1:-.whl}"
PY="${PYTHON:-$(command -v python3 || command -v python)}"
NEEDED=(ml-collections tensorboardX tensorflow-datasets array-record dm-tree simple-parsing
  termcolor toml immutabledict tensorflow-metadata googleapis-common-protos docstring-parser)
pinned() {  # NAME==VERSION as installed here, or NAME alone
  "${PY}" -c 'import importlib.metadata as m, sys
try: print(f"{sys.argv[1]}=={m.version(sys.argv[1])}")
except m.PackageNotFoundError: print(sys.argv[1])' "$1"
}
mkdir -p "${DIR}"
SPECS=()
for name in "${NEEDED[@]}"; do SPECS+=("$(pinned "${name}")"); done
"${PY}" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "${DIR}" "${SPECS[@]}"
"${PY}" -m pip wheel -q --no-deps -w "${DIR}" "$(pinned promise)"
ignored=0
git check-ignore -q "${DIR}" 2>/dev/null || ignored=$?
case "${ignored}" in
  0) ;;
  1) echo "note: ${DIR} is not ignored by git; add it to $(git rev-parse --git-path info/exclude)" >&2 ;;
  *) echo "note: ${DIR} is outside the repository; a device run carries only paths inside it" \
       "(run with no DIR for .whl, then carry [\".whl\"])" >&2 ;;
esac
ls -la "${DIR}"
du -sh "${DIR}"
