//! Device memory in the model, on the software GPU (efa-sim-gpu, loaded by path as this
//! process's `libcuda.so.1`): dma-buf exports mapped at their CUDA address, exports that
//! refuse mmap moved through the driver's copies (the emulated DMA used for NVIDIA's
//! dma-bufs), the kernel's dma-buf checks, and `ibv_reg_mr` on CUDA addresses (the
//! nvidia_peermem path). Every byte is checked through `cuMemcpyDtoH_v2`.

#[path = "model_helpers.rs"]
mod helpers;

use efa_sim::model::*;
use helpers::*;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The software GPU's entry points this test calls.
struct Gpu {
    lib: *mut c_void,
}
// SAFETY: the handle is only used with dlsym, which is thread-safe.
unsafe impl Send for Gpu {}
// SAFETY: as above.
unsafe impl Sync for Gpu {}

type Ctx = *mut c_void;

macro_rules! call {
    ($g:expr, $name:literal, fn($($t:ty),*), $($arg:expr),*) => {{
        let f: unsafe extern "C" fn($($t),*) -> c_int =
            // SAFETY: the software GPU exports this symbol with the cuda.h signature spelled
            // here.
            unsafe { std::mem::transmute($g.sym(concat!($name, "\0"))) };
        // SAFETY: arguments as cuda.h documents them (valid pointers, sizes).
        let rc = unsafe { f($($arg),*) };
        assert_eq!(rc, 0, "{} failed", $name);
    }};
}

impl Gpu {
    fn get() -> &'static Gpu {
        static GPU: OnceLock<Gpu> = OnceLock::new();
        GPU.get_or_init(|| {
            // Cargo builds the dev-dependency's cdylib next to this test executable.
            let exe = std::env::current_exe().unwrap();
            let path = exe.parent().unwrap().join("libefa_sim_gpu.so");
            let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
            // SAFETY: loading the software GPU (its constructors are Rust's, harmless).
            let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            assert!(!lib.is_null(), "cannot load {}", path.display());
            let g = Gpu { lib };
            call!(g, "cuInit", fn(u32), 0);
            g
        })
    }
    fn sym(&self, name: &str) -> *mut c_void {
        let n = CStr::from_bytes_with_nul(name.as_bytes()).unwrap();
        // SAFETY: live handle, NUL-terminated name.
        let p = unsafe { libc::dlsym(self.lib, n.as_ptr()) };
        assert!(!p.is_null(), "{name}");
        p
    }
    /// Makes device `dev`'s primary context current on this thread.
    fn enter(&self, dev: c_int) {
        let mut ctx: Ctx = std::ptr::null_mut();
        call!(
            self,
            "cuDevicePrimaryCtxRetain",
            fn(*mut Ctx, c_int),
            &mut ctx,
            dev
        );
        call!(self, "cuCtxPushCurrent_v2", fn(Ctx), ctx);
    }
    fn alloc(&self, len: usize) -> u64 {
        let mut va = 0u64;
        call!(self, "cuMemAlloc_v2", fn(*mut u64, usize), &mut va, len);
        va
    }
    fn put(&self, va: u64, bytes: &[u8]) {
        call!(
            self,
            "cuMemcpyHtoD_v2",
            fn(u64, *const c_void, usize),
            va,
            bytes.as_ptr().cast(),
            bytes.len()
        );
    }
    fn get_bytes(&self, va: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        call!(
            self,
            "cuMemcpyDtoH_v2",
            fn(*mut c_void, u64, usize),
            v.as_mut_ptr().cast(),
            va,
            len
        );
        v
    }
    fn export(&self, va: u64, len: usize) -> i32 {
        let mut fd: c_int = -1;
        call!(
            self,
            "cuMemGetHandleForAddressRange",
            fn(*mut c_void, u64, usize, c_int, u64),
            (&mut fd as *mut c_int).cast(),
            va,
            len,
            1,
            0
        );
        fd
    }
    fn control(&self, key: &CStr, value: i64) {
        call!(
            self,
            "efaSimGpuControl",
            fn(*const c_char, i64),
            key.as_ptr(),
            value
        );
    }
}

fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed ^ (i >> 9) as u8)
        .collect()
}

/// Tests that change the software GPU's controls run one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Mappings of the software GPU's memory file in this process.
fn gpu_file_mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains("efa-sim-gpu-memory"))
        .count()
}

fn pair() -> (Side, Side) {
    (Side::new(&dev(0), 0), Side::new(&dev(1), 0))
}

/// SEND host → `dst` (an MR over device memory at CUDA address `va`), RDMA write of
/// `bulk` bytes into it (more than one datagram: process_vm_* or chunks), RDMA read back
/// out of it into host memory, and `dst` as the local source of a SEND: every byte
/// checked through the driver's copies.
fn exercise(g: &Gpu, a: &Side, b: &Side, dst: &Mr, va: u64, bulk: usize) {
    let ah = a.ah_to(b);
    let ah_back = b.ah_to(a);
    let host = Region::new(&a.pd, bulk, ALL_ACCESS);
    let msg = pattern(3000, 1);
    host.fill(0, &msg);
    // SEND into device memory at offset 10.
    b.qp.post_recv(&recv(
        1,
        &[Sge {
            addr: dst.iova() + 10,
            length: 4000,
            lkey: dst.lkey(),
        }],
    ))
    .unwrap();
    a.qp.post_send_batch(&[wr(&ah, b.qp.qpn(), 1, SendOp::Send, &[host.sge(0, 3000)])])
        .unwrap();
    assert_eq!(next(&a.cq, 10).status, 0);
    assert_eq!(next(&b.cq, 10).byte_len, 3000);
    assert_eq!(g.get_bytes(va + 10, 3000), msg);
    // RDMA write of `bulk` bytes into it.
    let data = pattern(bulk, 2);
    host.fill(0, &data);
    let mut w = wr(
        &ah,
        b.qp.qpn(),
        2,
        SendOp::RdmaWrite,
        &[host.sge(0, bulk as u32)],
    );
    w.remote = Some((dst.iova(), dst.rkey()));
    a.qp.post_send_batch(&[w]).unwrap();
    assert_eq!(next(&a.cq, 10).status, 0);
    assert_eq!(g.get_bytes(va, bulk), data);
    // RDMA read of it back into zeroed host memory.
    host.fill(0, &vec![0u8; bulk]);
    let mut r = wr(
        &ah,
        b.qp.qpn(),
        3,
        SendOp::RdmaRead,
        &[host.sge(0, bulk as u32)],
    );
    r.remote = Some((dst.iova(), dst.rkey()));
    a.qp.post_send_batch(&[r]).unwrap();
    assert_eq!(next(&a.cq, 10).status, 0);
    assert_eq!(host.bytes(0, bulk), data);
    // Device memory as the local source of a SEND (b → a).
    a.qp.post_recv(&recv(4, &[host.sge(0, 500)])).unwrap();
    let src = Sge {
        addr: dst.iova() + 7,
        length: 500,
        lkey: dst.lkey(),
    };
    b.qp.post_send_batch(&[wr(&ah_back, a.qp.qpn(), 4, SendOp::Send, &[src])])
        .unwrap();
    assert_eq!(next(&b.cq, 10).status, 0);
    assert_eq!(next(&a.cq, 10).byte_len, 500);
    assert_eq!(host.bytes(0, 500), data[7..507]);
}

#[test]
fn a_software_gpu_export_is_mapped_at_its_cuda_address() {
    let _s = serial();
    let g = Gpu::get();
    g.enter(1);
    let (p, bulk) = (page(), 100_000);
    let size = (4 * p + bulk).next_multiple_of(p);
    let va = g.alloc(size);
    let fd = g.export(va, size);
    let (a, b) = pair();
    // Registered from the second page plus 8 bytes, addressed by its CUDA address.
    let off = p as u64 + 8;
    let maps = gpu_file_mappings();
    let mr =
        b.pd.reg_dmabuf_mr(off, bulk + 2 * p, va + off, fd, ALL_ACCESS)
            .unwrap();
    assert_eq!(mr.memory(), MrMemory::Mapped);
    assert_eq!(gpu_file_mappings(), maps + 1);
    let info = *mr.dmabuf().unwrap();
    assert_eq!(
        info.exporter,
        Exporter::SoftwareGpu {
            base: va,
            device: 1
        }
    );
    assert_eq!((info.offset, info.size), (off, size as u64));
    // SAFETY: closing our export; the MR keeps its own mapping.
    unsafe { libc::close(fd) };
    exercise(g, &a, &b, &mr, va + off, bulk);
    mr.dereg().unwrap();
    drop(mr);
    assert_eq!(gpu_file_mappings(), maps, "unmapped with the MR");
}

#[test]
fn an_export_cannot_be_truncated_under_the_devices_mapping() {
    let _s = serial();
    let g = Gpu::get();
    g.enter(0);
    let p = page();
    let va = g.alloc(2 * p);
    let fd = g.export(va, 2 * p);
    let b = Side::new(&dev(1), 0);
    let mr = b.pd.reg_dmabuf_mr(0, 2 * p, va, fd, ALL_ACCESS).unwrap();
    assert_eq!(mr.memory(), MrMemory::Mapped);
    // Any holder of the O_RDWR export could shrink the memory file and make the device's
    // next write into the mapping SIGBUS: the file is sealed, so the kernel says EPERM.
    for len in [0, va as libc::off_t] {
        // SAFETY: plain syscall on our export.
        assert_eq!(unsafe { libc::ftruncate(fd, len) }, -1, "truncate to {len}");
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EPERM)
        );
    }
    // SAFETY: fcntl on our export, no argument.
    let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
    let want = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    assert_eq!(seals & want, want, "seals {seals:#x}");
    mr.dereg().unwrap();
    // SAFETY: closing our export.
    unsafe { libc::close(fd) };
}

#[test]
fn an_export_that_refuses_mmap_moves_through_the_drivers_copies() {
    let _s = serial();
    let g = Gpu::get();
    g.enter(0);
    let bulk = 70_000; // > one datagram: the same-process bulk path, then chunks
    let va = g.alloc(bulk + 4096);
    g.control(c"dmabuf_mmap", 0);
    let fd = g.export(va, (bulk + 4096).next_multiple_of(page()));
    g.control(c"dmabuf_mmap", 1);
    let (a, b) = pair();
    let maps = gpu_file_mappings();
    let mr =
        b.pd.reg_dmabuf_mr(0, bulk + 100, va, fd, ALL_ACCESS)
            .unwrap();
    assert_eq!(mr.memory(), MrMemory::CudaCopies);
    assert_eq!(gpu_file_mappings(), maps, "not mapped");
    // SAFETY: closing our export; the MR does not need it.
    unsafe { libc::close(fd) };
    // Not by process_vm_* (it cannot reach device memory): in chunks over datagrams, or
    // on the same-process direct path (one copy through the driver).
    let moved = |a: &Side, b: &Side| {
        let (sa, sb) = (a.dev.stats(), b.dev.stats());
        (
            sa.chunked + sb.chunked + sa.direct + sb.direct,
            sa.process_vm + sb.process_vm,
        )
    };
    let (before, vm_before) = moved(&a, &b);
    exercise(g, &a, &b, &mr, va, bulk);
    let (after, vm_after) = moved(&a, &b);
    assert!(
        after > before,
        "bulk RDMA on GPU memory moved in chunks or directly"
    );
    assert_eq!(vm_after, vm_before, "process_vm_* never used on GPU memory");
}

#[test]
fn dmabuf_registration_is_checked_as_the_kernel_checks_it() {
    let _s = serial();
    let g = Gpu::get();
    g.enter(0);
    let p = page();
    let va = g.alloc(2 * p);
    let fd = g.export(va, 2 * p);
    let b = Side::new(&dev(1), 0);
    let reg = |off: u64, len: usize, iova: u64, fd: i32, access: u32| {
        b.pd.reg_dmabuf_mr(off, len, iova, fd, access).err()
    };
    assert_eq!(
        reg(p as u64, p + 1, va + p as u64, fd, ALL_ACCESS),
        Some(libc::EINVAL),
        "past the end"
    );
    assert_eq!(
        reg(0, 64, va + 8, fd, ALL_ACCESS),
        Some(libc::EINVAL),
        "iova/offset"
    );
    assert_eq!(
        reg(0, 0, va, fd, ALL_ACCESS),
        Some(libc::EINVAL),
        "zero length"
    );
    assert_eq!(
        reg(0, 64, va, fd, ACCESS_REMOTE_WRITE),
        Some(libc::EINVAL),
        "no local write"
    );
    let mw_bind = 1 << 4;
    assert_eq!(
        reg(0, 64, va, fd, ACCESS_LOCAL_WRITE | mw_bind),
        Some(libc::EINVAL)
    );
    assert_eq!(
        reg(0, 64, va, fd, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_ATOMIC),
        Some(libc::EOPNOTSUPP),
        "the EFA driver has no atomics"
    );
    // The memory file behind an export, but not an export (a dup): refused, it would be
    // mapped at the wrong offset.
    // SAFETY: dup of our fd.
    let dup = unsafe { libc::dup(fd) };
    assert_eq!(reg(0, 64, va, dup, ALL_ACCESS), Some(libc::EINVAL));
    // A device without dma-buf MRs refuses before looking at anything.
    let no_dmabuf = special(40, |p| p.dmabuf_mr = false);
    let pd = no_dmabuf.alloc_pd().unwrap();
    assert_eq!(
        pd.reg_dmabuf_mr(0, 64, va, fd, ALL_ACCESS).err(),
        Some(libc::EOPNOTSUPP)
    );
    // SAFETY: closing our fds.
    unsafe {
        libc::close(fd);
        libc::close(dup);
    }
    assert_eq!(
        reg(0, 64, va, fd, ALL_ACCESS),
        Some(libc::EBADF),
        "closed fd"
    );
}

#[test]
fn cuda_addresses_registered_by_address_take_the_peermem_path() {
    let _s = serial();
    let g = Gpu::get();
    g.enter(1);
    let bulk = 40_000;
    let va = g.alloc(bulk + 8);
    g.put(va + bulk as u64, b"sentinel");
    let (a, b) = pair();
    // SAFETY: device memory; the model reaches it only through the driver's copies, and
    // it stays allocated for the rest of the process.
    let mr = unsafe { b.pd.reg_mr(va as usize, bulk, va, ALL_ACCESS) }.unwrap();
    assert_eq!(mr.memory(), MrMemory::CudaCopies);
    exercise(g, &a, &b, &mr, va, bulk);
    assert_eq!(
        g.get_bytes(va + bulk as u64, 8),
        b"sentinel",
        "nothing past the MR"
    );

    // Without nvidia_peermem the kernel cannot pin GPU pages: EFAULT.
    let no_peermem = special(41, |p| p.peermem = false);
    let pd = no_peermem.alloc_pd().unwrap();
    // SAFETY: never registered.
    let e = unsafe { pd.reg_mr(va as usize, bulk, va, ALL_ACCESS) }.err();
    assert_eq!(e, Some(libc::EFAULT));

    // VMM memory created without gpuDirectRDMACapable: nvidia_peermem refuses it too.
    let chunk = 2 << 20;
    let prop = AllocationProp {
        type_: 1,
        requested_handle_types: 0,
        location: [1, 1],
        win32: std::ptr::null_mut(),
        compression: 0,
        rdma_capable: 0,
        usage: 0,
        reserved: [0; 4],
    };
    let (mut handle, mut vmm) = (0u64, 0u64);
    call!(
        g,
        "cuMemCreate",
        fn(*mut u64, usize, *const AllocationProp, u64),
        &mut handle,
        chunk,
        &prop,
        0
    );
    call!(
        g,
        "cuMemAddressReserve",
        fn(*mut u64, usize, usize, u64, u64),
        &mut vmm,
        chunk,
        0,
        0,
        0
    );
    call!(
        g,
        "cuMemMap",
        fn(u64, usize, usize, u64, u64),
        vmm,
        chunk,
        0,
        handle,
        0
    );
    let access = [1i32, 1, 3]; // CUmemAccessDesc { location: device 1, PROT_READWRITE }
    call!(
        g,
        "cuMemSetAccess",
        fn(u64, usize, *const i32, usize),
        vmm,
        chunk,
        access.as_ptr(),
        1
    );
    // SAFETY: never registered.
    let e = unsafe { b.pd.reg_mr(vmm as usize, 4096, vmm, ALL_ACCESS) }.err();
    assert_eq!(e, Some(libc::EFAULT));
}

/// `CUmemAllocationProp` (cuda.h).
#[repr(C)]
struct AllocationProp {
    type_: c_int,
    requested_handle_types: c_int,
    location: [c_int; 2],
    win32: *mut c_void,
    compression: u8,
    rdma_capable: u8,
    usage: u16,
    reserved: [u8; 4],
}
