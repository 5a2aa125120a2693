//! The rules about memory, leases and owned handles, each shown by an example that must
//! not compile (pinned to the expected error code).
//!
//! # Memory peers may write has no safe slices
//!
//! A [`RemoteWrite`](crate::RemoteWrite) registration (peers may RDMA-write it at any
//! time) gives no `&[T]`:
//!
//! ```compile_fail,E0599
//! # use efa_typestate::*;
//! # fn f(pd: &Pd<&Context>) -> Result<()> {
//! let target = pd.register_remote_write(vec![0u8; 64], AccessFlags::LOCAL_WRITE)?;
//! let view: &[u8] = target.as_slice(); // error: no `as_slice` on Mr<_, _, RemoteWrite>
//! # Ok(()) }
//! ```
//!
//! nor `&mut [T]`:
//!
//! ```compile_fail,E0599
//! # use efa_typestate::*;
//! # fn f(pd: &Pd<&Context>) -> Result<()> {
//! let mut target = pd.register_remote_write(vec![0u8; 64], AccessFlags::LOCAL_WRITE)?;
//! let view: &mut [u8] = target.as_mut_slice(); // error: no `as_mut_slice`
//! # Ok(()) }
//! ```
//!
//! Slices without copying are `unsafe`, with a stated contract:
//!
//! ```compile_fail,E0133
//! # use efa_typestate::*;
//! # fn f(pd: &Pd<&Context>) -> Result<()> {
//! let target = pd.register_remote_write(vec![0u8; 64], AccessFlags::LOCAL_WRITE)?;
//! let view = target.as_slice_unchecked(); // error: call to unsafe function
//! # Ok(()) }
//! ```
//!
//! Writes go through `&mut`, so two threads never write the same registration at once:
//!
//! ```compile_fail,E0596
//! # use efa_typestate::*;
//! # fn f(pd: &Pd<&Context>) -> Result<()> {
//! let target = pd.register_remote_write(vec![0u32; 16], AccessFlags::LOCAL_WRITE)?;
//! target.write(0, 7)?; // error: cannot borrow `target` as mutable
//! # Ok(()) }
//! ```
//!
//! Device memory has no host view at all: a registration by device address (or a
//! dma-buf) gives no slices, whatever its access:
//!
//! ```compile_fail,E0599
//! # use efa_typestate::*;
//! # fn f<O: DeviceAddressMemory>(pd: &Pd<&Context>, gpu: O) -> Result<()> {
//! let mr = pd.register_device_address(gpu, AccessFlags::LOCAL_WRITE)?;
//! let view: &[u8] = mr.as_slice(); // error: no `as_slice` on DeviceAddressMr
//! # Ok(()) }
//! ```
//!
//! # Only plain data is registered
//!
//! The device writes any bytes and reads every byte: `bool` (not every bit pattern is a
//! value) cannot be registered, `u16` (e.g. f16 bits), `f32`, `u64` and `#[repr(C)]`
//! records deriving zerocopy's traits can:
//!
//! ```compile_fail,E0277
//! # use efa_typestate::*;
//! # fn f(pd: &Pd<&Context>) -> Result<()> {
//! let flags = pd.register(vec![false; 64], AccessFlags::LOCAL_WRITE)?; // error: bool is not Plain
//! # Ok(()) }
//! ```
//!
//! # A posted lease is out of reach until its completion
//!
//! ```compile_fail,E0382
//! # use efa_typestate::*;
//! # fn f(qp: &Qp<&Pd<&Context>, Rts>, pool: &BufferPool<&Pd<&Context>>) -> Result<()> {
//! let slot = pool.take().unwrap();
//! let ticket = qp.post_recv_lease(slot)?;
//! let bytes = slot.as_slice(); // error: borrow of moved value `slot`
//! # Ok(()) }
//! ```
//!
//! The ticket gives no access to the lease:
//!
//! ```compile_fail,E0599
//! # use efa_typestate::*;
//! # fn f(qp: &Qp<&Pd<&Context>, Rts>, pool: &BufferPool<&Pd<&Context>>) -> Result<()> {
//! let ticket = qp.post_recv_lease(pool.take().unwrap())?;
//! let bytes = ticket.as_slice(); // error: no method `as_slice` on Posted
//! # Ok(()) }
//! ```
//!
//! and only the device's completion hands the lease back: a completion cannot be made up.
//!
//! ```compile_fail,E0599
//! # use efa_typestate::*;
//! let fake = Completion::default(); // error: no function `default`
//! ```
//!
//! ```compile_fail,E0451
//! # use efa_typestate::*;
//! # fn f(ticket: &Posted<Slot<&BufferPool<&Pd<&Context>>>>) {
//! let fake = Completion { wr_id: ticket.wr_id(), ..todo!() }; // error: private field
//! # }
//! ```
//!
//! # Owned (shared) handles follow the same rules
//!
//! An `Arc`-held QP has the same states:
//!
//! ```compile_fail,E0599
//! # use efa_typestate::*;
//! # use std::sync::Arc;
//! # fn f(pd: Arc<Pd<Arc<Context>>>, cq: Arc<ExtCq<Arc<Context>>>, s: &SendBatch<'_, 1>) -> Result<()> {
//! let qp = Qp::new(pd, Arc::clone(&cq), cq, &QpConfig::srd())?.init(1)?;
//! unsafe { qp.post_send(s)? }; // error: no method `post_send` on Qp<_, Init>
//! # Ok(()) }
//! ```
//!
//! and holds its CQs the way it holds its PD: an `Arc`-held QP cannot borrow its CQs
//! (a borrow would tie it to a lifetime after all):
//!
//! ```compile_fail,E0277
//! # use efa_typestate::*;
//! # use std::sync::Arc;
//! # fn f(pd: Arc<Pd<Arc<Context>>>, cq: &ExtCq<Arc<Context>>) -> Result<()> {
//! let qp = Qp::new(pd, cq, cq, &QpConfig::srd())?; // error: &ExtCq is no Sibling of Arc<Pd>
//! # Ok(()) }
//! ```
//!
//! A borrowed PD cannot be stored beside its context in one struct (that would be
//! self-referential); the `Arc` form is what an engine owns (see the crate docs):
//!
//! ```compile_fail,E0106
//! # use efa_typestate::*;
//! struct Engine {
//!     ctx: Context,
//!     pd: Pd<&Context>, // error: missing lifetime specifier
//! }
//! ```
