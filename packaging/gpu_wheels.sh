#!/usr/bin/env bash
# Fills .whl/ with exactly what the lent GPU machine lacks to run tests/gpu (tests/gpu/run
# installs them there). That machine has Python 3.12, JAX with its CUDA plugin, numpy,
# h5py, pillow, ml-dtypes, rich, absl-py, packaging, nvidia-ml-py, pytest and
# pytest-timeout, but no TensorFlow, no Qt, no Keras and no network (the device tool's
# KINDS.md lists its packages). What it lacks: Keras and the two of Keras' needs it lacks
# (namex, optree), platformdirs (the app's folders), and this project, as a wheel of this
# tree. The versions are the ones the suite is run with. Run where there is network:
#     bash packaging/gpu_wheels.sh
# Make them again after changing the project: tests/gpu/run refuses a stale project wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
LIMIT_MIB=64  # what the device tool carries, the whole working tree included

rm -rf .whl
mkdir .whl
# Wheels for CPython 3.12 on x86-64 Linux whatever this machine is; --no-deps: nothing
# comes along that is not named here.
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    "keras==3.15.1" "namex==0.1.0" "optree==0.20.0" "platformdirs==4.14.8"

# The project from a copy of the tree: setuptools would reuse a build/ folder here, stale
# files and all.
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
tar -C . --exclude=./.git --exclude=./.whl --exclude=./.venv --exclude=./build \
    --exclude='*.egg-info' --exclude=__pycache__ --exclude=./runs -cf - . | tar -C "$copy" -xf -
"$PYTHON" -m pip wheel --quiet --no-deps -w .whl "$copy"

ls -1 .whl
size=$(du -sm .whl | cut -f1)
if [ "$size" -gt "$LIMIT_MIB" ]; then
    echo "error: .whl holds ${size} MiB, more than the ${LIMIT_MIB} MiB the device tool carries" >&2
    exit 1
fi
echo "${size} MiB in .whl; on the GPU machine (device tool, carry [\".whl\"]): bash tests/gpu/run"
