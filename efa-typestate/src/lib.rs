//! Safe, zero-allocation, typestate-checked access to AWS EFA (SRD and UD queue pairs,
//! SEND, RDMA read/write with immediate, efadv).
//!
//! The objects mirror verbs, one module each: [`device`] (list devices), [`context`]
//! (an open device), [`pd`], [`mr`] (memory registration and SGEs), [`ah`] (address
//! handles and peers), [`endpoint`] (GIDs and the endpoint-info wire format), [`cq`]
//! (completion queues, channels, waiting), [`qp`] (typestate queue pairs), [`wr`]
//! (work-request batches), [`lease`] and [`pool`] (safe posting), [`parent`] (borrowed
//! or shared handles), [`rail`] (one buffer over several devices) and [`error`].
//!
//! # Quickstart (SRD, two QPs in one process)
//!
//! ```
//! use efa_typestate::*;
//! use std::time::Duration;
//!
//! # fn main() -> efa_typestate::Result<()> {
//! let ctx = Context::open_first_efa()?;
//! # assert!(efa_sim_select::fw_matches_selection(ctx.query_device()?.fw_ver()));
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_ext_cq(CqOptions::new(1024).waitable())?; // two QPs of 256 + 256
//!
//! // Two SRD QPs, each brought to RTS in one call (with a finite RNR retry).
//! let a = pd.create_qp(&cq, &cq, &QpConfig::srd())?.prepare(0x1234, None)?;
//! let b = pd.create_qp(&cq, &cq, &QpConfig::srd())?.prepare(0x5678, None)?;
//!
//! // Exchange endpoint info (24 bytes each way; here within one process).
//! let a_wire: [u8; 24] = a.endpoint().to_bytes();
//! let b_wire: [u8; 24] = b.endpoint().to_bytes();
//! let to_b = pd.connect(&EndpointInfo::parse(&b_wire)?)?;
//! let _to_a = pd.connect(&EndpointInfo::parse(&a_wire)?)?; // b needs an AH for a's RDMA
//!
//! // Register memory: a send buffer on a, a receive buffer and an RDMA target on b.
//! let mut src = vec![0u8; 4096];
//! src[..5].copy_from_slice(b"hello");
//! let src = pd.register(src, AccessFlags::empty())?;
//! let dst = pd.register(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)?;
//! // Peers may write this one: it gives access by copying only.
//! let target = pd.register_remote_write(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)?;
//!
//! // b posts a receive; a sends 5 bytes and RDMA-writes 5 bytes into b's target. Batches
//! // are built for their QP and check every work request against it as it is added.
//! let mut recvs = RecvBatch::<4>::new(&b);
//! recvs.push(7, dst.sge(0, 4096)?)?;
//! // SAFETY: `dst` is not touched until its completion is polled below.
//! unsafe { b.post_recv(&recvs)? };
//!
//! let mut batch = SendBatch::<4>::new(&a);
//! batch.send(1, &to_b, src.sge(0, 5)?)?;
//! if ctx.caps().contains(DeviceCaps::RDMA_WRITE) {
//!     batch.write(2, &to_b, src.sge(0, 5)?, target.remote().slice(100, 5)?)?;
//! }
//! // SAFETY: `src` is not written until both completions are polled below.
//! unsafe { a.post_send(&batch)? };
//!
//! // Wait (spin, then sleep on the CQ's channel) until the receive and every send completed.
//! let mut done = ArrayVec::<Completion, 16>::new();
//! cq.poll_until(&mut done, batch.len() + 1, Duration::from_secs(5))?;
//! for c in &done {
//!     c.result()?; // a failed completion becomes a typed error naming the EFA status
//! }
//! assert_eq!(&dst.as_slice()[..5], b"hello");
//! if ctx.caps().contains(DeviceCaps::RDMA_WRITE) {
//!     let mut got = [0u8; 5];
//!     target.copy_to_slice(100, &mut got)?;
//!     assert_eq!(&got, b"hello");
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Safe posting with leases
//!
//! Where ownership can carry the "do not touch posted buffers" promise, posting is safe:
//! a buffer lease (a [`pool::Slot`] or an owned [`Mr`]) is moved into the post and
//! handed back by its completion ([`lease`]).
//!
//! ```
//! # use efa_typestate::*;
//! # use std::time::Duration;
//! # fn main() -> efa_typestate::Result<()> {
//! # let ctx = Context::open_first_efa()?;
//! # let pd = ctx.alloc_pd()?;
//! # let cq = ctx.create_ext_cq(CqOptions::new(1024))?;
//! # let a = pd.create_qp(&cq, &cq, &QpConfig::srd())?.prepare(1, None)?;
//! # let b = pd.create_qp(&cq, &cq, &QpConfig::srd())?.prepare(2, None)?;
//! # let to_b = pd.connect(&b.endpoint())?;
//! let pool = BufferPool::new(&pd, 256, 8)?; // 8 slots of 256 bytes, one registration
//! let mut out = pool.take().expect("a free slot");
//! out.as_mut_slice()[..5].copy_from_slice(b"hello");
//! let rx = b.post_recv_lease(pool.take().expect("a free slot"))?;
//! let tx = a.post_send_lease(&to_b, SendOp::Send, out, 5)?;
//! // `out` moved into the ticket: it cannot be touched until the completion.
//! let (mut rx, mut tx) = (Some(rx), Some(tx));
//! let (mut inbox, mut sent) = (None, None);
//! while inbox.is_none() || sent.is_none() {
//!     let c = cq.wait(Duration::from_secs(5))?;
//!     c.result()?;
//!     if let Some(t) = rx.take() {
//!         match t.reclaim(&c) { Ok(slot) => inbox = Some(slot), Err(t) => rx = Some(t) }
//!     }
//!     if let Some(t) = tx.take() {
//!         match t.reclaim(&c) { Ok(slot) => sent = Some(slot), Err(t) => tx = Some(t) }
//!     }
//! }
//! assert_eq!(&inbox.unwrap().as_slice()[..5], b"hello");
//! # Ok(())
//! # }
//! ```
//!
//! # An engine that owns its objects
//!
//! Every handle holds its parent through a type parameter ([`parent`]): a borrow (zero
//! cost, as above) or an `Arc` (a reference count touched when the handle is made and
//! dropped, never on the post/poll path). With `Arc`s an engine can own its context,
//! PD, CQ, QPs and MRs in one struct, with no lifetime, and move it to another thread:
//!
//! ```
//! use efa_typestate::*;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! type SharedPd = Arc<Pd<Arc<Context>>>;
//!
//! struct Engine {
//!     qp: Qp<SharedPd, Rts>,
//!     to_self: Peer<SharedPd>,
//!     inbox: Mr<SharedPd, Vec<u8>>,
//!     cq: Arc<ExtCq<Arc<Context>>>,
//! }
//!
//! # fn main() -> efa_typestate::Result<()> {
//! let ctx = Arc::new(Context::open_first_efa()?);
//! let pd: SharedPd = Arc::new(Pd::new(Arc::clone(&ctx))?);
//! let cq = Arc::new(ExtCq::new(Arc::clone(&ctx), CqOptions::new(512).waitable())?);
//! let qp = Qp::new(Arc::clone(&pd), Arc::clone(&cq), Arc::clone(&cq), &QpConfig::srd())?
//!     .prepare(0x42, None)?;
//! let to_self = Peer::connect(Arc::clone(&pd), &qp.endpoint())?;
//! let inbox = Mr::new(Arc::clone(&pd), vec![0u8; 64], AccessFlags::LOCAL_WRITE)?;
//! let engine = Engine { qp, to_self, inbox, cq };
//! drop((pd, ctx)); // the engine holds what it needs
//!
//! let worker = std::thread::spawn(move || -> efa_typestate::Result<Vec<u8>> {
//!     let e = engine;
//!     let mut r = RecvBatch::<1>::new(&e.qp);
//!     r.push(1, e.inbox.sge(0, 64)?)?;
//!     // SAFETY: `inbox` is read only after the receive's completion.
//!     unsafe { e.qp.post_recv(&r)? };
//!     let mut s = SendBatch::<1>::new(&e.qp);
//!     s.send_inline(2, &e.to_self, b"from a thread")?;
//!     // SAFETY: inline payload, copied during the call.
//!     unsafe { e.qp.post_send(&s)? };
//!     let mut done = ArrayVec::<Completion, 2>::new();
//!     e.cq.poll_until(&mut done, 2, Duration::from_secs(5))?;
//!     Ok(e.inbox.as_slice()[..13].to_vec())
//! });
//! assert_eq!(worker.join().unwrap()?, b"from a thread");
//! # Ok(())
//! # }
//! ```
//!
//! # Data paths
//!
//! Each QP and CQ has a [`Backend`]: libefa's data path (the provider), or the direct
//! one, which writes WQEs and receive descriptors into the device's rings and reads
//! completions by phase bit itself (issue 26; as libfabric's efa-direct does), behind the
//! same posting and polling API. [`Backend::Auto`] picks the provider until a qualification
//! run on EFA hardware (`scripts/qualify-direct.sh`) proves the direct path there; the
//! environment variable `EFA_RS_DIRECT=1` makes it pick the direct path, `EFA_RS_DIRECT=0`
//! refuses [`Backend::Direct`] too, and a device with sub-CQs (first-generation EFA) never
//! gets it (see [`Backend`]). A direct QP needs direct CQs and a direct CQ serves only
//! direct QPs (checked at QP creation); `backend()` says which one an object uses.
//!
//! # What the types enforce
//!
//! Compile-fail examples of each rule are in [`rules`].
//!
//! * QP states are types: send batches can be built and posted only for `Qp<_, Rts>`,
//!   receive batches for `Qp<_, Init | Rtr | Rts>` (a [`DynQp`], whose state is known at
//!   run time only, checks it when posting); transitions go Reset → Init → Rtr → Rts and
//!   consume the QP (a failure gives it back). States are sealed.
//! * Lifetimes, or reference counts, for both forms of every handle ([`parent`]): an MR,
//!   AH or QP cannot outlive its PD, a QP its CQs, a PD or CQ its context, a CQ its
//!   completion channel, an SGE its MR, a batch its QP (so a QP cannot change state,
//!   move or be destroyed while a batch built for it is still in use). An `Arc`-held QP
//!   takes `Arc`-held CQs only.
//! * SGEs are made only from registrations ([`MemoryRegion`] is sealed), range-checked,
//!   and carry the identity of their PD.
//! * Memory peers may write ([`RemoteWrite`] registrations) gives no `&`/`&mut` access
//!   in safe code: only copies, or `unsafe` slices with a stated contract.
//! * Only plain data ([`Plain`]: zerocopy's `FromBytes + IntoBytes + Immutable`) can be
//!   registered as `Vec<T>`, `Box<[T]>` or `&mut [T]` (other memory through
//!   `register_raw` or an `unsafe impl` of [`RegionMemory`], whose contracts say what
//!   must hold). Device memory has registrations without any host view: [`DmaBufMr`]
//!   (a dma-buf) and [`DeviceAddressMr`] (a device address, e.g. through
//!   `nvidia_peermem`), plugged in through `unsafe impl`s of [`DmaBufMemory`] and
//!   [`DeviceAddressMemory`] (as `efa-cuda` does for CUDA memory).
//! * Every send is signaled: there is no way to ask for an unsignaled one (EFA rejects them).
//! * A posting session ([`Qp::post_with`]) exists only inside its closure, on a QP
//!   borrowed mutably, on one thread: it is always closed, and nothing else posts to the
//!   QP while it holds the provider's send-queue lock.
//! * Posting through a batch is `unsafe`; posting a lease is safe, and a posted lease is
//!   moved into its ticket, out of reach until the completion gives it back. Completions
//!   have no public constructor.
//!
//! # What is checked at run time, before the device sees anything
//!
//! One compare per rule, when a work request is added to a batch ([`QpLimits`]): the PD
//! of every SGE and peer against the QP's ([`InvalidInput::WrongPd`]); the operation
//! against the QP's send ops and type; inline length, SGE count, SEND length
//! (`max_msg_sz`), RDMA length (`max_rdma_size`) and RDMA range; the queue depth
//! ([`InvalidInput::BatchLargerThanQueue`]: a batch can never outgrow its queue); `wr_id`
//! bit 63 (reserved for leases). Posting checks that the batch was built for this QP (a
//! pointer compare). A one-SGE request a batch checked can be kept ([`KeptSend`],
//! [`SendBatch::keep_last`]) and added to a later batch of the same QP without its checks
//! by the `unsafe` [`SendBatch::push_kept`] (bindings that post the same request objects
//! again and again: the caller answers for the QP and for the AH and memory it names). A [`SendSession`] ([`Qp::post_with`]) makes the same checks, with
//! the same errors, but hands each request to the provider as it is added, with nothing
//! staged (what C code using `ibv_wr_*` does), and stays all or nothing: a closure that
//! fails has its session aborted (`ibv_wr_abort`). A run of RDMA operations sharing one
//! registration, destination and remote buffer ([`Qp::post_run`], from arrays of offsets
//! and lengths: [`RdmaRun`], [`RunEntries`]) has what it shares checked once and each
//! entry for its ranges only, in one session, all or nothing; a bad entry's
//! [`RunError`] names its index. Registrations refuse `REMOTE_WRITE` on slice-giving MRs and remote
//! access to memory that does not stay allocated if leaked. QP creation refuses options
//! the QP type or the device lacks; RTS refuses out-of-range RNR retry counts. Each is a
//! typed [`Error`] naming the value and the limit.
//!
//! # Soundness: every promise, how it is kept, and the test that attacks it
//!
//! Safe code cannot make the device touch memory it does not own, nor read memory it
//! may be writing. Each promise below is kept by a type (misuse does not compile), a
//! run-time check (a typed [`Error`] before the device sees anything) or the contract
//! of an `unsafe fn`; the last column names the tests (in `tests/`, efa-sim's in
//! `efa-sim/tests/`) that try to break it. `adversarial.rs` holds the attacks found by
//! reading these docs as an attacker would.
//!
//! | Promise | Kept by | Attacked by |
//! |---|---|---|
//! | **Posted memory.** The device may read or write what a work request names from the post until its completion is polled, or until a reset or destroy of its QP has returned, and never after | contract of `unsafe` [`Qp::post_send`] / [`Qp::post_recv`]; efa-sim drops late responses | `efa-sim/tests/model_late.rs`; `adversarial::a_transfer_whose_completions_another_thread_steals_is_cut_off_by_a_reset` |
//! | **Keys are not reissued under a posted work request.** The crate never deregisters memory a work request of its own may still name (device keys can be reissued to later registrations) | abandoned and forgotten leases leak (or come back by [`Posted::reclaim_reset`] once their QP is reset); a pool dropped with slots out leaks; transfers cut chunks off by a QP reset, not a deregistration; the `unsafe` post contract forbids dropping an `Mr` in the window | `adversarial::hole_1_*` (both), `adversarial::tickets_come_back_by_a_reset_of_their_own_qp_only`, `leases::a_dropped_ticket_keeps_its_slot_out_of_the_pool` |
//! | **Leased memory is out of reach while posted**, and comes back only by its own completion | type (the lease moves into [`Posted`]); `wr_id`s with bit 63 are reserved and unique; [`Completion`] has no constructor | `leases::*`, `adversarial::eighth_hole_*` |
//! | **Transfers return only when no chunk is in flight** ([`Qp::write_all`], [`Qp::read_all`]), also when the callback panics | check: the QP's own send CQ ([`InvalidInput::NotSendCq`]); reserved chunk ids, send-side opcodes only; the panic is caught and resumed after the wait; missing completions are cut off by a reset | `adversarial::hole_2_*`, `adversarial::eighth_hole_*`, `adversarial::a_transfer_whose_*`, `transfer::*` |
//! | **Multi-rail transfers return only when no chunk of any rail is in flight** ([`Rails::write_all`]), also when the callback panics | as above, per rail: each rail's CQ checked to be its QP's send CQ; chunk ids reserved with the rail in the upper bits, counted only from that rail's QP, send-side; a full queue is an error, never a retry; missing completions are cut off by resetting that rail's QP | `rail::*` (a rail killed mid-transfer, a timeout and a panicking callback with chunks in flight), `rail_processes::*` (loss and reordering) |
//! | **Peer-writable memory gives no `&`/`&mut`** | type ([`RemoteWrite`] registrations copy only) | `rules` compile-fail doctests, `soundness::hole_1_*` |
//! | **Remote access and leases need memory that survives a leak** (`mem::forget` of an `Mr` or ticket) | check ([`InvalidInput::RemoteAccessNeedsOwnedMemory`], [`InvalidInput::LeaseNeedsOwnedMemory`]) | `soundness::hole_3_*`, `leases::refused_leases_come_back_and_reach_nothing` |
//! | **Objects of another PD or device never reach a post** (lkeys of two devices collide) | check: the [`PdId`] of every SGE, peer and lease | `soundness::hole_2_*`, `leases::refused_leases_come_back_and_reach_nothing` |
//! | **Handles cannot outlive their parents**; a batch pins its QP | types (borrows or `Arc`s, [`parent`]) | `rules` compile-fail doctests, `ownership::*` |
//! | **States**: sends only in RTS, receives from INIT on | types ([`QpState`], sealed); [`DynQp`] checks | `rules` compile-fail doctests, `session::a_dyn_qp_opens_a_session_only_in_rts` |
//! | **Limits** of the QP (SGE counts, including QPs granted none, inline, SEND and RDMA lengths, queue depth) and of the device at creation (depths, SGEs, inline, CQ entries; a CQ must hold its QP's depths) | checks naming value and limit ([`QpLimits`], [`InvalidInput::ExceedsDeviceLimit`], [`InvalidInput::CqTooSmall`]) | `adversarial_limits::*`, `limits::*` |
//! | **Numbers from callers and peers never wrap** (element indexes, offsets, remote ranges, iovas, chunking) | checked arithmetic, `clippy::arithmetic_side_effects` denied where peer numbers are handled; [`InvalidInput::AddressWraps`] | `adversarial::hole_3_*`, `props_wire::*`, `props_ranges::*` (property tests) |
//! | **Only dma-bufs register as dma-bufs** | the device refuses other fds (EINVAL, as the kernel does) | `adversarial_dmabuf::*` |
//! | **Polls say when they cannot take anything** | check ([`InvalidInput::OutputFull`]) | `adversarial_polls::*` |
//! | **Threads**: handles are `Send`/`Sync` as their holders; sessions stay on one thread inside their closure | types; the provider's locks | `data::several_threads_post_to_one_qp`, the ThreadSanitizer job (`scripts/sanitize.sh`) |
//! | **Unwinding** never leaves a session open or a transfer's chunks in flight | guards; `catch_unwind` around transfer callbacks | `session::a_panic_in_the_session_aborts_it`, `adversarial::hole_2_a_panicking_*` |
//! | **Raw escape hatches** (`as_ptr`, `modify`, `register_raw`, `as_slice_unchecked`, `push_kept`) | their `# Safety` contracts (raw work requests must not use `wr_id` bit 63) | n/a: `unsafe` by design |
//!
//! An abandoned lease therefore costs its memory and registration until the process
//! exits: reclaim tickets, by their completion or, at teardown, by resetting their QP. Memory sanity is also checked by AddressSanitizer over the
//! tests on efa-sim (`scripts/sanitize.sh`, run by CI).
//!
//! # Waiting, and no silent hangs
//!
//! [`CompletionQueue::poll_until`] / [`wait`](CompletionQueue::wait) spin briefly, then
//! sleep on the CQ's own channel ([`CqOptions::waitable`]) or poll with short naps, and
//! return [`Error::Timeout`] after the deadline. SRD QPs retry RNR a finite
//! [`DEFAULT_RNR_RETRY`] times unless [`RnrRetry::Forever`] is asked for by name.
//! [`Qp::write_all`] / [`Qp::read_all`] move buffers of any size within the send queue's
//! depth ([`Transfer`] sets the timeout; the chunks' `wr_id`s are reserved ones, and
//! the call returns only when no chunk is in flight). Chunk `i` of an [`RdmaChunks`]
//! fill of a batch gets `base + i`.
//!
//! # Choosing a CQ
//!
//! [`Cq`] (`ibv_create_cq` + `ibv_poll_cq`) is the classic form; [`ExtCq`]
//! (`ibv_create_cq_ex`/`efadv_create_cq`, polled through function pointers checked once)
//! can also report the sender GID of unknown peers and the unsolicited flag of
//! write-with-immediate. Both poll into a caller-provided [`ArrayVec`] of [`Completion`]s
//! and never allocate. A shared [`CompChannel`] plus [`CompletionQueue::request_notify`]
//! lets a thread sleep (or epoll) on several CQs.
//!
//! # Threads
//!
//! The EFA provider locks SQ, RQ and CQ internally, so [`Qp`], [`Cq`], [`ExtCq`] and the
//! other handles are `Send + Sync` (when their holders are): several threads may post to
//! one QP or poll one CQ. A single poster per QP and poller per CQ remains the fastest
//! arrangement.
//!
//! # Features
//!
//! `std` (default): `std::error::Error`, `From<Error> for std::io::Error`,
//! `AsFd`/`AsRawFd`, owned `Vec`/`Box` buffers, `Arc`-held handles, [`pool`], waiting
//! with a timeout and [`Qp::write_all`]/[`read_all`](Qp::read_all). Without it the crate
//! is `#![no_std]`.
#![cfg_attr(not(feature = "std"), no_std)]
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
// Failed transitions and closes hand the object back by value, on purpose: no allocation.
#![allow(clippy::result_large_err)]

/// The fixed-capacity vector completions are polled into (re-exported so callers need no
/// extra dependency).
pub use arrayvec::{self, ArrayVec};
pub use efa_sys as sys;
/// zerocopy, whose traits say what plain data is (re-exported for `#[derive]`s).
pub use zerocopy;

mod ffi;
mod flags;

pub mod ah;
pub mod context;
pub mod cq;
pub mod device;
pub mod endpoint;
pub mod error;
pub mod lease;
pub mod mr;
pub mod parent;
pub mod pd;
#[cfg(feature = "std")]
pub mod pool;
pub mod qp;
#[cfg(feature = "std")]
pub mod rail;
pub mod rules;
#[cfg(feature = "std")]
pub mod topology;
pub mod wr;

// The direct data path's ring encoders and barriers (issue 26): an internal interface for
// the direct backend and its tests, not a stable API.
#[doc(hidden)]
pub mod direct;

pub use ah::{Ah, Peer, AH_UNKNOWN};
pub use context::{AsyncEvent, Context, DeviceAttr, DeviceCaps, EfaDeviceAttr, PortAttr};
pub use cq::{
    CompChannel, Completion, CompletionFlags, CompletionQueue, Cq, CqEvent, CqId, CqLayout,
    CqOptions, ExtCq, WcOpcode, WcStatus, WorkCompletion,
};
pub use device::{Device, DeviceList};
pub use direct::policy::DIRECT_ENV;
pub use endpoint::{EndpointInfo, Gid, MAX_QPN};
pub use error::{
    CqRole, DeviceLimit, DirectError, EfaStatus, Errno, Error, InvalidInput, PdObject, Result,
    RunArray, SrdOnly, Unsupported, Verb,
};
pub use lease::{Lease, Posted, Rejected};
#[cfg(feature = "std")]
pub use mr::DmaBufFd;
pub use mr::{
    Access, AccessFlags, DeviceAddressMemory, DeviceAddressMr, DmaBufMemory, DmaBufMr, Local,
    MemoryRegion, Mr, MrInterconnect, Plain, RawMemory, RawRegion, RegionMemory, RemoteBuffer,
    RemoteWrite, Sge, SgeList, Sges,
};
#[cfg(feature = "std")]
pub use mr::{NumaBuffer, NumaError, NumaPlacement, MAX_NUMA_NODES};
pub use parent::{Parent, Sibling};
pub use pd::{Pd, PdId};
#[cfg(feature = "std")]
pub use pool::{BufferPool, Slot};
#[cfg(feature = "std")]
pub use qp::Transfer;
pub use qp::{
    Backend, DynQp, Init, Qp, QpAttr, QpCaps, QpConfig, QpState, QpStateKind, QpType, RecvReady,
    Reset, RnrRetry, Rtr, Rts, RtsOptions, SendSession, TransitionError, WqLayout,
    DEFAULT_RNR_RETRY,
};
#[cfg(feature = "std")]
pub use rail::{
    Landed, Notice, RailError, RailMr, RailNotices, RailRegion, RailReport, RailTally,
    RailTransfer, Rails,
};
#[cfg(feature = "std")]
pub use topology::{
    CpuList, NicTopology, NumaNode, PciAddress, PciLocation, Proximity, Topology, TopologyError,
    TopologyErrorKind,
};
pub use wr::{
    KeptSend, Payload, QpLimits, RdmaChunks, RdmaRun, RecvBatch, RecvBufs, RecvTarget, RecvWr,
    RunEntries, RunError, RunOp, SendBatch, SendOp, SendOps, SendTarget, SendWr, StagedSend,
};
