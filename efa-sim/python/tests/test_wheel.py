"""The installed wheel's layout: the command in the environment's scripts directory,
the library in <prefix>/lib/efa-sim/, found by both the command (relative lookup) and
the module. Only meaningful for an installed wheel; fails when efa-sim is not one."""

import os
import subprocess
import sys
import sysconfig
import unittest
from importlib import metadata

import efa_sim
from test_api import clean_base, first_lib_dir


class WheelTest(unittest.TestCase):
    def test_the_distribution_is_installed_with_its_version(self):
        self.assertEqual(efa_sim.__version__, metadata.version("efa-sim"))
        self.assertTrue(efa_sim.__file__.startswith(sysconfig.get_paths()["purelib"])
                        or efa_sim.__file__.startswith(sysconfig.get_paths()["platlib"]),
                        efa_sim.__file__)

    def test_command_and_library_sit_where_the_wheel_put_them(self):
        exe = efa_sim.executable()
        self.assertEqual(os.path.dirname(exe), sysconfig.get_paths()["scripts"])
        self.assertTrue(os.access(exe, os.X_OK), exe)
        lib = efa_sim.library_path()
        want = os.path.join(sysconfig.get_paths()["data"], "lib", "efa-sim", "libefa_sim.so")
        self.assertEqual(os.path.realpath(lib), os.path.realpath(want))

    def test_the_command_alone_selects_the_wheel_library(self):
        # No EFA_SIM_LIB: the command's own lookup (../lib/efa-sim) must find it.
        out = subprocess.run([efa_sim.executable(), "env"], env=clean_base(),
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        line = next(l for l in out.stdout.splitlines() if "LD_LIBRARY_PATH=" in l)
        lib_dir = line.split("'")[1]
        target = os.path.realpath(os.path.join(lib_dir, "libibverbs.so.1"))
        self.assertEqual(target, os.path.realpath(efa_sim.library_path()))
        self.assertEqual(first_lib_dir(efa_sim.env(clean_base())), lib_dir)


if __name__ == "__main__":
    unittest.main(argv=sys.argv)
