//! GPU transfers on efa-sim over the software GPU, in one process (issue 9, item 8): for
//! `cuMemAlloc` and VMM memory, registered by dma-buf (mapped by efa-sim, or moved with the
//! driver's copies when the export refuses mmap) and by the fallback (`ibv_reg_mr` on the
//! CUDA address, when the driver refuses exports or the kernel refuses dma-buf MRs):
//! SEND/RECV, RDMA write, write-with-immediate, RDMA read, between two GPUs, GPU→host and
//! host→GPU, also chunked at a small `max_rdma_size`; every byte checked through the
//! driver's copies, the flush asserted after the inbound write (`support/transfers.rs`).
//! Each case runs in a child process with its own configuration.
#[path = "support/backends.rs"]
mod backends;
mod support;
#[path = "support/transfers.rs"]
mod transfers;

use backends::{cases, with_backend, Backend};
use transfers::{in_process, Gpus, Mem};

fn run(test: &str, backend: Backend, mem: Mem, extra_profile: &str) {
    with_backend(test, backend, extra_profile, || {
        let gpus = Gpus {
            driver: support::sim(),
            src: 0,
            dst: 1,
        };
        in_process(&gpus, mem, &Backend::from_env().checks());
    });
}

cases! {
    dmabuf_mapped_cumemalloc: Mapped, Alloc, "";
    dmabuf_mapped_vmm: Mapped, Vmm, "";
    dmabuf_through_copies_cumemalloc: Copies, Alloc, "";
    dmabuf_through_copies_vmm: Copies, Vmm, "";
    fallback_exports_refused_cumemalloc: Peermem, Alloc, "";
    fallback_exports_refused_vmm: Peermem, Vmm, "";
    fallback_kernel_refuses_dmabuf_cumemalloc: KernelRefuses, Alloc, "";
    fallback_kernel_refuses_dmabuf_vmm: KernelRefuses, Vmm, "";
    chunked_dmabuf_mapped_at_small_max_rdma_size: Mapped, Alloc, "max_rdma_size=65536";
    chunked_dmabuf_through_copies_at_small_max_rdma_size: Copies, Vmm, "max_rdma_size=65536";
    chunked_fallback_at_small_max_rdma_size: Peermem, Alloc, "max_rdma_size=65536";
}
