"""A Python EFA program in the style of a real one: ctypes on libibverbs.so.1 and
libefa.so.1, no compiled code. Two processes (this one on efa_0, a child on efa_1) each
create an SRD QP, exchange addresses over a pipe, exchange SENDs both ways, then this
process RDMA-writes into the child's memory; every byte that arrives is checked.

Run it on the software device (`efa-sim run -- python3 verbs_consumer.py`, or with the
environment from `efa_sim.env()`); it exits 0 and prints `PASS verbs_consumer` when
everything arrived, and exits non-zero with a reason otherwise. It refuses to run on a
device that is not efa-sim (its fw_ver must start with "efa-sim").

Struct layouts follow rdma-core's <infiniband/verbs.h> and <infiniband/efadv.h>; the
inline verbs (ibv_post_recv, ibv_poll_cq, ibv_wr_*) call through the same function
pointers the C headers use.
"""

import ctypes
import json
import os
import platform
import select
import subprocess
import sys
import time
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_int, c_uint, c_uint8,
                    c_uint16, c_uint32, c_uint64, c_void_p, c_size_t)

TIMEOUT_S = 20.0
QKEY = 0x11111111
SEND_LEN = 1000
REPLY_LEN = 777
WRITE_LEN = 2048

# <infiniband/verbs.h> / <infiniband/efadv.h> constants.
IBV_QPT_DRIVER = 0xFF
EFADV_QP_DRIVER_TYPE_SRD = 0
IBV_QP_INIT_ATTR_PD = 1 << 0
IBV_QP_INIT_ATTR_SEND_OPS_FLAGS = 1 << 6
IBV_QP_EX_WITH_RDMA_WRITE = 1 << 0
IBV_QP_EX_WITH_SEND = 1 << 2
IBV_QP_STATE, IBV_QP_PKEY_INDEX, IBV_QP_PORT, IBV_QP_QKEY = 1 << 0, 1 << 4, 1 << 5, 1 << 6
IBV_QP_RNR_RETRY, IBV_QP_SQ_PSN = 1 << 11, 1 << 16
IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS = 1, 2, 3
IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE = 1 << 0, 1 << 1
IBV_SEND_SIGNALED = 1 << 1
IBV_WC_SUCCESS = 0
IBV_WC_SEND, IBV_WC_RDMA_WRITE, IBV_WC_RECV = 0, 1, 1 << 7

# glibc's pthread types (64-bit Linux); they sit inside ibv_qp / ibv_cq / ibv_context.
MUTEX_SIZE = {"x86_64": 40, "aarch64": 48}.get(platform.machine(), 40)
COND_SIZE = 48


class Gid(Structure):
    _fields_ = [("raw", c_uint8 * 16)]


class DeviceAttr(Structure):  # only the leading fields are read; the rest is padding
    _fields_ = [("fw_ver", c_char * 64), ("node_guid", c_uint64), ("rest", c_uint8 * 200)]


class QpCap(Structure):
    _fields_ = [(n, c_uint32) for n in
                ("max_send_wr", "max_recv_wr", "max_send_sge", "max_recv_sge",
                 "max_inline_data")]


class RxHashConf(Structure):
    _fields_ = [("function", c_uint8), ("key_len", c_uint8), ("key", c_void_p),
                ("fields_mask", c_uint64)]


class QpInitAttrEx(Structure):
    _fields_ = [("qp_context", c_void_p), ("send_cq", c_void_p), ("recv_cq", c_void_p),
                ("srq", c_void_p), ("cap", QpCap), ("qp_type", c_int),
                ("sq_sig_all", c_int), ("comp_mask", c_uint32), ("pd", c_void_p),
                ("xrcd", c_void_p), ("create_flags", c_uint32),
                ("max_tso_header", c_uint16), ("rwq_ind_tbl", c_void_p),
                ("rx_hash_conf", RxHashConf), ("source_qpn", c_uint32),
                ("send_ops_flags", c_uint64)]


class EfadvQpInitAttr(Structure):
    _fields_ = [("comp_mask", c_uint64), ("driver_qp_type", c_uint32),
                ("reserved", c_uint8 * 4)]


class GlobalRoute(Structure):
    _fields_ = [("dgid", Gid), ("flow_label", c_uint32), ("sgid_index", c_uint8),
                ("hop_limit", c_uint8), ("traffic_class", c_uint8)]


class AhAttr(Structure):
    _fields_ = [("grh", GlobalRoute), ("dlid", c_uint16), ("sl", c_uint8),
                ("src_path_bits", c_uint8), ("static_rate", c_uint8),
                ("is_global", c_uint8), ("port_num", c_uint8)]


class QpAttr(Structure):
    _fields_ = ([(n, c_uint32) for n in
                 ("qp_state", "cur_qp_state", "path_mtu", "path_mig_state", "qkey",
                  "rq_psn", "sq_psn", "dest_qp_num", "qp_access_flags")]
                + [("cap", QpCap), ("ah_attr", AhAttr), ("alt_ah_attr", AhAttr),
                   ("pkey_index", c_uint16), ("alt_pkey_index", c_uint16)]
                + [(n, c_uint8) for n in
                   ("en_sqd_async_notify", "sq_draining", "max_rd_atomic",
                    "max_dest_rd_atomic", "min_rnr_timer", "port_num", "timeout",
                    "retry_cnt", "rnr_retry", "alt_port_num", "alt_timeout")]
                + [("rate_limit", c_uint32)])


class Wc(Structure):
    _fields_ = [("wr_id", c_uint64), ("status", c_uint32), ("opcode", c_uint32),
                ("vendor_err", c_uint32), ("byte_len", c_uint32), ("imm_data", c_uint32),
                ("qp_num", c_uint32), ("src_qp", c_uint32), ("wc_flags", c_uint),
                ("pkey_index", c_uint16), ("slid", c_uint16), ("sl", c_uint8),
                ("dlid_path_bits", c_uint8)]


class Sge(Structure):
    _fields_ = [("addr", c_uint64), ("length", c_uint32), ("lkey", c_uint32)]


class RecvWr(Structure):
    pass


RecvWr._fields_ = [("wr_id", c_uint64), ("next", POINTER(RecvWr)),
                   ("sg_list", POINTER(Sge)), ("num_sge", c_int)]


class Mr(Structure):
    _fields_ = [("context", c_void_p), ("pd", c_void_p), ("addr", c_void_p),
                ("length", c_size_t), ("handle", c_uint32), ("lkey", c_uint32),
                ("rkey", c_uint32)]


POLL_CQ = CFUNCTYPE(c_int, c_void_p, c_int, POINTER(Wc))
POST_RECV = CFUNCTYPE(c_int, c_void_p, POINTER(RecvWr), POINTER(POINTER(RecvWr)))
_OPS_BEFORE_POLL = ["_compat_query_device", "_compat_query_port", "_compat_alloc_pd",
                    "_compat_dealloc_pd", "_compat_reg_mr", "_compat_rereg_mr",
                    "_compat_dereg_mr", "alloc_mw", "bind_mw", "dealloc_mw",
                    "_compat_create_cq"]
_OPS_BETWEEN = ["req_notify_cq", "_compat_cq_event", "_compat_resize_cq",
                "_compat_destroy_cq", "_compat_create_srq", "_compat_modify_srq",
                "_compat_query_srq", "_compat_destroy_srq", "post_srq_recv",
                "_compat_create_qp", "_compat_query_qp", "_compat_modify_qp",
                "_compat_destroy_qp", "post_send"]


class ContextOps(Structure):
    _fields_ = ([(n, c_void_p) for n in _OPS_BEFORE_POLL] + [("poll_cq", POLL_CQ)]
                + [(n, c_void_p) for n in _OPS_BETWEEN] + [("post_recv", POST_RECV)]
                + [(n, c_void_p) for n in ("_compat_create_ah", "_compat_destroy_ah",
                                           "_compat_attach_mcast", "_compat_detach_mcast",
                                           "_compat_async_event")])


class Context(Structure):
    _fields_ = [("device", c_void_p), ("ops", ContextOps)]


class Qp(Structure):
    _fields_ = [("context", c_void_p), ("qp_context", c_void_p), ("pd", c_void_p),
                ("send_cq", c_void_p), ("recv_cq", c_void_p), ("srq", c_void_p),
                ("handle", c_uint32), ("qp_num", c_uint32), ("state", c_uint32),
                ("qp_type", c_uint32), ("mutex", c_uint8 * MUTEX_SIZE),
                ("cond", c_uint8 * COND_SIZE), ("events_completed", c_uint32)]


_VOID_QPX = CFUNCTYPE(None, c_void_p)
_QPX_RKEY_ADDR = CFUNCTYPE(None, c_void_p, c_uint32, c_uint64)


class QpEx(Structure):
    _fields_ = [("qp_base", Qp), ("comp_mask", c_uint64), ("wr_id", c_uint64),
                ("wr_flags", c_uint), ("wr_atomic_cmp_swp", c_void_p),
                ("wr_atomic_fetch_add", c_void_p), ("wr_bind_mw", c_void_p),
                ("wr_local_inv", c_void_p), ("wr_rdma_read", c_void_p),
                ("wr_rdma_write", _QPX_RKEY_ADDR), ("wr_rdma_write_imm", c_void_p),
                ("wr_send", _VOID_QPX), ("wr_send_imm", c_void_p),
                ("wr_send_inv", c_void_p), ("wr_send_tso", c_void_p),
                ("wr_set_ud_addr", CFUNCTYPE(None, c_void_p, c_void_p, c_uint32, c_uint32)),
                ("wr_set_xrc_srqn", c_void_p), ("wr_set_inline_data", c_void_p),
                ("wr_set_inline_data_list", c_void_p),
                ("wr_set_sge", CFUNCTYPE(None, c_void_p, c_uint32, c_uint64, c_uint32)),
                ("wr_set_sge_list", c_void_p), ("wr_start", _VOID_QPX),
                ("wr_complete", CFUNCTYPE(c_int, c_void_p)), ("wr_abort", _VOID_QPX)]


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def load():
    verbs = ctypes.CDLL("libibverbs.so.1", use_errno=True)
    efa = ctypes.CDLL("libefa.so.1", use_errno=True)
    sigs = {
        "ibv_get_device_list": (c_void_p, [POINTER(c_int)]),
        "ibv_free_device_list": (None, [c_void_p]),
        "ibv_open_device": (c_void_p, [c_void_p]),
        "ibv_close_device": (c_int, [c_void_p]),
        "ibv_query_device": (c_int, [c_void_p, POINTER(DeviceAttr)]),
        "ibv_query_gid": (c_int, [c_void_p, c_uint8, c_int, POINTER(Gid)]),
        "ibv_alloc_pd": (c_void_p, [c_void_p]),
        "ibv_dealloc_pd": (c_int, [c_void_p]),
        "ibv_create_cq": (c_void_p, [c_void_p, c_int, c_void_p, c_void_p, c_int]),
        "ibv_destroy_cq": (c_int, [c_void_p]),
        "ibv_modify_qp": (c_int, [c_void_p, POINTER(QpAttr), c_int]),
        "ibv_destroy_qp": (c_int, [c_void_p]),
        "ibv_qp_to_qp_ex": (c_void_p, [c_void_p]),
        "ibv_reg_mr": (POINTER(Mr), [c_void_p, c_void_p, c_size_t, c_int]),
        "ibv_dereg_mr": (c_int, [POINTER(Mr)]),
        "ibv_create_ah": (c_void_p, [c_void_p, POINTER(AhAttr)]),
        "ibv_destroy_ah": (c_int, [c_void_p]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(verbs, name)
        fn.restype, fn.argtypes = res, args
    efa.efadv_create_qp_ex.restype = c_void_p
    efa.efadv_create_qp_ex.argtypes = [c_void_p, POINTER(QpInitAttrEx),
                                       POINTER(EfadvQpInitAttr), c_uint32]
    return verbs, efa


class Endpoint:
    """One SRD endpoint: device `index`, a PD, a CQ, an SRD QP in RTS, a buffer + MR."""

    def __init__(self, verbs, efa, index, buf_len):
        self.v = verbs
        n = c_int(0)
        devices = verbs.ibv_get_device_list(ctypes.byref(n))
        check(devices and n.value > index, f"need device {index}, found {n.value}")
        self.ctx = verbs.ibv_open_device(ctypes.cast(devices, POINTER(c_void_p))[index])
        verbs.ibv_free_device_list(devices)
        check(self.ctx, "ibv_open_device")
        attr = DeviceAttr()
        check(verbs.ibv_query_device(self.ctx, ctypes.byref(attr)) == 0, "ibv_query_device")
        self.fw_ver = attr.fw_ver.decode()
        check(self.fw_ver.startswith("efa-sim"),
              f"device {index} is not efa-sim (fw_ver {self.fw_ver!r}): run under efa-sim")
        self.ops = ctypes.cast(self.ctx, POINTER(Context)).contents.ops
        self.pd = verbs.ibv_alloc_pd(self.ctx)
        check(self.pd, "ibv_alloc_pd")
        self.cq = verbs.ibv_create_cq(self.ctx, 64, None, None, 0)
        check(self.cq, "ibv_create_cq")
        init = QpInitAttrEx(send_cq=self.cq, recv_cq=self.cq, qp_type=IBV_QPT_DRIVER,
                            comp_mask=IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                            pd=self.pd,
                            send_ops_flags=IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE)
        init.cap = QpCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
        efa_attr = EfadvQpInitAttr(driver_qp_type=EFADV_QP_DRIVER_TYPE_SRD)
        self.qp = efa.efadv_create_qp_ex(self.ctx, ctypes.byref(init), ctypes.byref(efa_attr),
                                         ctypes.sizeof(efa_attr))
        check(self.qp, f"efadv_create_qp_ex: errno {ctypes.get_errno()}")
        self.qpn = ctypes.cast(self.qp, POINTER(Qp)).contents.qp_num
        qpx = verbs.ibv_qp_to_qp_ex(self.qp)
        check(qpx, "ibv_qp_to_qp_ex")
        self.qpx_ptr = qpx
        self.qpx = ctypes.cast(qpx, POINTER(QpEx)).contents
        self.to_rts()
        self.gid = Gid()
        check(verbs.ibv_query_gid(self.ctx, 1, 0, ctypes.byref(self.gid)) == 0, "ibv_query_gid")
        self.buf = (c_uint8 * buf_len)()
        self.mr = verbs.ibv_reg_mr(self.pd, self.buf, buf_len,
                                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
        check(self.mr, "ibv_reg_mr")
        self.ahs = []

    def to_rts(self):
        steps = [
            (QpAttr(qp_state=IBV_QPS_INIT, pkey_index=0, port_num=1, qkey=QKEY),
             IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
            (QpAttr(qp_state=IBV_QPS_RTR), IBV_QP_STATE),
            (QpAttr(qp_state=IBV_QPS_RTS, sq_psn=0, rnr_retry=7),
             IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RNR_RETRY),
        ]
        for attr, mask in steps:
            rc = self.v.ibv_modify_qp(self.qp, ctypes.byref(attr), mask)
            check(rc == 0, f"ibv_modify_qp to state {attr.qp_state}: {rc}")

    def address(self):
        return {"gid": bytes(self.gid.raw).hex(), "qpn": self.qpn, "rkey": self.mr.contents.rkey,
                "addr": ctypes.addressof(self.buf)}

    def ah_to(self, gid_hex):
        attr = AhAttr(is_global=1, port_num=1)
        attr.grh.dgid.raw[:] = bytes.fromhex(gid_hex)
        ah = self.v.ibv_create_ah(self.pd, ctypes.byref(attr))
        check(ah, f"ibv_create_ah: errno {ctypes.get_errno()}")
        self.ahs.append(ah)
        return ah

    def post_recv(self, wr_id, offset, length):
        sge = Sge(addr=ctypes.addressof(self.buf) + offset, length=length,
                  lkey=self.mr.contents.lkey)
        wr = RecvWr(wr_id=wr_id, sg_list=ctypes.pointer(sge), num_sge=1)
        bad = POINTER(RecvWr)()
        check(self.ops.post_recv(self.qp, ctypes.byref(wr), ctypes.byref(bad)) == 0,
              "post_recv")

    def post(self, wr_id, ah, peer, offset, length, rdma=None):
        """One signaled SEND (or RDMA WRITE to rdma=(rkey, addr)) through ibv_wr_*."""
        q = self.qpx
        q.wr_start(self.qpx_ptr)
        q.wr_id = wr_id
        q.wr_flags = IBV_SEND_SIGNALED
        if rdma is None:
            q.wr_send(self.qpx_ptr)
        else:
            q.wr_rdma_write(self.qpx_ptr, rdma[0], rdma[1])
        q.wr_set_ud_addr(self.qpx_ptr, ah, peer["qpn"], QKEY)
        q.wr_set_sge(self.qpx_ptr, self.mr.contents.lkey,
                     ctypes.addressof(self.buf) + offset, length)
        rc = q.wr_complete(self.qpx_ptr)
        check(rc == 0, f"ibv_wr_complete: {rc}")

    def poll(self, what):
        wc = Wc()
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            n = self.ops.poll_cq(self.cq, 1, ctypes.byref(wc))
            check(n >= 0, f"poll_cq returned {n}")
            if n == 1:
                check(wc.status == IBV_WC_SUCCESS,
                      f"{what}: status {wc.status} vendor_err {wc.vendor_err}")
                return wc
            time.sleep(0.0005)
        raise Failure(f"{what}: no completion within {TIMEOUT_S} s")

    def close(self):
        for ah in self.ahs:
            check(self.v.ibv_destroy_ah(ah) == 0, "ibv_destroy_ah")
        check(self.v.ibv_dereg_mr(self.mr) == 0, "ibv_dereg_mr")
        check(self.v.ibv_destroy_qp(self.qp) == 0, "ibv_destroy_qp")
        check(self.v.ibv_destroy_cq(self.cq) == 0, "ibv_destroy_cq")
        check(self.v.ibv_dealloc_pd(self.pd) == 0, "ibv_dealloc_pd")
        check(self.v.ibv_close_device(self.ctx) == 0, "ibv_close_device")


def pattern(n, mul, add=0):
    return bytes(((i * mul) + add) & 0xFF for i in range(n))


class Pipe:
    """JSON lines over a pair of file descriptors, every read bounded by TIMEOUT_S."""

    def __init__(self, rfd, wfd):
        self.rfd, self.wfd, self.pending = rfd, wfd, b""

    def send(self, msg):
        os.write(self.wfd, (json.dumps(msg) + "\n").encode())

    def recv(self):
        deadline = time.monotonic() + TIMEOUT_S
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            check(left > 0, "peer did not answer in time")
            ready, _, _ = select.select([self.rfd], [], [], left)
            if ready:
                chunk = os.read(self.rfd, 4096)
                check(chunk, "peer closed the pipe")
                self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)


def child(pipe):
    """efa_1: receives a SEND, answers with one, then checks the RDMA write."""
    verbs, efa = load()
    ep = Endpoint(verbs, efa, 1, 8192)
    ep.post_recv(42, 0, 4096)
    pipe.send(ep.address())
    parent = pipe.recv()
    ah = ep.ah_to(parent["gid"])
    pipe.send({"ready": True})
    wc = ep.poll("receive of the SEND")
    check(wc.opcode == IBV_WC_RECV and wc.wr_id == 42, f"recv completion {wc.opcode}/{wc.wr_id}")
    check(wc.byte_len == SEND_LEN, f"byte_len {wc.byte_len}")
    check(bytes(ep.buf[:SEND_LEN]) == pattern(SEND_LEN, 3), "SEND payload differs")
    ctypes.memmove(ctypes.addressof(ep.buf) + 6144, pattern(REPLY_LEN, 7, 1), REPLY_LEN)
    ep.post(7, ah, parent, 6144, REPLY_LEN)
    wc = ep.poll("the reply SEND")
    check(wc.opcode == IBV_WC_SEND and wc.wr_id == 7, f"send completion {wc.opcode}")
    check(pipe.recv().get("written"), "parent did not report the RDMA write")
    got = bytes(ep.buf[4096:4096 + WRITE_LEN])
    check(got == pattern(WRITE_LEN, 1, 0x33), "RDMA-written bytes differ")
    check(bytes(ep.buf[4096 + WRITE_LEN:6144]) == bytes(6144 - 4096 - WRITE_LEN),
          "RDMA write spilled past its length")
    ep.close()
    pipe.send({"done": True})


def parent():
    """efa_0: starts the child, SENDs, receives its reply, RDMA-writes into it."""
    verbs, efa = load()
    ep = Endpoint(verbs, efa, 0, 8192)
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        pipe = Pipe(proc.stdout.fileno(), proc.stdin.fileno())
        ep.post_recv(9, 0, 4096)
        peer = pipe.recv()
        pipe.send(ep.address())
        ah = ep.ah_to(peer["gid"])
        check(pipe.recv().get("ready"), "child not ready")
        ctypes.memmove(ctypes.addressof(ep.buf) + 4096, pattern(SEND_LEN, 3), SEND_LEN)
        ep.post(1, ah, peer, 4096, SEND_LEN)
        # One CQ serves both queues, and the child answers as soon as the SEND
        # lands, so the reply may complete before our SEND's completion (as on
        # hardware, where the send completes on the peer's acknowledgement).
        first = ep.poll("the SEND or the reply")
        second = ep.poll("the reply or the SEND")
        by_opcode = {first.opcode: first, second.opcode: second}
        check(sorted(by_opcode) == sorted([IBV_WC_SEND, IBV_WC_RECV]),
              f"completions {first.opcode}/{second.opcode}")
        check(by_opcode[IBV_WC_SEND].wr_id == 1, f"send wr_id {by_opcode[IBV_WC_SEND].wr_id}")
        wc = by_opcode[IBV_WC_RECV]
        check(wc.wr_id == 9, f"recv wr_id {wc.wr_id}")
        check(wc.byte_len == REPLY_LEN, f"reply byte_len {wc.byte_len}")
        check(bytes(ep.buf[:REPLY_LEN]) == pattern(REPLY_LEN, 7, 1), "reply payload differs")
        ctypes.memmove(ctypes.addressof(ep.buf) + 4096, pattern(WRITE_LEN, 1, 0x33), WRITE_LEN)
        ep.post(2, ah, peer, 4096, WRITE_LEN, rdma=(peer["rkey"], peer["addr"] + 4096))
        wc = ep.poll("the RDMA write")
        check(wc.opcode == IBV_WC_RDMA_WRITE and wc.wr_id == 2, f"write completion {wc.opcode}")
        pipe.send({"written": True})
        check(pipe.recv().get("done"), "child did not finish")
        check(proc.wait(timeout=TIMEOUT_S) == 0, f"child exited {proc.returncode}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
        proc.stdout.close()
    ep.close()
    return ep.fw_ver


def main(argv):
    try:
        if argv[1:] == ["--child"]:
            child(Pipe(sys.stdin.fileno(), sys.stdout.fileno()))
            return 0
        fw = parent()
    except Failure as e:
        role = "child" if "--child" in argv else "parent"
        print(f"FAIL verbs_consumer ({role}): {e}", file=sys.stderr)
        return 1
    print(f"PASS verbs_consumer (SENDs both ways, RDMA write; fw_ver {fw})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
