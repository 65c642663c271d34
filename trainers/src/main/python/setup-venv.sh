#!/usr/bin/env bash
# Makes <repo>/.venv hold exactly the pinned requirements; the test build runs this before the tests.
# Quick when the venv already matches (one interpreter start); installs with pip's configured index otherwise.
# Under CI=true every failure fails the build; elsewhere it warns, and the tests that need Python say they skipped.
set -uo pipefail
root="$(cd "${1:?usage: setup-venv.sh REPO_ROOT}" && pwd)" || exit 1
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
requirements="$here/requirements.txt"
venv="$root/.venv"

fail() {
  echo "setup-venv: $1" >&2
  echo "  fix: $2" >&2
  if [ "${CI:-}" = "true" ]; then exit 1; fi
  echo "  (not CI: continuing; the tests that need the worker's Python will be skipped)" >&2
  exit 0
}

# Exit 0 when the interpreter has every pinned distribution at its pinned version (a local label such as +cpu
# satisfies a pin without one, as in pip).
matches() {
  "$1" - "$requirements" <<'PY' 2>/dev/null
import sys
from importlib import metadata
if sys.version_info < (3, 10):
    sys.exit(1)
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, pin = line.split("==")
    try:
        have = metadata.version(name)
    except metadata.PackageNotFoundError:
        sys.exit(1)
    if have != pin and have.split("+")[0] != pin:
        sys.exit(1)
PY
}

if [ -x "$venv/bin/python" ] && matches "$venv/bin/python"; then
  exit 0
fi

python="${FINETUNE_VENV_PYTHON:-python3}"
if ! command -v "$python" >/dev/null 2>&1; then
  fail "no '$python' on PATH to create $venv" "install Python >= 3.10 (e.g. apt-get install python3 python3-venv)"
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  fail "$("$python" --version 2>&1) is too old for the worker" "install Python >= 3.10, or set FINETUNE_VENV_PYTHON"
fi

mkdir -p "$root/trainers/target"
exec 9>"$root/trainers/target/venv.lock"
flock 9
# Another build may have finished the job while this one waited for the lock.
if [ -x "$venv/bin/python" ] && matches "$venv/bin/python"; then
  exit 0
fi

created=0
if [ ! -x "$venv/bin/python" ]; then
  echo "setup-venv: creating $venv from $requirements" >&2
  "$python" -m venv "$venv" || fail "'$python -m venv $venv' failed" "install the venv module (apt-get install python3-venv)"
  created=1
else
  echo "setup-venv: $venv differs from $requirements; installing the pinned versions" >&2
fi
# No retries: an unreachable index should fail in seconds, not minutes.
if ! PIP_RETRIES=0 PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/python" -m pip install -q -r "$requirements"; then
  # A venv we created and could not fill is removed, so the next build starts clean instead of trusting it.
  if [ "$created" = 1 ]; then rm -rf "$venv"; fi
  fail "pip install -r $requirements failed (output above)" \
       "check pip's index (pip config list); then run: $python -m venv $venv && $venv/bin/pip install -r $requirements"
fi
matches "$venv/bin/python" || fail "$venv still does not match $requirements after pip install" \
    "rm -rf $venv and build again"
echo "setup-venv: $venv ready" >&2
