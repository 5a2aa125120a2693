//! Device memory on the software GPU: allocations, VMM, raw pointers, copies, contexts,
//! pointer attributes, and that host code cannot dereference device addresses.
mod support;

use efa_cuda::sys::{ptr_attr, CU_MEMORYTYPE_DEVICE};
use efa_cuda::*;

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn device_alloc_round_trips_bytes_at_offsets() {
    let dev = support::sim().device(0).unwrap();
    let mut a = DeviceAlloc::new(&dev, 3 * 4096 + 17).unwrap();
    let data = pattern(3 * 4096 + 17, 5);
    a.copy_from_host(0, &data).unwrap();
    a.copy_from_host(4095, b"edge").unwrap();
    let mut back = vec![0u8; data.len()];
    a.copy_to_host(0, &mut back).unwrap();
    let mut want = data.clone();
    want[4095..4099].copy_from_slice(b"edge");
    assert_eq!(back, want);
    let mut tail = [0u8; 17];
    a.copy_to_host(3 * 4096, &mut tail).unwrap();
    assert_eq!(&tail[..], &want[3 * 4096..]);
}

#[test]
fn copies_outside_the_buffer_are_rejected_before_the_driver() {
    let dev = support::sim().device(0).unwrap();
    let mut a = DeviceAlloc::new(&dev, 100).unwrap();
    assert_eq!(
        a.copy_from_host(96, b"12345").unwrap_err(),
        Error::OutOfBounds {
            offset: 96,
            len: 5,
            buffer_len: 100
        }
    );
    let mut out = [0u8; 2];
    assert_eq!(
        a.copy_to_host(usize::MAX, &mut out).unwrap_err(),
        Error::OutOfBounds {
            offset: usize::MAX,
            len: 2,
            buffer_len: 100
        }
    );
    assert_eq!(DeviceAlloc::new(&dev, 0).unwrap_err(), Error::EmptyBuffer);
}

#[test]
fn fill_and_two_devices_keep_their_own_bytes() {
    let d = support::sim();
    let (d0, d1) = (d.device(0).unwrap(), d.device(1).unwrap());
    let mut a = DeviceAlloc::new(&d0, 5000).unwrap();
    let mut b = DeviceAlloc::new(&d1, 5000).unwrap();
    fill(&mut a, 0xaa).unwrap();
    fill(&mut b, 0x55).unwrap();
    assert_eq!(a.to_vec().unwrap(), vec![0xaa; 5000]);
    assert_eq!(b.to_vec().unwrap(), vec![0x55; 5000]);
    assert_eq!(
        d.pointer_attribute(a.device_ptr(), ptr_attr::DEVICE_ORDINAL)
            .unwrap(),
        0
    );
    assert_eq!(
        d.pointer_attribute(b.device_ptr(), ptr_attr::DEVICE_ORDINAL)
            .unwrap(),
        1
    );
    assert_eq!(
        d.device(2).unwrap_err(),
        Error::InvalidDevice {
            ordinal: 2,
            count: 2
        }
    );
}

#[test]
fn vmm_allocation_spans_several_chunks_and_copies_across_them() {
    let d = support::sim();
    let dev = d.device(0).unwrap();
    let g = dev.vmm_granularity().unwrap();
    assert_eq!(g, 2 << 20);
    let mut v = VmmAllocation::new(&dev, 3 * g - 100).unwrap();
    assert_eq!(
        (v.chunk_count(), v.chunk_size(), v.mapped_len()),
        (3, g, 3 * g)
    );
    assert_eq!(v.byte_len(), 3 * g - 100);
    // A copy straddling both chunk boundaries.
    let data = pattern(g + 8192, 9);
    v.copy_from_host(g - 4096, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    v.copy_to_host(g - 4096, &mut back).unwrap();
    assert_eq!(back, data);
    // Pointer attributes see one reservation, cuMemGetAddressRange would see one chunk.
    let p = v.device_ptr();
    assert_eq!(
        d.pointer_attribute(p + g as u64, ptr_attr::RANGE_START_ADDR)
            .unwrap(),
        p
    );
    assert_eq!(
        d.pointer_attribute(p, ptr_attr::RANGE_SIZE).unwrap(),
        3 * g as u64
    );
    assert_eq!(
        d.pointer_attribute(p, ptr_attr::IS_GPU_DIRECT_RDMA_CAPABLE)
            .unwrap(),
        1
    );
    assert_eq!(
        d.pointer_attribute(p, ptr_attr::MEMORY_TYPE).unwrap(),
        CU_MEMORYTYPE_DEVICE as u64
    );
}

#[test]
fn vmm_chunk_size_must_be_a_granularity_multiple() {
    let dev = support::sim().device(0).unwrap();
    assert_eq!(
        VmmAllocation::with_chunk_size(&dev, 1 << 20, 3 << 19).unwrap_err(),
        Error::BadVmmSize {
            size: 3 << 19,
            granularity: 2 << 20
        }
    );
    assert_eq!(VmmAllocation::new(&dev, 0).unwrap_err(), Error::EmptyBuffer);
}

#[test]
fn raw_device_memory_checks_the_pointer() {
    let d = support::sim();
    let dev = d.device(1).unwrap();
    let a = DeviceAlloc::from_host(&dev, &pattern(8192, 1)).unwrap();
    // SAFETY: a sub-range of `a`, which outlives `raw` and is not touched meanwhile.
    let mut raw = unsafe { RawDeviceMemory::new(d, a.device_ptr() + 100, 50) }.unwrap();
    assert_eq!((raw.device_ordinal(), raw.byte_len()), (1, 50));
    let mut out = [0u8; 50];
    copy_to_host(&raw, 0, &mut out).unwrap();
    assert_eq!(&out[..], &pattern(8192, 1)[100..150]);
    copy_to_device(&mut raw, 10, b"raw!").unwrap();
    let mut all = vec![0u8; 8192];
    a.copy_to_host(0, &mut all).unwrap();
    assert_eq!(&all[110..114], b"raw!");

    let host = [0u8; 64];
    let hp = host.as_ptr() as u64;
    // SAFETY: the constructor only queries the driver; it rejects host memory.
    let e = unsafe { RawDeviceMemory::new(d, hp, 64) }.unwrap_err();
    assert_eq!(
        e,
        Error::NotDeviceMemory {
            ptr: hp,
            memory_type: 0
        }
    );
    // SAFETY: as above (empty ranges are rejected before any query).
    let e = unsafe { RawDeviceMemory::new(d, a.device_ptr(), 0) }.unwrap_err();
    assert_eq!(e, Error::EmptyBuffer);
}

#[test]
fn make_current_pushes_the_primary_context_only_when_needed() {
    let d = support::sim();
    std::thread::spawn(move || {
        assert_eq!(d.current_context().unwrap(), None);
        let dev1 = d.device(1).unwrap();
        {
            let _g = dev1.make_current().unwrap();
            assert_eq!(d.current_device().unwrap(), Some(1));
            {
                // Already current: nothing pushed, and dropping this guard pops nothing.
                let _again = dev1.make_current().unwrap();
            }
            assert_eq!(d.current_device().unwrap(), Some(1));
            let dev0 = d.device(0).unwrap();
            {
                let _g0 = dev0.make_current().unwrap();
                assert_eq!(d.current_device().unwrap(), Some(0));
            }
            assert_eq!(d.current_device().unwrap(), Some(1));
        }
        assert_eq!(d.current_context().unwrap(), None);
    })
    .join()
    .unwrap();
}

#[test]
fn host_code_cannot_dereference_device_memory() {
    let dev = support::sim().device(0).unwrap();
    let a = DeviceAlloc::from_host(&dev, b"secret").unwrap();
    let p = a.device_ptr() as usize as *const u8;
    // SAFETY: fork in a test process; the child only reads one byte and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: deliberately invalid read: the child is expected to die of SIGSEGV.
        let v = unsafe { core::ptr::read_volatile(p) };
        // SAFETY: plain exit of the child.
        unsafe { libc::_exit(if v == b's' { 3 } else { 4 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFSIGNALED(status), "child exited with {status:#x}");
    assert_eq!(libc::WTERMSIG(status), libc::SIGSEGV);
}

#[test]
fn driver_checks_ranges_it_is_given() {
    // Raw calls through the library itself: the model, not efa-cuda's checks.
    let d = support::sim();
    let dev = d.device(0).unwrap();
    let a = DeviceAlloc::new(&dev, 100).unwrap();
    let _ctx = dev.make_current().unwrap();
    type HtoD = unsafe extern "C" fn(u64, *const u8, usize) -> i32;
    // SAFETY: the cuda.h signature of cuMemcpyHtoD_v2.
    let htod: HtoD = unsafe { std::mem::transmute(support::sim_symbol("cuMemcpyHtoD_v2")) };
    let buf = [1u8; 200];
    // SAFETY: source readable for 200 bytes; the destination is checked by the driver.
    let rc = unsafe { htod(a.device_ptr() + 50, buf.as_ptr(), 51) };
    assert_eq!(rc, 1, "past the end: CUDA_ERROR_INVALID_VALUE");
    // SAFETY: as above.
    let rc = unsafe { htod(buf.as_ptr() as u64, buf.as_ptr(), 1) };
    assert_eq!(rc, 1, "a host address: CUDA_ERROR_INVALID_VALUE");
    // SAFETY: as above.
    assert_eq!(unsafe { htod(a.device_ptr() + 50, buf.as_ptr(), 50) }, 0);
}
