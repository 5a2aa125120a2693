//! GPU transfers on efa-sim over the software GPU between two processes (issue 9, item
//! 8): the target registers GPU memory, the initiator (this binary again) SENDs GPU → GPU,
//! RDMA-reads the target's GPU memory into GPU and host memory, RDMA-writes GPU → GPU and
//! host → GPU and ends with a write-with-immediate; the target checks every byte through
//! the driver's copies after the flush. RDMA into GPU memory the target's efa-sim reaches
//! through the driver's copies moves in datagram chunks through the target's responder
//! (another process's GPU memory is out of process_vm_writev's reach).
#[path = "support/backends.rs"]
mod backends;
mod support;
#[path = "support/transfers.rs"]
mod transfers;

use backends::{cases, with_backend, Backend};
use transfers::{initiator_from_env, target, Gpus, Mem};

fn run(test: &str, backend: Backend, mem: Mem, extra_profile: &str) {
    with_backend(test, backend, extra_profile, || {
        let gpus = Gpus {
            driver: support::sim(),
            src: 0,
            dst: 1,
        };
        target(
            &gpus,
            mem,
            &Backend::from_env().checks(),
            support::child("initiator_side"),
        );
    });
}

#[test]
#[ignore = "the initiator of the two-process tests below, started by them"]
fn initiator_side() {
    initiator_from_env(support::sim(), &Backend::from_env().checks());
}

cases! {
    two_processes_dmabuf_mapped_cumemalloc: Mapped, Alloc, "";
    two_processes_dmabuf_mapped_vmm: Mapped, Vmm, "";
    two_processes_dmabuf_through_copies_cumemalloc: Copies, Alloc, "";
    two_processes_dmabuf_through_copies_vmm: Copies, Vmm, "";
    two_processes_fallback_cumemalloc: Peermem, Alloc, "";
    two_processes_fallback_kernel_refuses_dmabuf_vmm: KernelRefuses, Vmm, "";
    two_processes_chunked_at_small_max_rdma_size: Copies, Alloc, "max_rdma_size=65536";
}
