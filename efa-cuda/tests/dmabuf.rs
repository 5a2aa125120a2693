//! dma-buf export on the software GPU: the page-rounded range, the fd's convention
//! (efa-sim-gpu docs), its coherence with the driver's copies, and the driver's rules.
mod support;

use std::os::fd::AsRawFd;

use efa_cuda::*;

fn map(fd: i32, file_offset: u64, len: usize) -> *mut u8 {
    // SAFETY: a fresh shared mapping of a file; unmapped by the caller.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            file_offset as libc::off_t,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap of the dma-buf fd");
    p.cast()
}

#[test]
fn export_covers_the_pages_around_an_unaligned_buffer() {
    let _serial = support::serial();
    let d = support::sim();
    let dev = d.device(0).unwrap();
    let a = DeviceAlloc::new(&dev, 5 * 4096).unwrap();
    let page = host_page_size();
    // SAFETY: a sub-range of `a`, which outlives it.
    let raw = unsafe { RawDeviceMemory::new(d, a.device_ptr() + 1000, 2 * page as usize) }.unwrap();
    let buf = export_dmabuf(&raw).unwrap();
    let r = *buf.range();
    assert_eq!(r.export_base, a.device_ptr());
    assert_eq!(r.export_len, 3 * page);
    assert_eq!(
        (r.offset, r.len, r.iova),
        (1000, 2 * page, a.device_ptr() + 1000)
    );
    let info = support::dmabuf_info(buf.fd().as_raw_fd()).unwrap();
    assert_eq!(
        (info.base, info.size, info.device),
        (r.export_base, r.export_len, 0)
    );
}

#[test]
fn the_fd_is_a_real_file_positioned_at_the_export_and_coherent_with_copies() {
    let _serial = support::serial();
    let dev = support::sim().device(1).unwrap();
    let mut a = DeviceAlloc::new(&dev, 8192).unwrap();
    a.copy_from_host(0, b"written by cuMemcpyHtoD").unwrap();
    let buf = export_dmabuf(&a).unwrap();
    let fd = buf.fd().as_raw_fd();
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
    assert!(
        link.to_string_lossy()
            .starts_with("/memfd:efa-sim-gpu-memory"),
        "{}",
        link.display()
    );
    // SAFETY: lseek on our fd (SEEK_CUR with 0 does not move it).
    let pos = unsafe { libc::lseek(fd, 0, libc::SEEK_CUR) };
    assert_eq!(pos as u64, a.device_ptr(), "file position = export base");
    assert_eq!(support::dmabuf_info(fd).unwrap().device, 1);

    // Byte k of the dma-buf is file offset base + k: read what the driver wrote...
    let p = map(fd, buf.range().export_base, 8192);
    // SAFETY: the mapping is 8192 bytes long.
    let seen = unsafe { std::slice::from_raw_parts(p, 23) };
    assert_eq!(seen, b"written by cuMemcpyHtoD");
    // ...and what a NIC writes through the mapping is what cuMemcpyDtoH reads.
    // SAFETY: inside the mapping; nobody else accesses these bytes now.
    unsafe { std::ptr::copy_nonoverlapping(b"NIC".as_ptr(), p.add(4096), 3) };
    let mut out = [0u8; 3];
    a.copy_to_host(4096, &mut out).unwrap();
    assert_eq!(&out, b"NIC");
    // SAFETY: unmaps the mapping made above.
    unsafe { libc::munmap(p.cast(), 8192) };

    // Two exports, two fds; a closed fd is no longer an export.
    let second = export_dmabuf(&a).unwrap();
    assert_ne!(second.fd().as_raw_fd(), fd);
    drop(buf);
    assert_eq!(support::dmabuf_info(fd), Err(400));
}

#[test]
fn vmm_exports_span_chunks() {
    let _serial = support::serial();
    let d = support::sim();
    let dev = d.device(0).unwrap();
    let mut v = VmmAllocation::with_chunk_size(&dev, 3 << 21, 2 << 20).unwrap();
    v.copy_from_host((2 << 20) - 2, b"span").unwrap();
    let buf = export_dmabuf(&v).unwrap();
    assert_eq!(buf.range().export_len, 3 << 21);
    let p = map(buf.fd().as_raw_fd(), buf.range().export_base, 3 << 21);
    // SAFETY: inside the 6 MiB mapping.
    let seen = unsafe { std::slice::from_raw_parts(p.add((2 << 20) - 2), 4) };
    assert_eq!(seen, b"span");
    // SAFETY: unmaps the mapping made above.
    unsafe { libc::munmap(p.cast(), 3 << 21) };
}

#[test]
fn host_memory_and_empty_buffers_are_rejected() {
    let _serial = support::serial();
    let d = support::sim();
    let dev = d.device(0).unwrap();
    let a = DeviceAlloc::new(&dev, 4096).unwrap();
    // SAFETY: construction only; rejected before use.
    let empty = unsafe { RawDeviceMemory::new(d, a.device_ptr(), 0) };
    assert_eq!(empty.unwrap_err(), Error::EmptyBuffer);
    let host = [0u8; 16];
    // SAFETY: construction only; rejected.
    let e = unsafe { RawDeviceMemory::new(d, host.as_ptr() as u64, 16) }.unwrap_err();
    assert!(matches!(e, Error::NotDeviceMemory { .. }), "{e:?}");
}

type Export = unsafe extern "C" fn(*mut i32, u64, usize, i32, u64) -> i32;

fn raw_export(ptr: u64, size: usize, handle_type: i32, flags: u64) -> Result<i32, i32> {
    // SAFETY: the cuda.h signature of cuMemGetHandleForAddressRange (handle: int *).
    let f: Export =
        unsafe { std::mem::transmute(support::sim_symbol("cuMemGetHandleForAddressRange")) };
    let mut fd = -1;
    // SAFETY: valid out pointer; the driver checks the range.
    match unsafe { f(&mut fd, ptr, size, handle_type, flags) } {
        0 => Ok(fd),
        rc => Err(rc),
    }
}

#[test]
fn the_driver_refuses_unaligned_out_of_range_and_partly_mapped_exports() {
    let _serial = support::serial();
    let d = support::sim();
    let dev = d.device(0).unwrap();
    let page = host_page_size() as usize;
    let a = DeviceAlloc::new(&dev, 2 * page + 1).unwrap();
    let p = a.device_ptr();
    std::thread::spawn(move || {
        // No current context.
        assert_eq!(raw_export(p, page, 1, 0), Err(201));
        let _ctx = dev.make_current().unwrap();
        assert_eq!(raw_export(p + 1, page, 1, 0), Err(1), "unaligned pointer");
        assert_eq!(raw_export(p, page + 1, 1, 0), Err(1), "unaligned size");
        assert_eq!(raw_export(p, 0, 1, 0), Err(1), "empty");
        assert_eq!(
            raw_export(p, 4 * page, 1, 0),
            Err(1),
            "past the page-rounded end"
        );
        assert_eq!(
            raw_export(p, page, 2, 0),
            Err(1),
            "not a dma-buf handle type"
        );
        assert_eq!(
            raw_export(p, page, 1, 1),
            Err(801),
            "PCIe mapping type on x86"
        );
        assert_eq!(raw_export(p, page, 1, 4), Err(1), "unknown flag");
        let host = vec![0u8; 2 * page];
        let hp = (host.as_ptr() as u64 + page as u64 - 1) & !(page as u64 - 1);
        assert_eq!(raw_export(hp, page, 1, 0), Err(1), "host memory");
        // The page-rounded extent of a 2 pages + 1 byte allocation is 3 pages.
        let fd = raw_export(p, 3 * page, 1, 0).unwrap();
        // SAFETY: closes the fd we were just given.
        unsafe { libc::close(fd) };
    })
    .join()
    .unwrap();

    // A VMM reservation with an unmapped hole cannot be exported across it.
    let g = 2usize << 20;
    type Reserve = unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> i32;
    type Free = unsafe extern "C" fn(u64, usize) -> i32;
    // SAFETY: the cuda.h signature of cuMemAddressReserve.
    let reserve: Reserve =
        unsafe { std::mem::transmute(support::sim_symbol("cuMemAddressReserve")) };
    // SAFETY: the cuda.h signature of cuMemAddressFree.
    let free: Free = unsafe { std::mem::transmute(support::sim_symbol("cuMemAddressFree")) };
    let mut base = 0u64;
    // SAFETY: valid out pointer.
    assert_eq!(unsafe { reserve(&mut base, 2 * g, 0, 0, 0) }, 0);
    let _ctx = dev.make_current().unwrap();
    assert_eq!(raw_export(base, g, 1, 0), Err(1), "unmapped reservation");
    // SAFETY: our reservation, nothing mapped.
    assert_eq!(unsafe { free(base, 2 * g) }, 0);
}

#[test]
fn a_driver_that_refuses_exports_gives_not_supported() {
    let _serial = support::serial();
    let dev = support::sim().device(0).unwrap();
    let a = DeviceAlloc::new(&dev, 4096).unwrap();
    assert!(dev.dmabuf_supported().unwrap());
    support::control("dmabuf_export", 0);
    let e = export_dmabuf(&a).unwrap_err();
    let supported = dev.dmabuf_supported().unwrap();
    support::control("dmabuf_export", 1);
    assert!(!supported);
    assert_eq!(support::cu_code(&e), Some(801));
    assert_eq!(
        e.to_string(),
        "cuMemGetHandleForAddressRange failed: CUDA_ERROR_NOT_SUPPORTED (801)"
    );
}
