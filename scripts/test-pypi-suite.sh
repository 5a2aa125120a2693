#!/usr/bin/env bash
# The `efa` package's own test suite (its PyPI sdist, efa==2026.10.22, pinned by hash) run
# against this repository's package: programs nobody here wrote. Its tests skip themselves
# when they find no EFA device or lack a feature; here every test must run and pass, save
# those that need torch (GPUDirect through PyTorch, which this suite does not install): a
# skip for any other reason fails the run, so the suite cannot pass by skipping.
#
# Usage: scripts/test-pypi-suite.sh PYTHON EFA_SIM
#   PYTHON: the interpreter of a venv holding this package (the wheel), pytest and numpy
#   (scripts/test-python.sh makes one and calls this script); EFA_SIM: the efa-sim binary
#   to run it on (on the caller's EFA_SIM_PROFILE).
set -euo pipefail
python=$(realpath -s "${1:?usage: test-pypi-suite.sh PYTHON EFA_SIM}")  # -s: a venv's python is a link
sim=$(realpath "${2:?usage: test-pypi-suite.sh PYTHON EFA_SIM}")
version=2026.10.22
sha256=a9bee265dd36916396f15afbd5a49c5bf2226d9868378390f47db3cb398ac811
fail() { echo "test-pypi-suite: $*" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/efa-pypi-suite.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "efa==$version --hash=sha256:$sha256" >"$tmp/req.txt"
"$python" -m pip download -q --disable-pip-version-check --no-binary :all: --no-deps \
  --require-hashes -r "$tmp/req.txt" -d "$tmp" || fail "could not download the efa $version sdist"
tar -xzf "$tmp/efa-$version.tar.gz" -C "$tmp"
# Only its tests and pytest settings (markers): its own sources must not be importable.
mkdir "$tmp/suite"
cp -r "$tmp/efa-$version/tests" "$tmp/efa-$version/pyproject.toml" "$tmp/suite/"
# This package (it alone has the array API), not the PyPI one.
"$python" -c 'import efa, sys; print("test-pypi-suite: testing", efa.__file__); sys.exit(not hasattr(efa, "post_array"))' ||
  fail "$python imports another efa package than this repository's"
(cd "$tmp/suite" && timeout 600 "$sim" run --gpus 1 -- "$python" -m pytest -q -rs -p no:cacheprovider \
  --junitxml="$tmp/report.xml" tests) || fail "the efa $version suite failed against this package"
"$python" - "$tmp/report.xml" <<'PY'
import sys
import xml.etree.ElementTree as ET

cases = list(ET.parse(sys.argv[1]).getroot().iter("testcase"))
skips = [(c.get("name"), s.get("message", "") + (s.text or "")) for c in cases for s in c.iter("skipped")]
bad = [(n, m) for n, m in skips if "torch" not in m]
ran = len(cases) - len(skips)
if bad or ran == 0:
    sys.exit("test-pypi-suite: %d tests skipped for a reason other than torch, the first: %s"
             % (len(bad), "; ".join("%s (%s)" % (n, m.split("/")[0]) for n, m in bad[:3])))
print("test-pypi-suite: %d of the efa package's tests ran and passed, %d skipped (torch)" % (ran, len(skips)))
PY
