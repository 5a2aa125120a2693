//! Completion decoding against entries built field by field with the `efa_sys::io`
//! masks (what the device writes), and the CQ doorbell word.

use super::super::bits::{prep8, put_u16, put_u32};
use super::*;
use efa_sys::io::{CDESC_COMMON_OP_TYPE_SHIFT, CDESC_COMMON_Q_TYPE_SHIFT, REGS_CQ_DB_CMD_SN_SHIFT};

/// An entry as the device would write `c` (the device side, for the tests).
fn device_entry(c: &Cqe) -> [u8; CQE_SIZE_EX] {
    let mut e = [0u8; CQE_SIZE_EX];
    let k = &c.common;
    put_u16(&mut e, REQ_ID, k.req_id);
    e[STATUS] = k.status;
    e[FLAGS] = u8::from(k.phase)
        | (k.queue_type << CDESC_COMMON_Q_TYPE_SHIFT) & CDESC_COMMON_Q_TYPE_MASK
        | (k.op_type << CDESC_COMMON_OP_TYPE_SHIFT) & CDESC_COMMON_OP_TYPE_MASK
        | if k.has_imm {
            CDESC_COMMON_HAS_IMM_MASK
        } else {
            0
        }
        | if k.unsolicited {
            CDESC_COMMON_UNSOLICITED_MASK
        } else {
            0
        };
    put_u16(&mut e, QP_NUM, k.qp_num);
    if let Some(r) = &c.recv {
        put_u16(&mut e, LENGTH, r.length as u16);
        put_u16(&mut e, AH, r.ah);
        put_u16(&mut e, SRC_QP, r.src_qp);
        put_u32(&mut e, IMM, r.imm.unwrap_or(0));
        if k.op_type == send_op_type::RDMA_WRITE {
            put_u16(&mut e, LENGTH_HI, (r.length >> 16) as u16);
        } else if let Some(g) = r.sender_gid {
            e[EXT..EXT + GID_LEN].copy_from_slice(&g);
        }
    }
    e
}

#[test]
fn shifts_and_masks_agree() {
    // The decoder derives shifts from the masks; the header also names them.
    assert_eq!(
        CDESC_COMMON_OP_TYPE_MASK.trailing_zeros(),
        CDESC_COMMON_OP_TYPE_SHIFT
    );
    assert_eq!(
        CDESC_COMMON_Q_TYPE_MASK.trailing_zeros(),
        CDESC_COMMON_Q_TYPE_SHIFT
    );
    assert_eq!(
        REGS_CQ_DB_CMD_SN_MASK.trailing_zeros(),
        REGS_CQ_DB_CMD_SN_SHIFT
    );
    assert_eq!(prep8(CDESC_COMMON_Q_TYPE_MASK, queue_type::RECV), 0x04);
}

#[test]
fn completions_round_trip_over_many_values() {
    let mut x = 0x0123_4567_89ab_cdefu64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let rounds = if cfg!(miri) { 128 } else { 50_000 };
    for round in 0..rounds {
        let r = next();
        let q = if r & 1 == 0 {
            queue_type::SEND
        } else {
            queue_type::RECV
        };
        let op = [
            send_op_type::SEND,
            send_op_type::RDMA_READ,
            send_op_type::RDMA_WRITE,
        ][round % 3];
        let common = CqeCommon {
            req_id: (r >> 8) as u16,
            status: (r >> 24) as u8,
            phase: r & 2 != 0,
            queue_type: q,
            op_type: op,
            has_imm: q == queue_type::RECV && r & 4 != 0,
            unsolicited: q == queue_type::RECV && r & 8 != 0,
            qp_num: (r >> 40) as u16,
        };
        let is_write = op == send_op_type::RDMA_WRITE;
        let ah = if r & 16 != 0 {
            AH_UNKNOWN
        } else {
            (r >> 48) as u16
        };
        let s = next();
        let recv = (q == queue_type::RECV).then_some(RecvFields {
            length: if is_write {
                s as u32
            } else {
                u32::from(s as u16)
            },
            ah,
            src_qp: (s >> 32) as u16,
            imm: common.has_imm.then_some((s >> 16) as u32),
            sender_gid: (!is_write && ah == AH_UNKNOWN)
                .then_some((u128::from(s) * 3).to_le_bytes()),
        });
        let c = Cqe { common, recv };
        let e = device_entry(&c);
        assert_eq!(decode_cqe(&e, true), Some(c));
        assert!(is_pending(e[FLAGS], common.phase));
        assert!(!is_pending(e[FLAGS], !common.phase));
        // Without the report flag there is no GID; a 16-byte entry has no extension.
        let no_gid = recv.map(|r| RecvFields {
            sender_gid: None,
            ..r
        });
        assert_eq!(
            decode_cqe(&e, false),
            Some(Cqe {
                common,
                recv: no_gid
            })
        );
        let short = recv.map(|r| RecvFields {
            sender_gid: None,
            length: r.length & 0xffff,
            ..r
        });
        assert_eq!(
            decode_cqe(&e[..CQE_SIZE], true),
            Some(Cqe {
                common,
                recv: short
            })
        );
    }
    assert_eq!(decode_cqe(&[0u8; CQE_SIZE - 1], true), None);
}

#[test]
fn receive_completion_has_the_c_byte_image() {
    let mut e = [0u8; CQE_SIZE_EX];
    e[0..2].copy_from_slice(&9u16.to_le_bytes());
    e[3] = 0x01 | 0x04 | 0x08 | 0x20 | 0x80; // phase, RECV, HAS_IMM, RDMA_WRITE, unsolicited
    e[4..6].copy_from_slice(&0x202u16.to_le_bytes());
    e[6..8].copy_from_slice(&4u16.to_le_bytes());
    e[8..10].copy_from_slice(&7u16.to_le_bytes());
    e[10..12].copy_from_slice(&0x303u16.to_le_bytes());
    e[12..16].copy_from_slice(&0x1122_3344u32.to_le_bytes());
    e[16..18].copy_from_slice(&3u16.to_le_bytes());
    let c = decode_cqe(&e, true).unwrap();
    let common = CqeCommon {
        req_id: 9,
        status: 0,
        phase: true,
        queue_type: queue_type::RECV,
        op_type: send_op_type::RDMA_WRITE,
        has_imm: true,
        unsolicited: true,
        qp_num: 0x202,
    };
    let recv = RecvFields {
        length: 0x0003_0004,
        ah: 7,
        src_qp: 0x303,
        imm: Some(0x1122_3344),
        sender_gid: None,
    };
    assert_eq!(
        c,
        Cqe {
            common,
            recv: Some(recv)
        }
    );
}

#[test]
fn doorbell_word_round_trips() {
    let db = CqDoorbell {
        consumer_index: 0xabcd,
        cmd_sn: 2,
        arm: true,
    };
    assert_eq!(db.encode(), 0x8000_0000 | 0x4000_0000 | 0xabcd);
    for ci in (0..=u16::MAX).step_by(if cfg!(miri) { 4099 } else { 1 }) {
        for sn in 0..4u8 {
            for arm in [false, true] {
                let d = CqDoorbell {
                    consumer_index: ci,
                    cmd_sn: sn,
                    arm,
                };
                assert_eq!(CqDoorbell::decode(d.encode()), d);
            }
        }
    }
    // libefa masks the event count to 2 bits; so does the encoder.
    let wide = CqDoorbell {
        consumer_index: 1,
        cmd_sn: 5,
        arm: false,
    };
    assert_eq!(CqDoorbell::decode(wide.encode()).cmd_sn, 1);
}

#[test]
fn the_word_decoder_reads_what_the_byte_decoder_reads() {
    // Every flags byte, over entries of pseudo-random bytes, both entry sizes, with and
    // without sender GIDs: the fast word decoder of the poll loop must agree.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let rounds = if cfg!(miri) { 2 } else { 64 };
    for flags in 0..=255u8 {
        for round in 0..rounds {
            let mut e = [0u8; CQE_SIZE_EX];
            for c in e.chunks_exact_mut(8) {
                c.copy_from_slice(&next().to_le_bytes());
            }
            e[FLAGS] = flags;
            if round % 2 == 0 {
                // Unknown-AH receives carry the GID.
                e[8..10].copy_from_slice(&crate::AH_UNKNOWN.to_le_bytes());
            }
            let words: Vec<u64> = e
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            for size in [CQE_SIZE, CQE_SIZE_EX] {
                for sgid in [false, true] {
                    let want = decode_cqe(&e[..size], sgid);
                    let got = decode_cqe_words(size, words[0], |i| words[i], sgid);
                    assert_eq!(got, want, "flags {flags:#x} size {size} sgid {sgid}");
                }
            }
        }
    }
    assert_eq!(decode_cqe_words(8, 0, |_| 0, false), None);
}
