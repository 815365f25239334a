#!/usr/bin/env bash
# Build the sdist and the wheel, check them as PyPI will (twine check --strict), install the
# wheel into a clean venv (no dev dependencies) and smoke-test it there: import, the
# `aiozklock` script, a lock cycle and `aiozklock run` against a throwaway ZooKeeper, and the
# pytest plugin on that server (pytest installed from PyPI last). Run by `bash .ci/dev.sh test`; alone:
#
#   bash .ci/wheel-smoke.sh
#
# Environment: PACKAGING_PYTHON (a Python with build and twine; default .venv's, which has
# them from the dev group), AIOZKLOCK_ZK_HOSTS (use these servers instead of starting one).
# Everything goes to a temp directory, removed at exit; the servers it starts are stopped.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${PACKAGING_PYTHON:-$ROOT/.venv/bin/python}"
SMOKE="$ROOT/.ci/wheel_smoke.py"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
unset PYTHONPATH  # the repository must not be importable in the clean venv

WORK="$(mktemp -d "${TMPDIR:-/tmp}/aiozklock-wheel-smoke.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
START=$SECONDS
step() { printf '==> wheel smoke (%ss): %s\n' "$((SECONDS - START))" "$*"; }

step "python -m build (sdist, then the wheel from the sdist)"
"$TOOLS" -m build --outdir "$WORK/dist" "$ROOT" >"$WORK/build.log" 2>&1 \
    || { cat "$WORK/build.log"; exit 1; }
tail -n 1 "$WORK/build.log" | sed 's/^/  /'

step "twine check --strict"
COLUMNS=200 "$TOOLS" -m twine --no-color check --strict "$WORK"/dist/* | sed 's/^/  /'

step "the wheel's files"
"$TOOLS" "$SMOKE" check-wheel "$WORK/dist"

step "a clean venv with only the wheel and its dependencies"
"$TOOLS" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q "$WORK"/dist/*.whl
printf '  installed: %s\n' "$("$WORK/venv/bin/python" -m pip freeze | tr '\n' ' ')"

step "import, the aiozklock script, a lock cycle and 'aiozklock run', then the pytest plugin"
VERSION="$(basename "$WORK"/dist/*.whl | cut -d- -f2)"
(cd "$WORK" && "$WORK/venv/bin/python" "$SMOKE" run "$VERSION")
step "passed"
