#!/usr/bin/env bash
# Build the one-folder bundle dist/mgpu-gui/ with PyInstaller, then (unless
# --no-smoke) run its smoke check: one CPU epoch of the demo through the
# bundled CLI and the bundled worker, and the bundled GUI starting.
#
#   packaging/build-bundle.sh [--no-smoke] [--with-jax]      PYTHON=... to use another venv
#
# --with-jax carries the JAX engine too (JAX installed in the venv; the smoke check then
# trains one epoch on it as well); without it the bundle leaves JAX out.
#
# Needs the project's venv (`pip install -e .`); installs PyInstaller into it.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
SMOKE=1
SMOKE_ARGS=()
export MGPU_BUNDLE_JAX=0
for arg in "$@"; do
    case $arg in
        --no-smoke) SMOKE=0 ;;
        --with-jax) MGPU_BUNDLE_JAX=1; SMOKE_ARGS+=(--jax) ;;
        *) echo "usage: packaging/build-bundle.sh [--no-smoke] [--with-jax]" >&2; exit 2 ;;
    esac
done

# PyInstaller 6.22 supports Python 3.8-3.14; hooks-contrib 2026.9 has the
# TensorFlow hook used here (checked with TF 2.21, Keras 3.15, PySide6 6.11).
"$PYTHON" -m pip install -q "pyinstaller==6.22.3" "pyinstaller-hooks-contrib==2026.9"

export TF_CPP_MIN_LOG_LEVEL=2  # TensorFlow is imported while hooks run: keep its banner out
start=$(date +%s)
rm -rf build/bundle dist/mgpu-gui
# What the bundle holds is what a wheel installs (package data included), built
# from a copy of the tree: setuptools' own build/lib can hold deleted modules.
mkdir -p build/bundle/src
tar -c --exclude=./.git --exclude=./.venv --exclude=./build --exclude=./dist \
    --exclude='*.egg-info' --exclude=__pycache__ . | tar -x -C build/bundle/src
"$PYTHON" -m pip install -q --no-deps --no-compile --target build/bundle/site build/bundle/src
"$PYTHON" -m PyInstaller --noconfirm --log-level WARN \
    --workpath build/bundle/work --distpath dist packaging/mgpu-gui.spec
ln -s mgpu-gui dist/mgpu-gui/mgpu-train  # the entry point starts the CLI under this name
cp packaging/README-bundle.txt dist/mgpu-gui/README.txt
# The menu entry, installed from the bundle with ./install-desktop.sh (icons: package data).
cp packaging/mgpu-gui.desktop packaging/install-desktop.sh dist/mgpu-gui/
echo "bundle: dist/mgpu-gui/ ($(du -sh dist/mgpu-gui | cut -f1)) built in $(($(date +%s) - start)) s"

if ((SMOKE)); then
    "$PYTHON" packaging/smoke_bundle.py dist/mgpu-gui "${SMOKE_ARGS[@]}"
fi
