"""Host buffers as registrable memory: address, length and the object that pins them."""

from __future__ import annotations

import ctypes


def _contiguity(obj) -> None:
    is_contiguous = getattr(obj, "is_contiguous", None)
    if callable(is_contiguous) and not is_contiguous():
        raise ValueError("tensor must be contiguous")


def host_span(obj, writable: bool):
    """``(addr, nbytes, keep)`` for a C-contiguous host buffer; ``keep`` pins it.

    Torch-like objects (``data_ptr()``) are kept themselves; anything else goes through
    the buffer protocol, and the memoryview kept holds the export, so a bytearray or a
    numpy array cannot be resized (and so moved) while registered.
    """
    if hasattr(obj, "data_ptr") and not isinstance(obj, memoryview):
        _contiguity(obj)
        if bool(getattr(obj, "is_cuda", False)):
            raise ValueError("a CUDA tensor is registered with efa.cuda.register_tensor")
        return int(obj.data_ptr()), int(obj.numel()) * int(obj.element_size()), obj
    mv = memoryview(obj)
    if not mv.c_contiguous:
        raise ValueError("buffer is not C-contiguous")
    if mv.nbytes == 0:
        raise ValueError("cannot register an empty buffer")
    if mv.readonly:
        if writable:
            raise ValueError(
                "buffer is read-only: LOCAL_WRITE or REMOTE_WRITE access needs a writable buffer"
            )
        iface = getattr(obj, "__array_interface__", None)
        if iface is not None:
            return int(iface["data"][0]), mv.nbytes, mv
        if isinstance(obj, bytes):
            return ctypes.cast(ctypes.c_char_p(obj), ctypes.c_void_p).value, mv.nbytes, mv
        raise TypeError("cannot find the address of a read-only %r" % type(obj))
    flat = mv.cast("B")
    addr = ctypes.addressof(ctypes.c_char.from_buffer(flat))
    return addr, mv.nbytes, mv
