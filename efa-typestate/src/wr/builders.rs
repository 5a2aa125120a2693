//! The operation builders (`send`, `send_imm`, `send_inline`, `write`, `write_imm`,
//! `read`) of both ways of posting sends: [`SendBatch`](super::SendBatch), which checks
//! and keeps each request, and [`SendSession`](crate::SendSession), which checks and
//! hands it to the provider. One definition for both, over each type's `add`.

/// Defines the six builders in an `impl` whose type has
/// `fn add<P>(&mut self, wr_id: u64, op: SendOp, peer: &Peer<P>, payload: Payload<'_>) -> Result<()>`.
/// `peer` and `data` are the lifetimes the peer and the payload are borrowed for
/// (the batch's own, or `'_` and a per-call `'a` listed in `generics`).
macro_rules! send_builders {
    (peer: $pl:lifetime, data: $dl:lifetime, generics: [$($g:tt)*]) => {
        /// Adds a send.
        #[inline]
        pub fn send<$($g)* P>(
            &mut self,
            wr_id: u64,
            peer: &$pl Peer<P>,
            payload: impl Into<Payload<$dl>>,
        ) -> Result<()> {
            self.add(wr_id, SendOp::Send, peer, payload.into())
        }
        /// Adds a send with immediate data (host order).
        #[inline]
        pub fn send_imm<$($g)* P>(
            &mut self,
            wr_id: u64,
            peer: &$pl Peer<P>,
            payload: impl Into<Payload<$dl>>,
            imm: u32,
        ) -> Result<()> {
            self.add(wr_id, SendOp::SendImm(imm), peer, payload.into())
        }
        /// Adds an inline send: `bytes` are copied into the work request when it is
        /// handed to the provider (at the post of a batch, at once in a session).
        #[inline]
        pub fn send_inline<$($g)* P>(
            &mut self,
            wr_id: u64,
            peer: &$pl Peer<P>,
            bytes: &$dl [u8],
        ) -> Result<()> {
            self.add(wr_id, SendOp::Send, peer, Payload::Inline(bytes))
        }
        /// Adds an RDMA write of `local` to `remote` (whose start it writes).
        #[inline]
        pub fn write<$($g)* P>(
            &mut self,
            wr_id: u64,
            peer: &$pl Peer<P>,
            local: impl Into<Payload<$dl>>,
            remote: RemoteBuffer,
        ) -> Result<()> {
            self.add(wr_id, SendOp::Write(remote), peer, local.into())
        }
        /// Adds an RDMA write with immediate.
        #[inline]
        pub fn write_imm<$($g)* P>(
            &mut self,
            wr_id: u64,
            peer: &$pl Peer<P>,
            local: impl Into<Payload<$dl>>,
            remote: RemoteBuffer,
            imm: u32,
        ) -> Result<()> {
            self.add(wr_id, SendOp::WriteImm(remote, imm), peer, local.into())
        }
        /// Adds an RDMA read of `remote` into `local`.
        #[inline]
        pub fn read<$($g)* P>(
            &mut self,
            wr_id: u64,
            peer: &$pl Peer<P>,
            local: impl Into<Payload<$dl>>,
            remote: RemoteBuffer,
        ) -> Result<()> {
            self.add(wr_id, SendOp::Read(remote), peer, local.into())
        }
    };
}

pub(crate) use send_builders;
