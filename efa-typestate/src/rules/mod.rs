//! The rules the types enforce, each shown by an example that must not compile (checked
//! by `cargo test --doc`, pinned to the expected error code). The rules about memory,
//! leases and owned handles are in [`memory`].
//!
//! All examples share this setup, which compiles and is correct as written:
//!
//! ```no_run
//! use efa_typestate::*;
//! fn setup() -> Result<()> {
//!     let ctx = Context::open_first_efa()?;
//!     let pd = ctx.alloc_pd()?;
//!     let cq = ctx.create_cq(CqOptions::new(512))?;
//!     let mut buf = [0u8; 64];
//!     let mr = pd.register(&mut buf[..], AccessFlags::LOCAL_WRITE)?;
//!     let sge = mr.sge(0, 64)?;
//!     let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?;
//!     let qp = qp.init(0x11)?;
//!     let mut recvs = RecvBatch::<1>::new(&qp);
//!     recvs.push(1, sge)?;
//!     unsafe { qp.post_recv(&recvs)? };               // receives from INIT on
//!     let qp = qp.rtr()?.rts(RtsOptions::default())?;
//!     let peer = pd.connect(&qp.endpoint())?;
//!     let mut sends = SendBatch::<1>::new(&qp);
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
//! # fn f(ctx: &Context, rts: &Qp<&Pd<&Context>, Rts>) -> Result<()> {
//! # let pd = ctx.alloc_pd()?; let cq = ctx.create_cq(CqOptions::new(512))?;
//! # let peer = pd.connect(&EndpointInfo::new(Gid::default(), 1, 1)?)?;
//! let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?.init(0x11)?;
//! let mut sends = SendBatch::<1>::new(rts);
//! sends.send_inline(1, &peer, b"hi")?;
//! unsafe { qp.post_send(&sends)? }; // error: no method `post_send` on Qp<_, Init>
//! # Ok(()) }
//! ```
//!
//! and no send batch can be built for it:
//!
//! ```compile_fail,E0277
//! # use efa_typestate::*;
//! # fn f(ctx: &Context) -> Result<()> {
//! # let pd = ctx.alloc_pd()?; let cq = ctx.create_cq(CqOptions::new(512))?;
//! let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?.init(0x11)?;
//! let sends = SendBatch::<1>::new(&qp); // error: Qp<_, Init> is not a SendTarget
//! # Ok(()) }
//! ```
//!
//! # No receives in RESET
//!
//! ```compile_fail,E0277
//! # use efa_typestate::*;
//! # fn f(ctx: &Context) -> Result<()> {
//! # let pd = ctx.alloc_pd()?; let cq = ctx.create_cq(CqOptions::new(512))?;
//! let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?; // Qp<_, Reset>
//! let recvs = RecvBatch::<1>::new(&qp); // error: Reset is not RecvReady
//! # Ok(()) }
//! ```
//!
//! ```compile_fail,E0599
//! # use efa_typestate::*;
//! # fn f(ctx: &Context, recvs: &RecvBatch<'_, 1>) -> Result<()> {
//! # let pd = ctx.alloc_pd()?; let cq = ctx.create_cq(CqOptions::new(512))?;
//! let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?; // Qp<_, Reset>
//! unsafe { qp.post_recv(recvs)? }; // error: Reset is not RecvReady
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
//! # let pd = ctx.alloc_pd()?; let cq = ctx.create_cq(CqOptions::new(512))?;
//! let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?;
//! let qp = qp.rtr()?; // error: no method `rtr` on Qp<_, Reset>
//! # Ok(()) }
//! ```
//!
//! INIT → RTS does not exist either:
//!
//! ```compile_fail,E0599
//! # use efa_typestate::*;
//! # fn f(ctx: &Context) -> Result<()> {
//! # let pd = ctx.alloc_pd()?; let cq = ctx.create_cq(CqOptions::new(512))?;
//! let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?.init(0x11)?;
//! let qp = qp.rts(RtsOptions::default())?; // error: no method `rts` on Qp<_, Init>
//! # Ok(()) }
//! ```
//!
//! # A transition consumes the old state
//!
//! ```compile_fail,E0382
//! # use efa_typestate::*;
//! # fn f(ctx: &Context) -> Result<()> {
//! # let pd = ctx.alloc_pd()?; let cq = ctx.create_cq(CqOptions::new(512))?;
//! let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?;
//! let init = qp.init(0x11)?;
//! let again = qp.init(0x22)?; // error: use of moved value `qp`
//! # Ok(()) }
//! ```
//!
//! # No transition while a batch for the QP exists
//!
//! A batch is checked against its QP's limits and borrows the QP, so the QP cannot move
//! on (or away) under it:
//!
//! ```compile_fail,E0505
//! # use efa_typestate::*;
//! # fn f(ctx: &Context, sge: Sge<'_>) -> Result<()> {
//! # let pd = ctx.alloc_pd()?; let cq = ctx.create_cq(CqOptions::new(512))?;
//! let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?.init(0x11)?;
//! let mut recvs = RecvBatch::<1>::new(&qp);
//! let qp = qp.rtr()?; // error: cannot move out of `qp` because it is borrowed
//! recvs.push(1, sge)?;
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
//! # fn f(pd: &Pd<&Context>) -> Result<()> {
//! let mr = pd.register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)?;
//! let sge = mr.sge(0, 64)?;
//! drop(mr); // error: cannot move out of `mr` because it is borrowed
//! let len = sge.len();
//! # Ok(()) }
//! ```
//!
//! # SGEs are made only by the range-checked constructors
//!
//! ```compile_fail,E0451
//! # use efa_typestate::*;
//! let sge = Sge { raw: todo!(), pd: todo!(), _mr: core::marker::PhantomData }; // error: private fields
//! ```
//!
//! Nor can a look-alike region be invented to make SGEs with arbitrary keys or PDs:
//!
//! ```compile_fail,E0277
//! # use efa_typestate::*;
//! struct Fake(PdId);
//! impl MemoryRegion for Fake { // error: `Fake` does not implement the sealed supertrait
//!     fn lkey(&self) -> u32 { 1 }
//!     fn rkey(&self) -> u32 { 1 }
//!     fn iova(&self) -> u64 { 0 }
//!     fn len(&self) -> u64 { u64::MAX }
//!     fn as_mr_ptr(&self) -> *mut efa_typestate::sys::verbs::ibv_mr { core::ptr::null_mut() }
//!     fn pd_id(&self) -> PdId { self.0 }
//!     fn revoke(&mut self) -> Result<()> { Ok(()) }
//! }
//! ```
//!
//! # A QP cannot outlive its CQ
//!
//! ```compile_fail,E0505
//! # use efa_typestate::*;
//! # fn f(ctx: &Context, pd: &Pd<&Context>) -> Result<()> {
//! let cq = ctx.create_cq(CqOptions::new(512))?;
//! let qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?;
//! drop(cq); // error: cannot move out of `cq` because it is borrowed
//! let n = qp.qpn();
//! # Ok(()) }
//! ```
//!
//! # A CQ cannot outlive its completion channel
//!
//! ```compile_fail,E0505
//! # use efa_typestate::*;
//! # fn f(ctx: &Context) -> Result<()> {
//! let ch = ctx.create_comp_channel()?;
//! let cq = ctx.create_cq_with_channel(&ch, CqOptions::new(8))?;
//! drop(ch); // error: cannot move out of `ch` because it is borrowed
//! let d = cq.depth();
//! # Ok(()) }
//! ```
//!
//! # Registered memory is reachable only through its MR
//!
//! ```compile_fail,E0502
//! # use efa_typestate::*;
//! # fn f(pd: &Pd<&Context>) -> Result<()> {
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
//! # fn f(qp: &Qp<&Pd<&Context>, Rts>, peer: &Peer<&Pd<&Context>>) -> Result<()> {
//! let mut sends = SendBatch::<1>::new(qp);
//! sends.send_unsignaled(1, peer, Payload::Inline(b"x"))?; // error: no such method
//! # Ok(()) }
//! ```
//!
//! and no field to clear:
//!
//! ```compile_fail,E0560
//! # use efa_typestate::*;
//! # fn f(payload: Payload<'_>) {
//! let wr = SendWr { wr_id: 1, op: SendOp::Send, payload, signaled: false };
//! # }
//! ```
//!
//! # Posting a batch hands buffers to the device: `unsafe`
//!
//! ```compile_fail,E0133
//! # use efa_typestate::*;
//! # fn f(qp: &Qp<&Pd<&Context>, Rts>, sends: &SendBatch<'_, 4>) -> Result<()> {
//! qp.post_send(sends)?; // error: call to unsafe function requires an unsafe block
//! # Ok(()) }
//! ```
//!
//! # A posting session lives only inside its closure
//!
//! [`Qp::post_with`](crate::Qp::post_with) holds the provider's send-queue lock while
//! its closure runs. Nothing else can post to the QP meanwhile (that post would wait
//! for the lock forever):
//!
//! ```compile_fail,E0502
//! # use efa_typestate::*;
//! # fn f(qp: &mut Qp<&Pd<&Context>, Rts>, peer: &Peer<&Pd<&Context>>,
//! #      sends: &SendBatch<'_, 1>) -> Result<()> {
//! unsafe {
//!     qp.post_with(|s| {
//!         s.send_inline(1, peer, b"x")?;
//!         qp.post_send(sends) // error: `*qp` is already borrowed mutably
//!     })?
//! };
//! # Ok(()) }
//! ```
//!
//! the session cannot be kept past the closure (so it is always closed):
//!
//! ```compile_fail,E0521
//! # use efa_typestate::*;
//! # fn f(qp: &mut Qp<&Pd<&Context>, Rts>) -> Result<()> {
//! let mut kept = None;
//! unsafe {
//!     qp.post_with(|s| {
//!         kept = Some(s); // error: borrowed data escapes outside of closure
//!         Ok(())
//!     })?
//! };
//! # Ok(()) }
//! ```
//!
//! nor used from another thread (the lock belongs to this one):
//!
//! ```compile_fail,E0277
//! # use efa_typestate::*;
//! # fn f(qp: &mut Qp<&Pd<&Context>, Rts>, peer: &Peer<&Pd<&Context>>) -> Result<()> {
//! unsafe {
//!     qp.post_with(|s| {
//!         std::thread::scope(|t| {
//!             t.spawn(|| s.send_inline(1, peer, b"x")); // error: SendSession is not Send
//!         });
//!         Ok(())
//!     })?
//! };
//! # Ok(()) }
//! ```
//!
//! and a QP that is not in RTS has no session:
//!
//! ```compile_fail,E0599
//! # use efa_typestate::*;
//! # fn f(ctx: &Context) -> Result<()> {
//! # let pd = ctx.alloc_pd()?; let cq = ctx.create_cq(CqOptions::new(512))?;
//! let mut qp = pd.create_qp(&cq, &cq, &QpConfig::srd())?.init(0x11)?.rtr()?;
//! unsafe { qp.post_with(|s| Ok(s.len()))? }; // error: no method `post_with` on Qp<_, Rtr>
//! # Ok(()) }
//! ```

pub mod memory;
