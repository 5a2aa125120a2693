//! The floors the two-process numbers are measured against, in the same run:
//!
//! * `two_processes/floor_shm_pingpong`: half a round trip of a cache line handed back and forth
//!   between this process and a child through a shared mapping (both spin), the floor of
//!   `two_processes/send64_pingpong`;
//! * `two_processes/floor_process_vm_writev|readv/1MiB`: one bare 1 MiB `process_vm_writev` /
//!   `process_vm_readv` into / out of a child's buffer, the floor of
//!   `two_processes/rdma_write|rdma_read/1MiB` (the responder copies with those calls);
//!   `memcpy/1MiB` is the single-core copy next to both.

use super::MIB;
use criterion::{BenchmarkGroup, Throughput};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Offsets of the two words in the shared page (separate cache lines).
const PING: usize = 0;
const PONG: usize = 128;
/// What the parent writes to PING to stop the child.
const STOP: u64 = u64::MAX;

/// A shared mapping of one page of the file at `path`.
struct Page {
    ptr: *mut u8,
}

impl Page {
    fn map(path: &std::path::Path, create: bool) -> Page {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(create)
            .open(path)
            .unwrap();
        f.set_len(4096).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh shared mapping of a 4096-byte file we opened read-write.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap {}", path.display());
        Page { ptr: p.cast() }
    }

    fn word(&self, at: usize) -> &AtomicU64 {
        // SAFETY: `at` is 8-aligned inside the page, which stays mapped (never unmapped:
        // benchmarks only).
        unsafe { AtomicU64::from_ptr(self.ptr.add(at).cast()) }
    }
}

fn page_path() -> std::path::PathBuf {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    dir.join(format!("efa-sim-bench-pingpong-{}", std::process::id()))
}

/// The child of `shm_pingpong`: answers every PING with the same PONG until STOP (or
/// until its parent is gone).
pub fn shm_echo_child() {
    let page = Page::map(
        std::path::Path::new(&std::env::var("EFA_SIM_BENCH_PAGE").unwrap()),
        false,
    );
    let (ping, pong) = (page.word(PING), page.word(PONG));
    println!("READY 0 0 0");
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    let mut last = 0u64;
    let mut spins = 0u64;
    loop {
        let v = ping.load(Ordering::Acquire);
        if v == STOP {
            return;
        }
        if v != last {
            last = v;
            pong.store(v, Ordering::Release);
            continue;
        }
        core::hint::spin_loop();
        spins += 1;
        // SAFETY: getppid has no preconditions.
        if spins % (1 << 20) == 0 && unsafe { libc::getppid() } == 1 {
            return;
        }
    }
}

/// `two_processes/floor_shm_pingpong` (time per iteration: half a round trip).
pub fn shm_pingpong(g: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    let path = page_path();
    let page = Page::map(&path, true);
    let kid = super::Kid::spawn_with(
        "shm_echo",
        &[("EFA_SIM_BENCH_PAGE", path.display().to_string())],
    );
    let (ping, pong) = (page.word(PING), page.word(PONG));
    let mut seq = 0u64;
    g.throughput(Throughput::Elements(1));
    g.bench_function("floor_shm_pingpong", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                seq += 1;
                ping.store(seq, Ordering::Release);
                while pong.load(Ordering::Acquire) != seq {
                    core::hint::spin_loop();
                }
            }
            // Two one-way trips per iteration.
            t.elapsed() / 2
        })
    });
    ping.store(STOP, Ordering::Release);
    drop(kid);
    let _ = std::fs::remove_file(&path);
}

/// `two_processes/floor_process_vm_writev/1MiB` and `…readv/1MiB` against `len` bytes at `remote`
/// in process `pid`, from / into the local buffer at `local`.
pub fn process_vm(
    g: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    pid: u32,
    local: u64,
    remote: u64,
) {
    g.throughput(Throughput::Bytes(MIB as u64));
    for write in [true, false] {
        let name = if write {
            "process_vm_writev/1MiB"
        } else {
            "process_vm_readv/1MiB"
        };
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let lv = libc::iovec {
                    iov_base: local as *mut libc::c_void,
                    iov_len: MIB,
                };
                let rv = libc::iovec {
                    iov_base: remote as *mut libc::c_void,
                    iov_len: MIB,
                };
                let t = Instant::now();
                for _ in 0..iters {
                    // SAFETY: `local` is this process's live 2 MiB benchmark region,
                    // `remote` the child's live 1 MiB MR; one iovec each of MIB bytes.
                    let n = unsafe {
                        if write {
                            libc::process_vm_writev(pid as libc::pid_t, &lv, 1, &rv, 1, 0)
                        } else {
                            libc::process_vm_readv(pid as libc::pid_t, &lv, 1, &rv, 1, 0)
                        }
                    };
                    assert_eq!(
                        black_box(n),
                        MIB as isize,
                        "{name}: {}",
                        std::io::Error::last_os_error()
                    );
                }
                t.elapsed()
            })
        });
    }
}
