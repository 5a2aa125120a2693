"""Two processes: endpoints exchanged over pipes, SEND both ways and RDMA write into the
other process's memory, bytes checked on both sides; and the package README's SRD
quickstart, run as written."""

import os
import struct
import subprocess
import sys
import textwrap
import time

import efa
from conftest import ALL, QKEY, poll_n

HERE = os.path.dirname(os.path.abspath(__file__))


def spawn(*args):
    return subprocess.Popen([sys.executable, os.path.join(HERE, "peer_process.py"), *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def test_send_both_ways_and_rdma_write_between_processes(ctx, pd, cq):
    p = spawn("echo")
    try:
        qp = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq)).prepare(qkey=QKEY)
        hello = p.stdout.read(24 + 12)
        remote = efa.EndpointInfo.from_bytes(hello[:24])
        raddr, rkey = struct.unpack("!QI", hello[24:])
        p.stdin.write(efa.local_endpoint_info(qp, qkey=QKEY).to_bytes())
        p.stdin.flush()
        peer = remote.peer(pd)
        assert p.stdout.read(1) == b"R"  # the peer has its AH for us: RDMA may start
        src = bytearray(b"across processes" + bytes(48))
        back = bytearray(64)
        ms, mb = efa.reg_tensor(pd, src, 0), efa.reg_tensor(pd, back, ALL)
        qp.post_recv(efa.RecvWR(wr_id=5, sg_list=[mb.sge()]))
        # RDMA write lands first in the peer's buffer (at offset 100, not reported) ...
        qp.post_send(efa.write_wrs(ms, peer, raddr + 100, rkey, length=16, wr_id=1))
        assert poll_n(cq, 1)[0].is_success
        # ... then a SEND the peer echoes back.
        qp.post_send(efa.SendWR(wr_id=2, sg_list=[ms.sge(16)], send_flags=efa.SendFlags.SIGNALED,
                                dest=peer))
        wcs = {w.wr_id: w for w in poll_n(cq, 2, timeout=10)}
        assert wcs[5].byte_len == 16 and wcs[5].src_qp == remote.qp_num
        assert bytes(back[:16]) == b"across processes"
        assert p.stdout.read(16) == b"across processes"
        p.stdin.write(b"x")
        p.stdin.flush()
        assert p.wait(timeout=10) == 0
    finally:
        p.kill()


QUICKSTART = '''
import numpy as np
import efa

dev = efa.get_efa_device_list()[0]
ctx = dev.open()
pd = ctx.alloc_pd()
cq = ctx.create_cq(256)
qp = pd.create_qp(
    efa.QPInitAttr(send_cq=cq, recv_cq=cq)
).prepare(qkey=0x1234)

local_info = efa.local_endpoint_info(qp, qkey=0x1234)
# Exchange local_info.to_bytes() with the other process.
remote_info = efa.EndpointInfo.from_bytes(remote_bytes)
peer = remote_info.peer(pd)

buf = np.zeros(4096, dtype=np.uint8)
access = (
    efa.AccessFlags.LOCAL_WRITE
    | efa.AccessFlags.REMOTE_WRITE
    | efa.AccessFlags.REMOTE_READ
)
mr = efa.reg_tensor(pd, buf, access)

qp.post_send(efa.SendWR(
    wr_id=1,
    sg_list=[mr.sge()],
    opcode=efa.WROpcode.SEND,
    send_flags=efa.SendFlags.SIGNALED,
    dest=peer,
))
for wc in cq.poll(16):
    wc.raise_for_status()
'''


def test_the_package_readme_quickstart_runs_as_written(tmp_path):
    """The quickstart of the `efa` package's README, verbatim, in a child process whose
    `remote_bytes` is the endpoint of a peer process that receives its 4096 zero bytes."""
    import pytest

    pytest.importorskip("numpy")
    p = spawn("recv")
    try:
        hello = p.stdout.read(36)
        script = tmp_path / "quickstart.py"
        script.write_text(
            "import sys\nremote_bytes = sys.stdin.buffer.read(24)\n" + QUICKSTART
            + textwrap.dedent('''
            sys.stdout.buffer.write(local_info.to_bytes()); sys.stdout.flush()
            sys.stdin.buffer.read(1)
            '''))
        q = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        q.stdin.write(hello[:24])
        q.stdin.flush()
        p.stdin.write(q.stdout.read(24))
        p.stdin.flush()
        assert p.stdout.read(4096) == bytes(4096)
        for proc in (p, q):
            proc.stdin.write(b"x")
            proc.stdin.flush()
        assert q.wait(timeout=20) == 0 and p.wait(timeout=20) == 0
    finally:
        p.kill()
