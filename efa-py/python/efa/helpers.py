"""Endpoint exchange and tensor helpers of the common SRD workflow."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from . import _efa
from .enums import SendFlags, WROpcode

@dataclass
class EndpointInfo:
    """What a peer needs to reach an SRD/UD QP; 24 bytes on the wire (:meth:`to_bytes`)."""

    gid: bytes
    qp_num: int
    qkey: int

    # Network byte order: 16-byte GID, 32-bit QP number, 32-bit qkey (the package's
    # class attribute, not a field).
    _STRUCT = struct.Struct("!16sII")

    def __post_init__(self) -> None:
        self.gid = bytes(self.gid)
        self.qp_num = int(self.qp_num)
        self.qkey = int(self.qkey)
        if len(self.gid) != 16:
            raise ValueError("gid must be exactly 16 bytes")
        if not 0 <= self.qp_num <= 0xFFFFFF:
            raise ValueError("qp_num must be a 24-bit value")
        if not 0 <= self.qkey <= 0xFFFFFFFF:
            raise ValueError("qkey must be a 32-bit value")

    def to_bytes(self) -> bytes:
        return self._STRUCT.pack(self.gid, self.qp_num, self.qkey)

    @classmethod
    def from_bytes(cls, data) -> "EndpointInfo":
        data = bytes(data)
        if len(data) != cls._STRUCT.size:
            raise ValueError(
                "EndpointInfo payload must be exactly %d bytes (got %d)"
                % (cls._STRUCT.size, len(data))
            )
        gid, qp_num, qkey = cls._STRUCT.unpack(data)
        return cls(gid=gid, qp_num=qp_num, qkey=qkey)

    def peer(self, pd, sgid_index: int = 0, port: int = 1) -> "Peer":
        """The :class:`Peer` (a new AH in ``pd``, which the Peer owns) for this endpoint."""
        ah = pd.create_ah(self.gid, sgid_index=sgid_index, port_num=port)
        return Peer(ah=ah, qp_num=self.qp_num, qkey=self.qkey)


class Peer:
    """A resolved remote endpoint (AH, QP number, qkey): ``dest=`` of a :class:`SendWR`."""

    def __init__(self, ah, qp_num: int, qkey: int):
        self.ah, self.qp_num, self.qkey = ah, int(qp_num), int(qkey)

    def close(self) -> None:
        if self.ah is not None:
            self.ah.close()
            self.ah = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "Peer(qp_num=%d, qkey=0x%x)" % (self.qp_num, self.qkey)


def local_endpoint_info(qp, qkey, *, gid=None, gid_index: int = 0, port: int = 1) -> EndpointInfo:
    """The :class:`EndpointInfo` of ``qp`` (prepared with ``qkey``)."""
    if gid is None:
        gid = qp.pd.context.query_gid(port, gid_index)
    raw = gid.raw if hasattr(gid, "raw") else bytes(gid)
    return EndpointInfo(raw, qp.qp_num, qkey)


def tensor_addr_len(tensor):
    """``(addr, nbytes)`` of a contiguous torch tensor or numpy array (duck-typed)."""
    is_contiguous = getattr(tensor, "is_contiguous", None)
    if callable(is_contiguous) and not is_contiguous():
        raise ValueError("tensor must be contiguous")
    flags = getattr(tensor, "flags", None)
    if flags is not None and not bool(getattr(flags, "c_contiguous", False)):
        raise ValueError("array must be C-contiguous")
    if hasattr(tensor, "data_ptr"):
        return int(tensor.data_ptr()), int(tensor.numel()) * int(tensor.element_size())
    if hasattr(tensor, "ctypes") and hasattr(tensor, "nbytes"):
        return int(tensor.ctypes.data), int(tensor.nbytes)
    raise TypeError("unsupported tensor type: %r" % type(tensor))


def reg_tensor(pd, tensor, access):
    """Registers a host tensor or buffer (numpy array, torch CPU tensor, bytearray...).

    The MR keeps the object (and, for buffer-protocol objects, a pinning memoryview)
    alive; a read-only buffer is refused for LOCAL_WRITE/REMOTE_WRITE access.
    """
    if bool(getattr(tensor, "is_cuda", False)):
        raise ValueError(
            "reg_tensor only accepts host tensors; use efa.cuda.register_tensor for CUDA tensors"
        )
    # The MR's `owner` is the tensor itself, as in the package (the buffer stays pinned
    # by the registration either way).
    return pd.reg_mr(tensor, None, int(access))._keepalive(tensor)


def _chunked(opcode, mr, dest, remote_addr, rkey, length, offset, chunk, wr_id):
    if length is None:
        length = mr.length - offset
    if chunk <= 0:
        raise ValueError("chunk must be positive")
    if offset < 0 or length <= 0 or offset + length > mr.length:
        raise ValueError("range exceeds the memory region")
    wrs = []
    pos = 0
    while pos < length:
        n = min(chunk, length - pos)
        sge = _efa.SGE(mr.addr + offset + pos, n, lkey=mr.lkey)
        if isinstance(mr, _efa.MR):
            sge = sge._keepalive(mr)
        wrs.append(
            _efa.SendWR(
                wr_id=wr_id + len(wrs),
                sg_list=[sge],
                opcode=opcode,
                send_flags=SendFlags.SIGNALED,
                remote_addr=int(remote_addr) + pos,
                rkey=int(rkey),
                dest=dest,
            )
        )
        pos += n
    return wrs


def write_wrs(mr, dest, remote_addr, rkey, *, length=None, offset=0, chunk=1 << 30, wr_id=0):
    """The signaled RDMA-write WRs moving ``mr[offset:offset+length]`` to
    ``remote_addr`` in ``chunk``-byte pieces (EFA caps one RDMA at ``max_rdma_size``)."""
    return _chunked(WROpcode.RDMA_WRITE, mr, dest, remote_addr, rkey, length, offset, chunk, wr_id)


def read_wrs(mr, dest, remote_addr, rkey, *, length=None, offset=0, chunk=1 << 30, wr_id=0):
    """The signaled RDMA-read WRs filling ``mr[offset:offset+length]`` from ``remote_addr``."""
    return _chunked(WROpcode.RDMA_READ, mr, dest, remote_addr, rkey, length, offset, chunk, wr_id)
