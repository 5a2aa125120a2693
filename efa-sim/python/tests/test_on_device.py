"""Tests that run *on* the software device: start them with
`efa-sim run -- python -m unittest test_on_device` (or pytest). They fail, not skip,
when the device is not there, so a broken selection cannot pass unnoticed."""

import unittest

import verbs_consumer


class OnDeviceTest(unittest.TestCase):
    def test_this_process_sees_efa_sim_devices(self):
        verbs, efa = verbs_consumer.load()
        ep = verbs_consumer.Endpoint(verbs, efa, 0, 4096)
        try:
            self.assertTrue(ep.fw_ver.startswith("efa-sim"), ep.fw_ver)
        finally:
            ep.close()

    def test_two_processes_exchange_sends_and_an_rdma_write(self):
        fw_ver = verbs_consumer.parent()
        self.assertTrue(fw_ver.startswith("efa-sim"), fw_ver)


if __name__ == "__main__":
    unittest.main()
