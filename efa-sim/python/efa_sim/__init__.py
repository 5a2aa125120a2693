"""efa-sim for Python: run EFA programs and test suites on a software EFA device.

Installing the ``efa-sim`` wheel gives the ``efa-sim`` command (``efa-sim run -- python
-m pytest`` runs a test suite with the software device selected) and this module, for
test fixtures that start the programs under test themselves::

    import subprocess, efa_sim
    subprocess.run(["./my_efa_app"], env=efa_sim.env(), check=True)

The software device is a stand-in ``libibverbs.so.1`` + ``libefa.so.1``
(:func:`library_path`); :func:`env` returns the environment that puts it under a
program (``LD_LIBRARY_PATH`` to the two names, ``SYSFS_PATH`` to a generated sysfs tree
for libfabric), computed by the installed ``efa-sim`` command itself, so it always
matches what ``efa-sim run`` does. Devices report a ``fw_ver`` starting with
``efa-sim``; configuration is by ``EFA_SIM_*`` environment variables (see the efa-sim
README).
"""

import json
import os
import shutil
import subprocess
import sys
from typing import Mapping, Optional

__all__ = ["env", "executable", "library_path", "EfaSimError"]

_DIST = "efa-sim"
_LIBRARY = "libefa_sim.so"
# A child that reports its environment: what `efa-sim run` gives a program.
_DUMP_ENV = "import json, os, sys; sys.stdout.write(json.dumps(dict(os.environ)))"


class EfaSimError(RuntimeError):
    """The efa-sim command is missing or refused to select the device."""


def _installed(*tail: str) -> Optional[str]:
    """The file of this distribution whose path ends with ``tail`` (from its RECORD)."""
    try:
        from importlib import metadata
        files = metadata.distribution(_DIST).files or []
    except Exception:  # not installed as a distribution (e.g. a source checkout)
        return None
    for f in files:
        if tuple(f.parts[-len(tail):]) == tail:
            path = os.path.abspath(str(f.locate()))
            if os.path.isfile(path):
                return path
    return None


def executable() -> str:
    """Path of the ``efa-sim`` command installed with this package (else the one on
    ``PATH``)."""
    found = _installed("bin", "efa-sim") or shutil.which("efa-sim")
    if not found:
        raise EfaSimError("the efa-sim command is not installed (pip install efa-sim)")
    return found


def library_path() -> str:
    """Path of ``libefa_sim.so``, the shared object that stands in for
    ``libibverbs.so.1`` and ``libefa.so.1`` (the wheel installs it under
    ``<prefix>/lib/efa-sim/``). Without that file, the library the command selects."""
    shipped = _installed("lib", "efa-sim", _LIBRARY)
    if shipped:
        return shipped
    beside = os.path.join(os.path.dirname(os.path.dirname(executable())), "lib", "efa-sim",
                          _LIBRARY)
    if os.path.isfile(beside):
        return beside
    lib_dir = env()["LD_LIBRARY_PATH"].split(":")[0]
    return os.path.realpath(os.path.join(lib_dir, "libibverbs.so.1"))


def env(base: Optional[Mapping[str, str]] = None, timeout: float = 60.0) -> dict:
    """The environment ``base`` (default: ``os.environ``) with the software device
    selected, as a new dict for ``subprocess``'s ``env=``. ``EFA_SIM_*`` variables in
    ``base`` (device count, profile, faults) are honoured and kept."""
    base = dict(os.environ if base is None else base)
    run_env = dict(base)
    added_lib = False
    if "EFA_SIM_LIB" not in run_env:
        shipped = _installed("lib", "efa-sim", _LIBRARY)
        if shipped:
            run_env["EFA_SIM_LIB"] = shipped
            added_lib = True
    cmd = [executable(), "run", "--", sys.executable, "-c", _DUMP_ENV]
    try:
        out = subprocess.run(cmd, env=run_env, capture_output=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EfaSimError(f"{cmd[0]} run failed: {e}") from e
    if out.returncode != 0:
        raise EfaSimError(f"{cmd[0]} run exited {out.returncode}: "
                          f"{out.stderr.decode(errors='replace').strip()}")
    selected = json.loads(out.stdout)
    if added_lib:
        selected.pop("EFA_SIM_LIB", None)
    result = dict(base)
    result.update({k: v for k, v in selected.items() if base.get(k) != v})
    return result


def _version() -> str:
    try:
        from importlib import metadata
        return metadata.version(_DIST)
    except Exception:
        return "0+unknown"


__version__ = _version()
