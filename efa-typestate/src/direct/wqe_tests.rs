//! Round trips of the send WQE encoders: every field read back through the `efa_sys::io`
//! masks, over many pseudo-random requests, plus fixed byte images.

use super::super::bits::{get8, get_addr, get_u16, get_u32};
use super::*;
use efa_sys::io::{TX_META_DESC_META_EXTENSION_MASK, TX_META_DESC_PROCESSING_HINTS_MASK};

/// What a WQE says, read with the C header's masks.
#[derive(Debug, PartialEq, Eq)]
struct Decoded {
    req_id: u16,
    op: u8,
    has_imm: bool,
    inline: bool,
    phase: bool,
    comp_req: bool,
    dest: Destination,
    length: u16,
    imm: u32,
}

fn decode(w: &[u8]) -> Decoded {
    let (c1, c2) = (w[CTRL1], w[CTRL2]);
    assert_eq!(
        c1 & TX_META_DESC_META_DESC_MASK,
        TX_META_DESC_META_DESC_MASK
    );
    assert_eq!(c1 & TX_META_DESC_META_EXTENSION_MASK, 0);
    assert_eq!(c2 & TX_META_DESC_FIRST_MASK, TX_META_DESC_FIRST_MASK);
    assert_eq!(c2 & TX_META_DESC_LAST_MASK, TX_META_DESC_LAST_MASK);
    let hints = offset_of!(efa_io_tx_meta_desc, ctrl3);
    assert_eq!(w[hints] & TX_META_DESC_PROCESSING_HINTS_MASK, 0);
    Decoded {
        req_id: get_u16(w, REQ_ID),
        op: get8(TX_META_DESC_OP_TYPE_MASK, c1),
        has_imm: c1 & TX_META_DESC_HAS_IMM_MASK != 0,
        inline: c1 & TX_META_DESC_INLINE_MSG_MASK != 0,
        phase: c2 & TX_META_DESC_PHASE_MASK != 0,
        comp_req: c2 & TX_META_DESC_COMP_REQ_MASK != 0,
        dest: Destination {
            qpn: get_u16(w, DEST_QP),
            ah: get_u16(w, AH),
            qkey: get_u32(w, QKEY),
        },
        length: get_u16(w, LENGTH),
        imm: get_u32(w, IMM),
    }
}

fn buf_at(w: &[u8], at: usize) -> LocalBuf {
    LocalBuf {
        addr: get_addr(w, at + BUF_LO, at + BUF_HI),
        lkey: get_u32(w, at + BUF_LKEY),
        length: get_u32(w, at + BUF_LEN),
    }
}

fn remote_at(w: &[u8]) -> (RemoteAddr, u32) {
    let r = RemoteAddr {
        addr: get_addr(w, REMOTE + REM_LO, REMOTE + REM_HI),
        rkey: get_u32(w, REMOTE + REM_RKEY),
    };
    (r, get_u32(w, REMOTE + REM_LEN))
}

/// xorshift64*: deterministic values for property-style loops (no dependency, Miri-fast).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn buf(&mut self) -> LocalBuf {
        LocalBuf {
            addr: self.next(),
            lkey: self.next() as u32 & TX_BUF_DESC_LKEY_MASK,
            length: self.next() as u32 >> 1,
        }
    }
}

const ROUNDS: usize = if cfg!(miri) { 64 } else { 20_000 };

fn check_round_trip(w: &[u8], ctl: TxControl, dest: Destination, op: &TxOp<'_>) {
    let d = decode(w);
    let (data, imm) = match *op {
        TxOp::Send { data, imm } | TxOp::RdmaWrite { data, imm, .. } => (Some(data), imm),
        TxOp::RdmaRead { .. } => (None, None),
    };
    assert_eq!(
        (d.req_id, d.phase, d.comp_req, d.dest, d.op),
        (ctl.req_id, ctl.phase, ctl.completion, dest, op_type(op))
    );
    assert_eq!((d.has_imm, d.imm), (imm.is_some(), imm.unwrap_or(0)));
    let local = if matches!(op, TxOp::Send { .. }) {
        DATA
    } else {
        RDMA_LOCAL
    };
    let mut used = local;
    match (data, *op) {
        (Some(TxData::Inline(bytes)), _) => {
            assert!(d.inline);
            assert_eq!(usize::from(d.length), bytes.len());
            assert_eq!(&w[local..local + bytes.len()], bytes);
            used += bytes.len();
        }
        (Some(TxData::Sges(bufs)), _) => {
            assert!(!d.inline);
            assert_eq!(usize::from(d.length), bufs.len());
            for (i, b) in bufs.iter().enumerate() {
                let expect = LocalBuf {
                    lkey: b.lkey & TX_BUF_DESC_LKEY_MASK,
                    ..*b
                };
                assert_eq!(buf_at(w, local + i * BUF_DESC), expect);
            }
            used += bufs.len() * BUF_DESC;
        }
        (None, TxOp::RdmaRead { local: l, .. }) => {
            assert!(!d.inline);
            assert_eq!(d.length, 1);
            assert_eq!(buf_at(w, local), l);
            used += BUF_DESC;
        }
        (None, _) => unreachable!(),
    }
    match *op {
        TxOp::RdmaWrite { remote, data, .. } => {
            let len = match data {
                TxData::Inline(b) => b.len() as u32,
                TxData::Sges(b) => b.iter().map(|b| b.length).sum(),
            };
            assert_eq!(remote_at(w), (remote, len));
        }
        TxOp::RdmaRead { remote, local: l } => assert_eq!(remote_at(w), (remote, l.length)),
        TxOp::Send { .. } => {}
    }
    assert!(
        w[used..].iter().all(|&b| b == 0),
        "nothing written past the payload"
    );
}

#[test]
fn every_operation_round_trips_in_both_sizes() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut inline = [0u8; TX_DESC_INLINE_MAX_SIZE_128];
    for round in 0..ROUNDS {
        let r = rng.next();
        let ctl = TxControl {
            req_id: r as u16,
            phase: r & (1 << 16) != 0,
            completion: r & (1 << 17) != 0,
        };
        let dest = Destination {
            qpn: (r >> 20) as u16,
            ah: (r >> 36) as u16,
            qkey: (r >> 32) as u32,
        };
        let imm = (r & (1 << 18) != 0).then_some(rng.next() as u32);
        let bufs = [rng.buf(), rng.buf()];
        for b in inline.iter_mut() {
            *b = rng.next() as u8;
        }
        let remote = RemoteAddr {
            addr: rng.next(),
            rkey: rng.next() as u32,
        };
        let n = round % (TX_DESC_NUM_BUFS + 1);
        let short = round % (TX_DESC_INLINE_MAX_SIZE + 1);
        let long = round % (TX_DESC_INLINE_MAX_SIZE_128 + 1);
        let narrow_ops = [
            TxOp::Send {
                data: TxData::Sges(&bufs[..n]),
                imm,
            },
            TxOp::Send {
                data: TxData::Inline(&inline[..short]),
                imm,
            },
            TxOp::RdmaWrite {
                data: TxData::Sges(&bufs[..n.min(1)]),
                remote,
                imm,
            },
            TxOp::RdmaRead {
                local: bufs[0],
                remote,
            },
        ];
        for op in &narrow_ops {
            let mut w = [0xa5u8; TX_DESC_SIZE_64];
            encode_tx_wqe(&mut w, ctl, dest, op).unwrap();
            check_round_trip(&w, ctl, dest, op);
            let mut w = [0x5au8; TX_DESC_SIZE_128];
            encode_tx_wqe_128(&mut w, ctl, dest, op).unwrap();
            check_round_trip(&w, ctl, dest, op);
        }
        let wide_ops = [
            TxOp::Send {
                data: TxData::Inline(&inline[..long]),
                imm,
            },
            TxOp::RdmaWrite {
                data: TxData::Inline(&inline[..long]),
                remote,
                imm,
            },
        ];
        for op in &wide_ops {
            let mut w = [0xffu8; TX_DESC_SIZE_128];
            encode_tx_wqe_128(&mut w, ctl, dest, op).unwrap();
            check_round_trip(&w, ctl, dest, op);
        }
    }
}

#[test]
fn requests_that_do_not_fit_are_refused_and_leave_the_wqe_alone() {
    let ctl = TxControl {
        req_id: 1,
        phase: false,
        completion: true,
    };
    let dest = Destination::default();
    let bufs = [LocalBuf::default(); TX_DESC_NUM_BUFS + 1];
    let bytes = [0u8; TX_DESC_INLINE_MAX_SIZE_128 + 1];
    let remote = RemoteAddr::default();
    let mut w = [7u8; TX_DESC_SIZE_64];
    let mut wide = [7u8; TX_DESC_SIZE_128];
    let send3 = TxOp::Send {
        data: TxData::Sges(&bufs),
        imm: None,
    };
    let err = Err(WqeError::TooManySges {
        given: 3,
        max: TX_DESC_NUM_BUFS,
    });
    assert_eq!(encode_tx_wqe(&mut w, ctl, dest, &send3), err);
    let write2 = TxOp::RdmaWrite {
        data: TxData::Sges(&bufs[..2]),
        remote,
        imm: None,
    };
    let err = Err(WqeError::TooManySges {
        given: 2,
        max: TX_DESC_NUM_RDMA_BUFS,
    });
    assert_eq!(encode_tx_wqe_128(&mut wide, ctl, dest, &write2), err);
    let long = TxOp::Send {
        data: TxData::Inline(&bytes[..33]),
        imm: None,
    };
    let err = Err(WqeError::InlineTooLong {
        len: 33,
        max: TX_DESC_INLINE_MAX_SIZE,
    });
    assert_eq!(encode_tx_wqe(&mut w, ctl, dest, &long), err);
    let longer = TxOp::Send {
        data: TxData::Inline(&bytes),
        imm: None,
    };
    let err = Err(WqeError::InlineTooLong {
        len: 81,
        max: TX_DESC_INLINE_MAX_SIZE_128,
    });
    assert_eq!(encode_tx_wqe_128(&mut wide, ctl, dest, &longer), err);
    let inline_write = TxOp::RdmaWrite {
        data: TxData::Inline(&bytes[..4]),
        remote,
        imm: None,
    };
    let err = Err(WqeError::InlineWriteNeedsWideWqe);
    assert_eq!(encode_tx_wqe(&mut w, ctl, dest, &inline_write), err);
    assert_eq!(w, [7u8; TX_DESC_SIZE_64]);
    assert_eq!(wide, [7u8; TX_DESC_SIZE_128]);
}

#[test]
fn rdma_write_with_immediate_has_the_c_byte_image() {
    let mut w = [0u8; TX_DESC_SIZE_64];
    let op = TxOp::RdmaWrite {
        data: TxData::Sges(&[LocalBuf {
            addr: 0x6666_7777_8888_9999,
            lkey: 0xff12_3456,
            length: 4096,
        }]),
        remote: RemoteAddr {
            addr: 0x1111_2222_3333_4444,
            rkey: 0x55,
        },
        imm: Some(0xdead_beef),
    };
    let ctl = TxControl {
        req_id: 0x1234,
        phase: true,
        completion: true,
    };
    let dest = Destination {
        qpn: 0x0203,
        ah: 0x0405,
        qkey: 0x0a0b_0c0d,
    };
    encode_tx_wqe(&mut w, ctl, dest, &op).unwrap();
    // Offsets as rdma-core 65's efa_io_defs.h lays them out (efa-sim's unit test agrees).
    let mut expect = [0u8; 64];
    expect[0..2].copy_from_slice(&[0x34, 0x12]);
    expect[2] = 0x80 | 0x10 | 0x02; // META_DESC | HAS_IMM | op RDMA_WRITE
    expect[3] = 0x01 | 0x04 | 0x08 | 0x10; // PHASE | FIRST | LAST | COMP_REQ
    expect[4..8].copy_from_slice(&[0x03, 0x02, 1, 0]);
    expect[8..12].copy_from_slice(&0xdead_beefu32.to_le_bytes());
    expect[12..14].copy_from_slice(&[0x05, 0x04]);
    expect[16..20].copy_from_slice(&0x0a0b_0c0du32.to_le_bytes());
    expect[32..36].copy_from_slice(&4096u32.to_le_bytes());
    expect[36..40].copy_from_slice(&0x55u32.to_le_bytes());
    expect[40..48].copy_from_slice(&0x1111_2222_3333_4444u64.to_le_bytes());
    expect[48..52].copy_from_slice(&4096u32.to_le_bytes());
    expect[52..56].copy_from_slice(&0x0012_3456u32.to_le_bytes());
    expect[56..64].copy_from_slice(&0x6666_7777_8888_9999u64.to_le_bytes());
    assert_eq!(w, expect);
}
