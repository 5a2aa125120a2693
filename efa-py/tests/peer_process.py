"""The other process of the two-process tests: reads the parent's 24-byte endpoint from
stdin, writes its own (and, for RDMA, its MR's address and rkey), then serves."""

import struct
import sys
import time

import efa

QKEY = 0x1234


def main():
    mode = sys.argv[1]
    dev = efa.get_efa_device_list()[0]
    ctx = dev.open()
    pd = ctx.alloc_pd()
    cq = ctx.create_cq(256)
    qp = pd.create_qp(efa.QPInitAttr(send_cq=cq, recv_cq=cq)).prepare(qkey=QKEY)
    buf = bytearray(4096)
    access = efa.AccessFlags.LOCAL_WRITE | efa.AccessFlags.REMOTE_WRITE | efa.AccessFlags.REMOTE_READ
    mr = efa.reg_tensor(pd, buf, access)
    qp.post_recv(efa.RecvWR(wr_id=1, sg_list=[mr.sge(4096)]))
    out = sys.stdout.buffer
    out.write(efa.local_endpoint_info(qp, qkey=QKEY).to_bytes() + struct.pack("!QI", mr.addr, mr.rkey))
    out.flush()
    remote = efa.EndpointInfo.from_bytes(sys.stdin.buffer.read(24))
    peer = remote.peer(pd)  # EFA: the RDMA target needs an AH for the initiator
    if mode == "echo":
        # The parent's RDMA write waits for this: sooner, it finds no AH (unknown peer).
        out.write(b"R")
        out.flush()
    deadline = time.monotonic() + 10
    got = []
    while not got and time.monotonic() < deadline:
        got = cq.poll(1)
    got[0].raise_for_status()
    n = got[0].byte_len
    if mode == "echo":
        # Send the message back, then report what landed by RDMA write.
        qp.post_send(efa.SendWR(wr_id=2, sg_list=[mr.sge(n)], opcode=efa.WROpcode.SEND,
                                send_flags=efa.SendFlags.SIGNALED, dest=peer))
        while not cq.poll(1):
            pass
    sys.stderr.write("peer got %d bytes\n" % n)
    out.write(bytes(buf[:n]))
    out.flush()
    sys.stdin.buffer.read(1)  # wait for the parent's "done" before tearing down


if __name__ == "__main__":
    main()
