//! The rules the types enforce, each shown by an example that must not compile
//! (checked by `cargo test --doc`, pinned to the expected error code).
//!
//! All examples share this setup, which compiles and is correct as written:
//!
//! ```no_run
//! use efa_typestate::*;
//! fn setup() -> Result<()> {
//!     let ctx = Context::open_first_efa()?;
//!     let pd = ctx.alloc_pd()?;
//!     let cq = ctx.create_cq(CqOptions::new(64))?;
//!     let mut buf = [0u8; 64];
//!     let mr = pd.register(&mut buf[..], AccessFlags::LOCAL_WRITE)?;
//!     let sge = mr.sge(0, 64)?;
//!     let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?;
//!     let qp = qp.init(0x11)?;
//!     let mut recvs = RecvBatch::<1>::new();
//!     recvs.push(1, sge)?;
//!     unsafe { qp.post_recv(&recvs)? };               // receives from INIT on
//!     let qp = qp.rtr()?.rts(RtsOptions::default())?;
//!     let peer = pd.connect(&qp.endpoint())?;
//!     let mut sends = SendBatch::<1>::new();
//!     sends.send(2, &peer, sge)?;
//!     unsafe { qp.post_send(&sends)? };               // sends in RTS
//!     Ok(())
//! }
//! ```
//!
//! # Sends only in RTS
//!
//! A QP in INIT (or RESET, or RTR) has no `post_send`:
//!
//! ```compile_fail,E0599
//! # use efa_typestate::*;
//! # fn f(ctx: &Context) -> Result<()> {
//! # let pd = ctx.alloc_pd()?; let cq = ctx.create_cq(CqOptions::new(8))?;
//! # let peer = pd.connect(&EndpointInfo::new(Gid::default(), 1, 1)?)?;
//! let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?.init(0x11)?;
//! let mut sends = SendBatch::<1>::new();
//! sends.send_inline(1, &peer, b"hi")?;
//! unsafe { qp.post_send(&sends)? }; // error: no method `post_send` on Qp<Init>
//! # Ok(()) }
//! ```
//!
//! # No receives in RESET
//!
//! ```compile_fail,E0599
//! # use efa_typestate::*;
//! # fn f(ctx: &Context, sge: Sge<'_>) -> Result<()> {
//! # let pd = ctx.alloc_pd()?; let cq = ctx.create_cq(CqOptions::new(8))?;
//! let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?; // Qp<Reset>
//! let mut recvs = RecvBatch::<1>::new();
//! recvs.push(1, sge)?;
//! unsafe { qp.post_recv(&recvs)? }; // error: Reset is not RecvReady
//! # Ok(()) }
//! ```
//!
//! # States cannot be skipped
//!
//! RESET → RTR does not exist:
//!
//! ```compile_fail,E0599
//! # use efa_typestate::*;
//! # fn f(ctx: &Context) -> Result<()> {
//! # let pd = ctx.alloc_pd()?; let cq = ctx.create_cq(CqOptions::new(8))?;
//! let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?;
//! let qp = qp.rtr()?; // error: no method `rtr` on Qp<Reset>
//! # Ok(()) }
//! ```
//!
//! INIT → RTS does not exist either:
//!
//! ```compile_fail,E0599
//! # use efa_typestate::*;
//! # fn f(ctx: &Context) -> Result<()> {
//! # let pd = ctx.alloc_pd()?; let cq = ctx.create_cq(CqOptions::new(8))?;
//! let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?.init(0x11)?;
//! let qp = qp.rts(RtsOptions::default())?; // error: no method `rts` on Qp<Init>
//! # Ok(()) }
//! ```
//!
//! # A transition consumes the old state
//!
//! ```compile_fail,E0382
//! # use efa_typestate::*;
//! # fn f(ctx: &Context) -> Result<()> {
//! # let pd = ctx.alloc_pd()?; let cq = ctx.create_cq(CqOptions::new(8))?;
//! let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?;
//! let init = qp.init(0x11)?;
//! let again = qp.init(0x22)?; // error: use of moved value `qp`
//! # Ok(()) }
//! ```
//!
//! # States are sealed
//!
//! No new state can be invented to get around the rules:
//!
//! ```compile_fail,E0277
//! # use efa_typestate::*;
//! struct Anything;
//! impl QpState for Anything { // error: `Anything` does not implement the sealed supertrait
//!     const KIND: QpStateKind = QpStateKind::Rts;
//! }
//! ```
//!
//! # An MR cannot outlive its PD
//!
//! ```compile_fail,E0505
//! # use efa_typestate::*;
//! # fn f(ctx: &Context) -> Result<()> {
//! let pd = ctx.alloc_pd()?;
//! let mr = pd.register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)?;
//! drop(pd); // error: cannot move out of `pd` because it is borrowed
//! let key = mr.lkey();
//! # Ok(()) }
//! ```
//!
//! # A PD cannot outlive its context
//!
//! ```compile_fail,E0505
//! # use efa_typestate::*;
//! # fn f() -> Result<()> {
//! let ctx = Context::open_first_efa()?;
//! let pd = ctx.alloc_pd()?;
//! drop(ctx); // error: cannot move out of `ctx` because it is borrowed
//! let _ = pd.context();
//! # Ok(()) }
//! ```
//!
//! # An SGE cannot outlive its MR
//!
//! ```compile_fail,E0505
//! # use efa_typestate::*;
//! # fn f(pd: &Pd<'_>) -> Result<()> {
//! let mr = pd.register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)?;
//! let sge = mr.sge(0, 64)?;
//! drop(mr); // error: cannot move out of `mr` because it is borrowed
//! let len = sge.len();
//! # Ok(()) }
//! ```
//!
//! # SGEs are made only by the range-checked constructor
//!
//! ```compile_fail,E0451
//! # use efa_typestate::*;
//! let sge = Sge { raw: todo!(), _mr: core::marker::PhantomData }; // error: private fields
//! ```
//!
//! Nor can a look-alike region be invented to make SGEs with arbitrary keys:
//!
//! ```compile_fail,E0277
//! # use efa_typestate::*;
//! struct Fake;
//! impl MemoryRegion for Fake { // error: `Fake` does not implement the sealed supertrait
//!     fn lkey(&self) -> u32 { 1 }
//!     fn rkey(&self) -> u32 { 1 }
//!     fn iova(&self) -> u64 { 0 }
//!     fn len(&self) -> u64 { u64::MAX }
//!     fn as_mr_ptr(&self) -> *mut efa_typestate::sys::verbs::ibv_mr { core::ptr::null_mut() }
//! }
//! ```
//!
//! # A QP cannot outlive its CQ
//!
//! ```compile_fail,E0505
//! # use efa_typestate::*;
//! # fn f(ctx: &Context, pd: &Pd<'_>) -> Result<()> {
//! let cq = ctx.create_cq(CqOptions::new(8))?;
//! let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?;
//! drop(cq); // error: cannot move out of `cq` because it is borrowed
//! let n = qp.qpn();
//! # Ok(()) }
//! ```
//!
//! # Registered memory is reachable only through its MR
//!
//! ```compile_fail,E0502
//! # use efa_typestate::*;
//! # fn f(pd: &Pd<'_>) -> Result<()> {
//! let mut buf = [0u8; 64];
//! let mr = pd.register(&mut buf[..], AccessFlags::LOCAL_WRITE)?;
//! let first = buf[0]; // error: `buf` is mutably borrowed by the registration
//! drop(mr);
//! # Ok(()) }
//! ```
//!
//! # Every send is signaled
//!
//! There is no unsignaled form to ask for (EFA rejects unsignaled work requests):
//!
//! ```compile_fail,E0599
//! # use efa_typestate::*;
//! # fn f(peer: &Peer<'_>) -> Result<()> {
//! let mut sends = SendBatch::<1>::new();
//! sends.send_unsignaled(1, peer, Payload::Inline(b"x"))?; // error: no such method
//! # Ok(()) }
//! ```
//!
//! and no field to clear:
//!
//! ```compile_fail,E0560
//! # use efa_typestate::*;
//! # fn f<'a>(peer: &'a Peer<'a>) {
//! let wr = SendWr { wr_id: 1, op: SendOp::Send, peer, payload: Payload::Inline(b"x"), signaled: false };
//! # }
//! ```
//!
//! # Posting hands buffers to the device: `unsafe`
//!
//! ```compile_fail,E0133
//! # use efa_typestate::*;
//! # fn f(qp: &Qp<'_, Rts>, sends: &SendBatch<'_, 4>) -> Result<()> {
//! qp.post_send(sends)?; // error: call to unsafe function requires an unsafe block
//! # Ok(()) }
//! ```
