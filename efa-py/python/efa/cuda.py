"""GPUDirect helpers: register CUDA tensors (dma-buf first, ``ibv_reg_mr`` of the device
address as the fallback) and order inbound NIC writes before CUDA reads them, on the
efa-cuda crate.

libcuda.so.1 is loaded on first use (``dlopen``); torch is never imported: tensors are
duck-typed (``data_ptr()``, ``numel()``, ``element_size()``, optional ``is_cuda`` and
``is_contiguous()``). ``dmabuf_fd`` (an export for the caller's own use) calls the driver
directly.
"""

from __future__ import annotations

import ctypes
import os

from . import _efa

_PAGE = os.sysconf("SC_PAGESIZE")
_DMA_BUF_FD = 1  # CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
_lib = None


def _cuda():
    global _lib
    if _lib is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise RuntimeError("libcuda.so.1 not found; CUDA GPUDirect helpers unavailable") from exc
        lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        lib.cuMemGetHandleForAddressRange.argtypes = [
            ctypes.POINTER(ctypes.c_int), ctypes.c_ulonglong, ctypes.c_size_t,
            ctypes.c_int, ctypes.c_ulonglong,
        ]
        _lib = lib
    return _lib


def _err(rc: int) -> str:
    s = ctypes.c_char_p()
    _cuda().cuGetErrorString(rc, ctypes.byref(s))
    return s.value.decode() if s.value else "CUDA error %d" % rc


class GpuMR:
    """A registered GPU range: the MR plus the real CUDA address (a dma-buf MR's own
    ``addr`` is its iova, which this keeps equal to the device address)."""

    def __init__(self, mr, addr: int, length: int, tensor=None):
        self.mr, self.addr, self.length, self._tensor = mr, int(addr), int(length), tensor

    @property
    def tensor(self):
        return self._tensor

    @property
    def closed(self) -> bool:
        return self.mr.closed

    @property
    def lkey(self) -> int:
        return self.mr.lkey

    @property
    def rkey(self) -> int:
        return self.mr.rkey

    def sge(self, length=None, offset=0):
        """An SGE for ``length`` bytes (default: the rest) at ``offset``."""
        offset = int(offset)
        if offset < 0 or offset > self.length:
            raise ValueError("SGE offset is outside the GPU memory region")
        length = self.length - offset if length is None else int(length)
        if length < 0 or length > self.length - offset:
            raise ValueError("SGE range exceeds the GPU memory region")
        if isinstance(self.mr, _efa.MR):
            sge = _efa.SGE(self.mr, length, offset=self.addr - self.mr.addr + offset)
        else:  # an MR-like object (the package's form: address and lkey)
            sge = _efa.SGE(self.addr, length, lkey=self.lkey, offset=offset)
        return sge._keepalive(self)

    def close(self):
        self.mr.close()
        self._tensor = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        if self.closed:
            return "GpuMR(closed=True)"
        return "GpuMR(addr=0x%x, length=%d, lkey=0x%x, rkey=0x%x)" % (
            self.addr, self.length, self.lkey, self.rkey)


def dmabuf_fd(ptr: int, length: int) -> int:
    """A dma-buf fd for the page-aligned device range ``[ptr, ptr+length)`` (caller closes it)."""
    ptr, length = int(ptr), int(length)
    if ptr < 0 or ptr % _PAGE:
        raise ValueError("ptr must be a non-negative, page-aligned address")
    if length <= 0 or length % _PAGE:
        raise ValueError("length must be positive and page-aligned")
    fd = ctypes.c_int(-1)
    rc = _cuda().cuMemGetHandleForAddressRange(ctypes.byref(fd), ptr, length, _DMA_BUF_FD, 0)
    if rc != 0:
        raise RuntimeError(
            "cuMemGetHandleForAddressRange failed: %s. The allocation must be VMM-backed "
            "(for torch set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)." % _err(rc))
    return fd.value


def tensor_ptr_len(tensor):
    """``(device_addr, nbytes)`` of a tensor-like object."""
    is_contiguous = getattr(tensor, "is_contiguous", None)
    if callable(is_contiguous) and not is_contiguous():
        raise ValueError("tensor must be contiguous")
    if not hasattr(tensor, "data_ptr"):
        raise TypeError("expected a tensor exposing data_ptr(); got %r" % type(tensor))
    ptr = int(tensor.data_ptr())
    if hasattr(tensor, "numel") and hasattr(tensor, "element_size"):
        return ptr, int(tensor.numel()) * int(tensor.element_size())
    if hasattr(tensor, "nbytes"):
        return ptr, int(tensor.nbytes)
    raise TypeError("cannot determine byte length of %r" % type(tensor))


def flush_gpudirect_writes(*, all_devices: bool = False) -> None:
    """Orders completed inbound GPUDirect writes before later CUDA work of the current
    context (``cuFlushGPUDirectRDMAWrites``, through the efa-cuda crate); the current
    thread must have the destination's CUDA context active."""
    _efa._flush_gpudirect_writes(all_devices)


def register_tensor(pd, tensor, access) -> GpuMR:
    """Registers a CUDA tensor: dma-buf (``ibv_reg_dmabuf_mr``) first, the device
    address through ``ibv_reg_mr`` (nvidia_peermem) if that fails. The GpuMR keeps the
    tensor."""
    is_cuda = getattr(tensor, "is_cuda", None)
    if is_cuda is not None and not bool(is_cuda):
        raise ValueError("register_tensor requires a CUDA tensor; use efa.reg_tensor for host tensors")
    ptr, n = tensor_ptr_len(tensor)
    if n <= 0:
        raise ValueError("cannot register an empty tensor")
    # efa-cuda exports the page-rounded range as a dma-buf and registers it at the
    # tensor's address, or registers the address itself (nvidia_peermem) if that fails;
    # the MR keeps the tensor.
    mr = _efa._register_cuda(pd, ptr, n, tensor, int(access))
    return GpuMR(mr, ptr, n, tensor=tensor)


__all__ = ["GpuMR", "dmabuf_fd", "flush_gpudirect_writes", "register_tensor", "tensor_ptr_len"]
