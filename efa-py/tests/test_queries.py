"""Queries report what the device reports: `PortAttr` against a direct C `ibv_query_port`,
`QP.query` with the package's keys and `ibv_query_qp`'s values, `num_comp_vectors` as the
device counts them."""

import ctypes
import os
import subprocess
import sys

import efa

# The PyPI package's PortAttr attributes.
PORT_FIELDS = ("state", "max_mtu", "active_mtu", "gid_tbl_len", "port_cap_flags", "max_msg_sz",
               "pkey_tbl_len", "lid", "active_width", "active_speed", "link_layer")


class _PortAttr(ctypes.Structure):
    """`struct ibv_port_attr` as the exported (legacy) `ibv_query_port` fills it."""
    _fields_ = [("state", ctypes.c_uint32), ("max_mtu", ctypes.c_uint32),
                ("active_mtu", ctypes.c_uint32), ("gid_tbl_len", ctypes.c_int),
                ("port_cap_flags", ctypes.c_uint32), ("max_msg_sz", ctypes.c_uint32),
                ("bad_pkey_cntr", ctypes.c_uint32), ("qkey_viol_cntr", ctypes.c_uint32),
                ("pkey_tbl_len", ctypes.c_uint16), ("lid", ctypes.c_uint16),
                ("sm_lid", ctypes.c_uint16), ("lmc", ctypes.c_uint8),
                ("max_vl_num", ctypes.c_uint8), ("sm_sl", ctypes.c_uint8),
                ("subnet_timeout", ctypes.c_uint8), ("init_type_reply", ctypes.c_uint8),
                ("active_width", ctypes.c_uint8), ("active_speed", ctypes.c_uint8),
                ("phys_state", ctypes.c_uint8), ("link_layer", ctypes.c_uint8),
                ("flags", ctypes.c_uint8), ("port_cap_flags2", ctypes.c_uint16),
                ("_spare", ctypes.c_uint8 * 16)]


def c_query_port(name, port=1):
    """The device's port attributes through libibverbs' C API, on a context of its own."""
    ib = ctypes.CDLL("libibverbs.so.1")
    ib.ibv_get_device_list.restype = ctypes.POINTER(ctypes.c_void_p)
    ib.ibv_get_device_name.restype = ctypes.c_char_p
    ib.ibv_get_device_name.argtypes = [ctypes.c_void_p]
    ib.ibv_open_device.restype = ctypes.c_void_p
    ib.ibv_open_device.argtypes = [ctypes.c_void_p]
    ib.ibv_close_device.argtypes = [ctypes.c_void_p]
    ib.ibv_query_port.argtypes = [ctypes.c_void_p, ctypes.c_uint8, ctypes.POINTER(_PortAttr)]
    n = ctypes.c_int()
    devs = ib.ibv_get_device_list(ctypes.byref(n))
    try:
        dev = next(devs[i] for i in range(n.value)
                   if ib.ibv_get_device_name(devs[i]).decode() == name)
        c = ib.ibv_open_device(dev)
        assert c, "ibv_open_device(%s) failed" % name
        try:
            attr = _PortAttr()
            assert ib.ibv_query_port(c, port, ctypes.byref(attr)) == 0
            return attr
        finally:
            ib.ibv_close_device(c)
    finally:
        ib.ibv_free_device_list(devs)


def test_query_port_reports_the_devices_port_attributes(ctx):
    port = ctx.query_port(1)
    want = c_query_port(ctx.name)
    assert {f: getattr(port, f) for f in PORT_FIELDS} == {f: getattr(want, f) for f in PORT_FIELDS}
    assert port.state == efa.PortState.ACTIVE and port.max_mtu >= port.active_mtu > 0


def test_qp_query_returns_the_packages_keys_as_ibv_query_qp_reports_them(ctx, pd, cq):
    qp = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq, max_send_wr=64))
    attrs, cap = qp.query()
    assert set(attrs) == {"qp_state", "qkey", "sq_psn", "port_num", "pkey_index", "rnr_retry"}
    assert attrs["qp_state"] == efa.QPState.RESET
    qp.to_init(qkey=0x4321, port=1)
    qp.to_rtr()
    qp.to_rts(psn=0x2345, rnr_retry=3)
    attrs, cap = qp.query()
    assert attrs == {"qp_state": efa.QPState.RTS, "qkey": 0x4321, "sq_psn": 0x2345,
                     "port_num": 1, "pkey_index": 0, "rnr_retry": 3}
    assert isinstance(cap, efa.QPCap) and cap.max_send_wr >= 64
    qp.close()


CHILD = """
import efa
ctx = efa.get_efa_device_list()[0].open()
print(ctx.num_comp_vectors)
ctx.create_cq(64, comp_vector=2)
try:
    ctx.create_cq(64, comp_vector=3)
    print("vector 3 taken")
except ValueError as e:  # as the package
    print("vector 3 refused", e)
"""


def test_num_comp_vectors_is_the_devices():
    # A device with three vectors (efa-sim's profile, in a process of its own).
    env = dict(os.environ, EFA_SIM_PROFILE="num_comp_vectors=3")
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["3", "vector 3 refused comp_vector is outside the context's range"]
