//! Datagram format (little-endian, fixed 96-byte header, then data).
//!
//! ```text
//!  0 magic u32 "EFAS"   4 kind u8  5 op u8  6 status u8  7 flags u8
//!  8 epoch u64 (requester incarnation)    16 req_id u64
//! 24 watermark u64 (requester: every req_id below it is finished)
//! 32 src_gid [16]
//! 48 src_qpn u16  50 dst_qpn u16  52 qkey u32
//! 56 imm (network order as given) u32   60 total_len u32
//! 64 remote_addr u64   72 rkey u32   76 pid u32 (requester, fast path)
//! 80 local_addr u64 (requester buffer, fast path)   88 reserved u32   92 data_len u32
//! ```

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Header size.
pub const HEADER: usize = 96;
/// Largest datagram we send or accept.
pub const MAX_DATAGRAM: usize = 65000;
/// Largest payload in one datagram.
pub const MAX_DATA: usize = MAX_DATAGRAM - HEADER;
const MAGIC: u32 = 0x5341_4645; // "EFAS"

/// Request (requester → responder).
pub const KIND_REQ: u8 = 1;
/// Response (responder → requester).
pub const KIND_RESP: u8 = 2;
/// Acknowledgements (responder → requester): every request whose id the data lists
/// (`data_len / 8` little-endian u64s) succeeded with no data to return, as if each had
/// a response of status 0; `epoch` names the requester incarnation (see [`Acks`]).
pub const KIND_ACKS: u8 = 3;
/// Most request ids one acknowledgement packet lists.
pub const MAX_ACKS: usize = 512;

/// Flag: the request carries an immediate.
pub const FLAG_IMM: u8 = 1;
/// Flag: data is not in the datagram; for a write the responder copies it with
/// process_vm_readv from `(pid, local_addr)`, a read it answers with [`STATUS_PULL`].
pub const FLAG_FAST: u8 = 2;
/// Flag: UD datagram (no response).
pub const FLAG_UD: u8 = 4;
/// Flag: write-with-imm commit after a chunked transfer: no data; the
/// responder validates the whole range and delivers the immediate.
pub const FLAG_COMMIT: u8 = 8;

/// Flag: the requester has many requests outstanding and can wait for its
/// acknowledgement to come with [`ACK_BATCH`] others (or the responder's next timer).
pub const FLAG_ACK_LAZY: u8 = 16;
/// Flag: the requester understands acknowledgement packets ([`KIND_ACKS`]); a requester
/// without it (an older efa-sim) is answered with responses only.
pub const FLAG_TAKES_ACKS: u8 = 32;
/// Acknowledgements a lazy requester's ids wait for before they are sent.
pub const ACK_BATCH: usize = 16;

/// Response status: the fast path failed; resend with data in datagrams.
pub const STATUS_FALLBACK: u8 = 0xf0;
/// Response status to a bulk read: the responder validated its rkey and range, and the
/// requester copies the `total_len` bytes itself from process `pid` at `local_addr` (the
/// responder's registered source) with `process_vm_readv`, while the read is still
/// pending at the requester (see `model::runtime::pull`).
pub const STATUS_PULL: u8 = 0xf1;

/// Operation codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// Two-sided send.
    Send = 0,
    /// RDMA read.
    Read = 1,
    /// RDMA write (with or without immediate, see `FLAG_IMM`).
    Write = 2,
}

impl Op {
    fn from_u8(v: u8) -> Option<Op> {
        match v {
            0 => Some(Op::Send),
            1 => Some(Op::Read),
            2 => Some(Op::Write),
            _ => None,
        }
    }
}

/// Decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// KIND_REQ or KIND_RESP.
    pub kind: u8,
    /// Operation.
    pub op: Op,
    /// Response status (raw EFA status, STATUS_FALLBACK or STATUS_PULL).
    pub status: u8,
    /// FLAG_* bits.
    pub flags: u8,
    /// Requester incarnation.
    pub epoch: u64,
    /// Request id (per requester endpoint).
    pub req_id: u64,
    /// Requester low watermark.
    pub watermark: u64,
    /// Requester GID.
    pub src_gid: [u8; 16],
    /// Requester QPN.
    pub src_qpn: u16,
    /// Destination QPN.
    pub dst_qpn: u16,
    /// Q_Key the requester used.
    pub qkey: u32,
    /// Immediate (network order).
    pub imm: u32,
    /// Message length.
    pub total_len: u32,
    /// Remote IOVA (RDMA).
    pub remote_addr: u64,
    /// Remote key (RDMA).
    pub rkey: u32,
    /// Requester pid (fast path request); responder pid (STATUS_PULL response).
    pub pid: u32,
    /// Requester buffer (fast path request); responder source (STATUS_PULL response).
    pub local_addr: u64,
    /// Bytes following the header.
    pub data_len: u32,
}

impl Header {
    /// An empty request header for `op`.
    pub fn new(kind: u8, op: Op) -> Header {
        Header {
            kind,
            op,
            status: 0,
            flags: 0,
            epoch: 0,
            req_id: 0,
            watermark: 0,
            src_gid: [0; 16],
            src_qpn: 0,
            dst_qpn: 0,
            qkey: 0,
            imm: 0,
            total_len: 0,
            remote_addr: 0,
            rkey: 0,
            pid: 0,
            local_addr: 0,
            data_len: 0,
        }
    }

    /// Writes the header into `buf[..HEADER]`.
    #[inline]
    pub fn encode(&self, buf: &mut [u8]) {
        let raw = RawHeader {
            magic: MAGIC.into(),
            kind: self.kind,
            op: self.op as u8,
            status: self.status,
            flags: self.flags,
            epoch: self.epoch.into(),
            req_id: self.req_id.into(),
            watermark: self.watermark.into(),
            src_gid: self.src_gid,
            src_qpn: self.src_qpn.into(),
            dst_qpn: self.dst_qpn.into(),
            qkey: self.qkey.into(),
            imm: self.imm.into(),
            total_len: self.total_len.into(),
            remote_addr: self.remote_addr.into(),
            rkey: self.rkey.into(),
            pid: self.pid.into(),
            local_addr: self.local_addr.into(),
            reserved: 0.into(),
            data_len: self.data_len.into(),
        };
        buf[..HEADER].copy_from_slice(raw.as_bytes());
    }

    /// Parses a datagram; `None` if it is not a well-formed efa-sim packet
    /// (wrong magic, unknown kind/op, data length not matching the datagram).
    #[inline]
    pub fn decode(buf: &[u8]) -> Option<(Header, &[u8])> {
        let (raw, data) = RawHeader::read_from_prefix(buf).ok()?;
        if raw.magic.get() != MAGIC || !matches!(raw.kind, KIND_REQ | KIND_RESP | KIND_ACKS) {
            return None;
        }
        let op = Op::from_u8(raw.op)?;
        if raw.data_len.get() as usize != data.len() {
            return None;
        }
        let h = Header {
            kind: raw.kind,
            op,
            status: raw.status,
            flags: raw.flags,
            epoch: raw.epoch.get(),
            req_id: raw.req_id.get(),
            watermark: raw.watermark.get(),
            src_gid: raw.src_gid,
            src_qpn: raw.src_qpn.get(),
            dst_qpn: raw.dst_qpn.get(),
            qkey: raw.qkey.get(),
            imm: raw.imm.get(),
            total_len: raw.total_len.get(),
            remote_addr: raw.remote_addr.get(),
            rkey: raw.rkey.get(),
            pid: raw.pid.get(),
            local_addr: raw.local_addr.get(),
            data_len: raw.data_len.get(),
        };
        Some((h, data))
    }
}

/// The header's bytes as they travel (see the module docs): little-endian fields, no
/// padding, any alignment, so it is written and read as one block.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct RawHeader {
    magic: U32,
    kind: u8,
    op: u8,
    status: u8,
    flags: u8,
    epoch: U64,
    req_id: U64,
    watermark: U64,
    src_gid: [u8; 16],
    src_qpn: U16,
    dst_qpn: U16,
    qkey: U32,
    imm: U32,
    total_len: U32,
    remote_addr: U64,
    rkey: U32,
    pid: U32,
    local_addr: U64,
    reserved: U32,
    data_len: U32,
}

static_assertions::const_assert_eq!(core::mem::size_of::<RawHeader>(), HEADER);
static_assertions::const_assert_eq!(core::mem::offset_of!(RawHeader, src_gid), 32);
static_assertions::const_assert_eq!(core::mem::offset_of!(RawHeader, data_len), 92);

/// Request ids waiting to be acknowledged to one requester incarnation at `to`.
#[derive(Debug)]
pub struct Acks {
    /// The requester's address.
    pub to: std::net::SocketAddrV4,
    /// Its incarnation.
    pub epoch: u64,
    /// The ids (at most [`MAX_ACKS`]).
    pub ids: Vec<u64>,
    /// Every id listed came from a request with [`FLAG_ACK_LAZY`].
    pub lazy: bool,
}

impl Acks {
    /// Bytes of the acknowledgement packet of these ids.
    pub fn packet_len(&self) -> usize {
        HEADER + self.ids.len() * 8
    }

    /// Encodes the acknowledgement packet of `ids` from `gid` into `buf` (at least
    /// [`Acks::packet_len`] bytes); its length.
    pub fn encode(&self, gid: [u8; 16], buf: &mut [u8]) -> usize {
        let mut h = Header::new(KIND_ACKS, Op::Send);
        h.epoch = self.epoch;
        h.src_gid = gid;
        h.data_len = (self.ids.len() * 8) as u32;
        h.encode(buf);
        for (i, id) in self.ids.iter().enumerate() {
            let at = HEADER + i * 8;
            buf[at..at + 8].copy_from_slice(&id.to_le_bytes());
        }
        HEADER + self.ids.len() * 8
    }
}

/// The request ids an acknowledgement packet's data lists (a trailing partial id is
/// ignored).
pub fn acked_ids(data: &[u8]) -> impl Iterator<Item = u64> + '_ {
    data.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
}

/// Magic of a bundle datagram: several packets to one destination.
pub const BUNDLE_MAGIC: u32 = 0x4241_4645; // "EFAB"
const BUNDLE_HEADER: usize = 8;

/// Collects packets for one destination into one datagram:
/// `magic u32, count u32, then count × (len u32, packet)`. A bundle of one
/// packet is sent as the plain packet.
#[derive(Debug)]
pub struct BundleBuf {
    /// [`MAX_DATAGRAM`] bytes, allocated (and zeroed) once: packets are built in place.
    buf: Box<[u8]>,
    /// Bytes in use (the bundle header and the packets so far).
    len: usize,
    count: u32,
    /// Destination of the packets collected so far.
    pub to: Option<std::net::SocketAddrV4>,
}

impl Default for BundleBuf {
    fn default() -> Self {
        BundleBuf {
            buf: vec![0u8; MAX_DATAGRAM].into_boxed_slice(),
            len: 0,
            count: 0,
            to: None,
        }
    }
}

impl BundleBuf {
    /// Whether a packet of `n` bytes still fits.
    pub fn fits(&self, n: usize) -> bool {
        self.len.max(BUNDLE_HEADER) + 4 + n <= MAX_DATAGRAM
    }

    /// Appends a packet for `to` (the caller checked `fits` and the destination).
    pub fn push(&mut self, to: std::net::SocketAddrV4, pkt: &[u8]) {
        self.push_with(to, pkt.len(), |out| {
            out.copy_from_slice(pkt);
            Some(pkt.len())
        });
    }

    /// Appends a packet for `to` that `build` writes in place into the `max` bytes it
    /// is given, returning its length (at most `max`); nothing is appended when it
    /// returns `None` or more than `max`. The caller checked `fits(max)` and the
    /// destination. Saves building the packet elsewhere and copying it in.
    pub fn push_with(
        &mut self,
        to: std::net::SocketAddrV4,
        max: usize,
        build: impl FnOnce(&mut [u8]) -> Option<usize>,
    ) -> Option<usize> {
        let start = if self.count == 0 {
            BUNDLE_HEADER
        } else {
            self.len
        };
        let at = start + 4;
        let out = self.buf.get_mut(at..at + max)?;
        let n = build(out).filter(|&n| n <= max)?;
        if self.count == 0 {
            self.to = Some(to);
        }
        self.buf[start..at].copy_from_slice(&(n as u32).to_le_bytes());
        self.len = at + n;
        self.count += 1;
        Some(n)
    }

    /// The datagram to send (empty if nothing was pushed).
    pub fn datagram(&mut self) -> &[u8] {
        match self.count {
            0 => &[],
            1 => &self.buf[BUNDLE_HEADER + 4..self.len],
            n => {
                self.buf[0..4].copy_from_slice(&BUNDLE_MAGIC.to_le_bytes());
                self.buf[4..8].copy_from_slice(&n.to_le_bytes());
                &self.buf[..self.len]
            }
        }
    }

    /// The packets collected so far.
    pub fn items(&self) -> BundleItems<'_> {
        BundleItems {
            rest: self.buf.get(BUNDLE_HEADER..self.len).unwrap_or(&[]),
            left: self.count,
        }
    }

    /// Empties the bundle (keeps its buffer).
    pub fn clear(&mut self) {
        self.count = 0;
        self.to = None;
        self.len = 0;
    }
}

/// The packets of a bundle datagram, or `None` if `buf` is not a bundle.
/// Iteration stops at the first malformed length.
pub fn bundle_items(buf: &[u8]) -> Option<BundleItems<'_>> {
    if buf.len() < BUNDLE_HEADER || buf[0..4] != BUNDLE_MAGIC.to_le_bytes() {
        return None;
    }
    let left = u32::from_le_bytes(buf[4..8].try_into().unwrap_or([0; 4]));
    Some(BundleItems {
        rest: &buf[BUNDLE_HEADER..],
        left,
    })
}

/// Iterator over the packets of a bundle.
pub struct BundleItems<'a> {
    rest: &'a [u8],
    left: u32,
}

impl<'a> Iterator for BundleItems<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 || self.rest.len() < 4 {
            return None;
        }
        let n = u32::from_le_bytes(self.rest[..4].try_into().unwrap_or([0; 4])) as usize;
        if self.rest.len() - 4 < n {
            self.left = 0;
            return None;
        }
        let item = &self.rest[4..4 + n];
        self.rest = &self.rest[4 + n..];
        self.left -= 1;
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_rejects() {
        let mut h = Header::new(KIND_REQ, Op::Write);
        h.req_id = 7;
        h.imm = 0xdead_beef;
        h.src_gid[3] = 9;
        h.data_len = 3;
        let mut buf = vec![0u8; HEADER + 3];
        h.encode(&mut buf);
        buf[HEADER..].copy_from_slice(b"abc");
        let (d, data) = Header::decode(&buf).unwrap();
        assert_eq!(d, h);
        assert_eq!(data, b"abc");
        assert!(
            Header::decode(&buf[..HEADER + 2]).is_none(),
            "length mismatch"
        );
        assert!(Header::decode(&buf[..10]).is_none());
        buf[5] = 99;
        assert!(Header::decode(&buf).is_none(), "unknown op");
        buf[5] = 2;
        buf[0] = 0;
        assert!(Header::decode(&buf).is_none(), "bad magic");
    }

    #[test]
    fn acknowledgements_round_trip() {
        let a = Acks {
            to: std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 9),
            epoch: 77,
            ids: vec![5, 1 << 40, 6],
            lazy: false,
        };
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let n = a.encode([3; 16], &mut buf);
        let (h, data) = Header::decode(&buf[..n]).unwrap();
        assert_eq!((h.kind, h.epoch, h.src_gid), (KIND_ACKS, 77, [3; 16]));
        assert_eq!(acked_ids(data).collect::<Vec<_>>(), vec![5, 1 << 40, 6]);
        assert_eq!(acked_ids(&data[..13]).count(), 1, "partial ids ignored");
    }

    #[test]
    fn bundles() {
        let to = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 9);
        let mut b = BundleBuf::default();
        assert!(b.datagram().is_empty());
        b.push(to, b"one");
        assert_eq!(b.datagram(), b"one", "a bundle of one is the plain packet");
        b.push(to, b"three");
        let d = b.datagram().to_vec();
        let items: Vec<&[u8]> = bundle_items(&d).unwrap().collect();
        assert_eq!(items, vec![&b"one"[..], &b"three"[..]]);
        // Truncated: stops, never reads past the end.
        let items: Vec<&[u8]> = bundle_items(&d[..d.len() - 1]).unwrap().collect();
        assert_eq!(items, vec![&b"one"[..]]);
        assert!(bundle_items(b"EFAS....").is_none());
        let items: Vec<&[u8]> = b.items().collect();
        assert_eq!(items, vec![&b"one"[..], &b"three"[..]]);
        b.clear();
        assert_eq!(b.to, None);
    }

    #[test]
    fn packets_built_in_place_join_a_bundle_only_when_built() {
        let to = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 9);
        let mut b = BundleBuf::default();
        assert_eq!(b.push_with(to, 8, |_| None), None, "a failed build");
        assert_eq!(b.to, None, "leaves an empty bundle empty");
        assert_eq!(b.push_with(to, 4, |_| Some(5)), None, "a length over max");
        assert!(b.datagram().is_empty());
        let built = b.push_with(to, 8, |out| {
            out[..3].copy_from_slice(b"abc");
            Some(3)
        });
        assert_eq!(built, Some(3));
        assert_eq!(b.to, Some(to));
        assert_eq!(
            b.push_with(to, 8, |out| {
                out[..2].copy_from_slice(b"zz");
                None
            }),
            None
        );
        b.push(to, b"de");
        let items: Vec<&[u8]> = b.items().collect();
        assert_eq!(
            items,
            vec![&b"abc"[..], &b"de"[..]],
            "the failed one left no trace"
        );
        assert_eq!(
            b.push_with(to, MAX_DATAGRAM, |_| Some(1)),
            None,
            "room past the datagram is never handed out"
        );
    }
}
