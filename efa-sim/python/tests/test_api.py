"""The efa_sim module: env() selects the software device for child processes, and
library_path() names the library it selects. Runs anywhere the efa_sim module and an
efa-sim command are available (the installed wheel, or a source checkout with
PYTHONPATH and PATH pointing at them); it need not run on the device itself."""

import os
import subprocess
import sys
import unittest

import efa_sim

HERE = os.path.dirname(os.path.abspath(__file__))
CONSUMER = os.path.join(HERE, "verbs_consumer.py")


def clean_base():
    """This environment without any selection or efa-sim configuration, so that the
    tests mean the same when they themselves run under `efa-sim run`."""
    drop = ("LD_LIBRARY_PATH", "SYSFS_PATH")
    return {k: v for k, v in os.environ.items()
            if k not in drop and not k.startswith("EFA_SIM_")}


def first_lib_dir(env):
    return env["LD_LIBRARY_PATH"].split(":")[0]


class EnvTest(unittest.TestCase):
    def test_env_links_both_sonames_to_library_path(self):
        env = efa_sim.env(clean_base())
        lib = efa_sim.library_path()
        with open(lib, "rb") as f:
            head = f.read(4)
        self.assertEqual(head, b"\x7fELF", lib)
        for name in ("libibverbs.so.1", "libefa.so.1"):
            target = os.path.realpath(os.path.join(first_lib_dir(env), name))
            self.assertEqual(target, os.path.realpath(lib), name)

    def test_env_points_sysfs_at_a_tree_for_the_configured_devices(self):
        base = clean_base()
        base["EFA_SIM_DEVICES"] = "3"
        env = efa_sim.env(base)
        self.assertEqual(env["EFA_SIM_DEVICES"], "3")
        devices = sorted(os.listdir(os.path.join(env["SYSFS_PATH"], "class", "infiniband")))
        self.assertEqual(devices, ["efa_0", "efa_1", "efa_2"])

    def test_env_keeps_the_callers_variables_and_library_path(self):
        base = clean_base()
        base["LD_LIBRARY_PATH"] = "/opt/elsewhere"
        base["MY_SETTING"] = "kept"
        env = efa_sim.env(base)
        self.assertTrue(env["LD_LIBRARY_PATH"].endswith(":/opt/elsewhere"), env["LD_LIBRARY_PATH"])
        self.assertEqual(env["MY_SETTING"], "kept")
        self.assertNotIn("EFA_SIM_LIB", env)
        self.assertEqual(base["LD_LIBRARY_PATH"], "/opt/elsewhere", "base is not modified")

    def test_a_rejected_configuration_raises_with_the_reason(self):
        base = clean_base()
        base["EFA_SIM_PROFILE"] = "no_such_key=1"
        with self.assertRaises(efa_sim.EfaSimError) as caught:
            efa_sim.env(base)
        self.assertIn("no_such_key", str(caught.exception))


class ConsumerTest(unittest.TestCase):
    def run_consumer(self, env):
        return subprocess.run([sys.executable, CONSUMER], env=env, capture_output=True,
                              text=True, timeout=120)

    def test_a_program_started_with_env_runs_on_the_software_device(self):
        out = self.run_consumer(efa_sim.env(clean_base()))
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("PASS verbs_consumer", out.stdout)
        self.assertIn("fw_ver efa-sim", out.stdout)

    def test_without_env_the_same_program_finds_no_software_device(self):
        out = self.run_consumer(clean_base())
        self.assertNotEqual(out.returncode, 0, out.stdout)
        self.assertIn("FAIL verbs_consumer", out.stderr)


if __name__ == "__main__":
    unittest.main()
