"""efa.cuda on the software GPU (efa-sim run --gpus N): a duck-typed tensor of device
memory registered by dma-buf (and by address when dma-buf export is refused), RDMA
writes into it and out of it, bytes checked through the driver's copies."""

import ctypes
import os

import pytest

import efa
from conftest import ALL, poll_n, send_wr

try:
    _cu = ctypes.CDLL("libcuda.so.1")
except OSError:
    _cu = None

pytestmark = pytest.mark.skipif(
    _cu is None or os.environ.get("EFA_SIM_GPU_TESTS") == "0",
    reason="no libcuda.so.1 (run under `efa-sim run --gpus 1`)")


def _check(rc):
    assert rc == 0, "CUDA error %d" % rc


class DeviceTensor:
    """What efa.cuda needs of a torch CUDA tensor, over cuMemAlloc."""

    is_cuda = True

    def __init__(self, nbytes):
        _check(_cu.cuInit(0))
        dev, self.ctx = ctypes.c_int(), ctypes.c_void_p()
        _check(_cu.cuDeviceGet(ctypes.byref(dev), 0))
        _check(_cu.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev))
        _check(_cu.cuCtxSetCurrent(self.ctx))
        self.ptr, self.n = ctypes.c_uint64(), nbytes
        _check(_cu.cuMemAlloc_v2(ctypes.byref(self.ptr), ctypes.c_size_t(nbytes)))

    def data_ptr(self):
        return self.ptr.value

    def numel(self):
        return self.n

    def element_size(self):
        return 1

    def is_contiguous(self):
        return True

    def write(self, data):
        _check(_cu.cuMemcpyHtoD_v2(ctypes.c_uint64(self.ptr.value), data, ctypes.c_size_t(len(data))))

    def read(self):
        out = ctypes.create_string_buffer(self.n)
        _check(_cu.cuMemcpyDtoH_v2(out, ctypes.c_uint64(self.ptr.value), ctypes.c_size_t(self.n)))
        return out.raw


def test_register_tensor_by_dmabuf_and_rdma_through_gpu_memory(pair, pd):
    import efa.cuda

    gsrc, gdst = DeviceTensor(4096), DeviceTensor(4096)
    gsrc.write(bytes(range(256)) * 16)
    ms, md = efa.cuda.register_tensor(pd, gsrc, ALL), efa.cuda.register_tensor(pd, gdst, ALL)
    assert isinstance(ms, efa.cuda.GpuMR) and ms.addr == gsrc.data_ptr() and ms.tensor is gsrc
    assert ms.mr.addr == gsrc.data_ptr() and ms.length == 4096
    with pytest.raises(efa.EfaError, match="host view"):
        ms.mr.read(0, 4)  # device memory is never read by the host
    host = bytearray(4096)
    mh = efa.reg_tensor(pd, host, ALL)
    # GPU -> GPU, then GPU -> host.
    pair.a.post_send(efa.write_wrs(ms, pair.to_b, md.addr, md.rkey, length=1000, wr_id=1))
    pair.a.post_send(send_wr(2, ms.sge(64, 128), pair.to_b, efa.WROpcode.RDMA_WRITE,
                             remote_addr=mh.addr, rkey=mh.rkey))
    assert all(w.is_success for w in poll_n(pair.cq, 2))
    flushes = ctypes.c_ulonglong(), ctypes.c_ulonglong()
    _cu.efaSimGpuFlushCount(0, ctypes.byref(flushes[0]), ctypes.byref(flushes[1]))
    before = (flushes[0].value, flushes[1].value)
    efa.cuda.flush_gpudirect_writes()
    efa.cuda.flush_gpudirect_writes(all_devices=True)
    _cu.efaSimGpuFlushCount(0, ctypes.byref(flushes[0]), ctypes.byref(flushes[1]))
    assert (flushes[0].value, flushes[1].value) == (before[0] + 1, before[1] + 1)
    assert gdst.read()[:1000] == gsrc.read()[:1000]
    assert bytes(host[:64]) == gsrc.read()[128:192]
    ms.close()
    assert ms.closed and ms.tensor is None
    with pytest.raises(ValueError, match="CUDA tensor"):
        efa.cuda.register_tensor(pd, type("Cpu", (), {"is_cuda": False})(), ALL)


def test_register_tensor_without_dmabuf_falls_back_to_the_address(pair, pd):
    import efa.cuda

    _cu.efaSimGpuControl.argtypes = [ctypes.c_char_p, ctypes.c_longlong]
    t = DeviceTensor(8192)
    assert _cu.efaSimGpuControl(b"dmabuf_export", 0) == 0
    try:
        with pytest.raises(RuntimeError, match="cuMemGetHandleForAddressRange"):
            efa.cuda.dmabuf_fd(t.data_ptr() - t.data_ptr() % 4096, 4096)
        gmr = efa.cuda.register_tensor(pd, t, ALL)
    finally:
        _cu.efaSimGpuControl(b"dmabuf_export", 1)
    assert gmr.addr == t.data_ptr() and gmr.mr.addr == t.data_ptr()
    gmr.close()


def test_host_memory_is_not_registered_as_a_cuda_tensor(pd):
    import efa.cuda

    host = ctypes.create_string_buffer(4096)

    class Impostor:
        is_cuda = True

        def data_ptr(self):
            return ctypes.addressof(host)

        def numel(self):
            return 4096

        def element_size(self):
            return 1

    with pytest.raises(RuntimeError, match="not CUDA device memory"):
        efa.cuda.register_tensor(pd, Impostor(), ALL)
