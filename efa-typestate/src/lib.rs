//! Safe, zero-allocation, typestate-checked access to AWS EFA (SRD and UD queue pairs,
//! SEND, RDMA read/write with immediate, efadv).
//!
//! The objects mirror verbs, one module each: [`device`] (list devices), [`context`]
//! (an open device), [`pd`], [`mr`] (memory registration and SGEs), [`ah`] (address
//! handles and peers), [`endpoint`] (GIDs and the endpoint-info wire format), [`cq`]
//! (completion queues and channels), [`qp`] (typestate queue pairs), [`wr`]
//! (work-request batches) and [`error`].
//!
//! # Quickstart (SRD, two QPs in one process)
//!
//! ```
//! use efa_typestate::*;
//!
//! # fn main() -> efa_typestate::Result<()> {
//! let ctx = Context::open_first_efa()?;
//! # assert!(efa_sim_select::fw_matches_selection(ctx.query_device()?.fw_ver()));
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_ext_cq(CqOptions::new(64))?;
//!
//! // Two SRD QPs, each brought to RTS in one call.
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
//! let target = pd.register(vec![0u8; 4096], AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
//!
//! // b posts a receive; a sends 5 bytes and RDMA-writes 5 bytes into b's target.
//! let mut recvs = RecvBatch::<4>::new();
//! recvs.push(7, dst.sge(0, 4096)?)?;
//! // SAFETY: `dst` is not touched until its completion is polled below.
//! unsafe { b.post_recv(&recvs)? };
//!
//! let mut batch = SendBatch::<4>::new();
//! batch.send(1, &to_b, src.sge(0, 5)?)?;
//! if ctx.caps().contains(DeviceCaps::RDMA_WRITE) {
//!     batch.write(2, &to_b, src.sge(0, 5)?, target.remote().slice(100, 5)?)?;
//! }
//! // SAFETY: `src` is not written until both completions are polled below.
//! unsafe { a.post_send(&batch)? };
//!
//! // Poll until the receive and every send completed.
//! let mut done = ArrayVec::<Completion, 16>::new();
//! while done.len() < batch.len() + 1 {
//!     let mut got = ArrayVec::<Completion, 16>::new();
//!     cq.poll(&mut got)?;
//!     for c in got {
//!         c.result()?;
//!         done.push(c);
//!     }
//! }
//! assert_eq!(&dst.as_slice()[..5], b"hello");
//! if ctx.caps().contains(DeviceCaps::RDMA_WRITE) {
//!     assert_eq!(&target.as_slice()[100..105], b"hello");
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # What the types enforce
//!
//! * QP states are types: sends compile only on `Qp<Rts>`, receives on `Qp<Init | Rtr | Rts>`,
//!   transitions go Reset → Init → Rtr → Rts and consume the QP (a failure gives it back).
//! * Lifetimes: an MR, AH or QP cannot outlive its PD, a QP its CQs, a PD its context, an
//!   SGE its MR, a CQ its completion channel.
//! * SGEs are made only by [`MemoryRegion::sge`], which checks the range lies inside the MR.
//! * Every send is signaled: there is no way to ask for an unsignaled one (EFA rejects them).
//! * Posting an operation the QP was not created for is a typed error, checked once per batch.
//!
//! Compile-fail examples of each rule are in [`rules`].
//!
//! # Choosing a CQ
//!
//! [`Cq`] (`ibv_create_cq` + `ibv_poll_cq`) is the classic form; [`ExtCq`]
//! (`ibv_create_cq_ex`/`efadv_create_cq`, polled through function pointers checked once)
//! can also report the sender GID of unknown peers and the unsolicited flag of
//! write-with-immediate. Both poll into a caller-provided [`ArrayVec`] of [`Completion`]s
//! and never allocate. A [`CompChannel`] plus [`CompletionQueue::request_notify`] lets a
//! thread sleep (or epoll) until completions arrive.
//!
//! # Soundness: who may touch posted buffers
//!
//! Posting is `unsafe` ([`Qp::post_send`], [`Qp::post_recv`]): from the post until the
//! work request's completion is polled, the device may read (sends, RDMA-write sources)
//! or write (receives, RDMA-read destinations) the bytes its SGEs name, and the caller
//! promises not to write (resp. access) them meanwhile. This is the contract hand-written
//! C lives by, stated precisely, with no per-post bookkeeping. Everything else is safe:
//! memory cannot be freed while registered (the `Mr` owns or borrows it, and deregisters
//! before releasing it), and a dropped `Mr` makes the device fail the work request rather
//! than touch the memory. Peers can write memory registered with `REMOTE_WRITE` at any
//! time, even after a safe `mem::forget` of its `Mr`; so safe code may grant that right
//! only to memory that stays allocated if leaked (owned `Vec`/`Box` buffers), never to a
//! borrowed slice. Read remote-writable memory when the application protocol says the
//! peer is done (e.g. after its write-with-immediate completion). If deregistration fails,
//! an `Mr` leaks its memory rather than freeing it while registered.
//!
//! # Threads
//!
//! The EFA provider locks SQ, RQ and CQ internally, so [`Qp`], [`Cq`], [`ExtCq`] and the
//! other handles are `Send + Sync`: several threads may post to one QP or poll one CQ.
//! A single poster per QP and poller per CQ remains the fastest arrangement.
//!
//! # Features
//!
//! `std` (default): `std::error::Error`, `AsFd`/`AsRawFd`, owned `Vec`/`Box` buffers.
//! Without it the crate is `#![no_std]`.
#![cfg_attr(not(feature = "std"), no_std)]
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
// Failed transitions and closes hand the object back by value, on purpose: no allocation.
#![allow(clippy::result_large_err)]

/// The fixed-capacity vector completions are polled into (re-exported so callers need no
/// extra dependency).
pub use arrayvec::{self, ArrayVec};
pub use efa_sys as sys;

mod ffi;
mod flags;

pub mod ah;
pub mod context;
pub mod cq;
pub mod device;
pub mod endpoint;
pub mod error;
pub mod mr;
pub mod pd;
pub mod qp;
pub mod rules;
pub mod wr;

pub use ah::{Ah, Peer, AH_UNKNOWN};
pub use context::{AsyncEvent, Context, DeviceAttr, DeviceCaps, EfaDeviceAttr, PortAttr};
pub use cq::{
    CompChannel, Completion, CompletionFlags, CompletionQueue, Cq, CqEvent, CqId, CqLayout,
    CqOptions, ExtCq, WcOpcode, WcStatus,
};
pub use device::{Device, DeviceList};
pub use endpoint::{EndpointInfo, Gid, MAX_QPN};
pub use error::{EfaStatus, Errno, Error, InvalidInput, Result, Unsupported, Verb};
pub use mr::{
    AccessFlags, DmaBufMr, MemoryRegion, Mr, MrInterconnect, RawMemory, RegionMemory, RemoteBuffer,
    Sge,
};
pub use pd::Pd;
pub use qp::{
    DynQp, Init, Qp, QpAttr, QpCaps, QpConfig, QpState, QpStateKind, QpType, RecvReady, Reset, Rtr,
    Rts, RtsOptions, TransitionError, WqLayout,
};
pub use wr::{
    Payload, RdmaChunks, RecvBatch, RecvBufs, RecvWr, SendBatch, SendOp, SendOps, SendWr,
};
