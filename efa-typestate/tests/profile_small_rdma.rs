//! A device whose max_rdma_size is 4096 (EFA_SIM_PROFILE, in a child process): one RDMA
//! larger than that is refused while building the batch; the chunker splits it into
//! legal pieces, each with its own wr_id.

mod common;
use common::*;
use efa_typestate::*;

const PROFILE: &str = "max_rdma_size=4096";
const LEN: usize = 3 * 4096 + 100; // four chunks, the last one short

#[test]
fn chunked_write_and_read_across_max_rdma_size() {
    in_child(
        "chunked_write_and_read_across_max_rdma_size",
        &[("EFA_SIM_PROFILE", PROFILE)],
        || {
            let ctx = open(0);
            let max = ctx.efa_attr().unwrap().max_rdma_size;
            assert_eq!(max, 4096, "profile applied");
            let pd = ctx.alloc_pd().unwrap();
            let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
            let a = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_A);
            let b = rts_qp(&pd, &cq, &QpConfig::srd(), QKEY_B);
            let to_b = pd.connect(&b.endpoint()).unwrap();

            let pattern: Vec<u8> = (0..LEN).map(|i| (i * 7 % 251) as u8).collect();
            let src = pd.register(pattern.clone(), AccessFlags::empty()).unwrap();
            let target = pd
                .register_remote_write(
                    vec![0u8; LEN],
                    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
                )
                .unwrap();

            // One write over the limit: refused while building, naming length and limit.
            let mut one = SendBatch::<1>::new(&a);
            assert_eq!(
                one.write(1, &to_b, src.sge_all().unwrap(), target.remote()),
                Err(Error::Invalid(InvalidInput::RdmaTooLong {
                    len: LEN as u64,
                    max: 4096
                }))
            );
            assert!(one.is_empty());
            assert!(target.to_vec().iter().all(|&x| x == 0));

            // Chunked: 4 writes of at most 4096 bytes, posted in batches of 3 (two doorbells).
            let mut chunks = RdmaChunks::new(&src, 0, target.remote(), max).unwrap();
            assert_eq!(chunks.remaining(), 4);
            let mut posted = 0;
            let mut batch = SendBatch::<3>::new(&a);
            while chunks.remaining() > 0 {
                batch.clear();
                let n = batch.fill_writes(2, &to_b, &mut chunks).unwrap();
                assert!(batch
                    .iter()
                    .all(|wr| wr.op() == SendOps::RDMA_WRITE
                        && wr.sge_len().is_some_and(|l| l <= 4096)));
                // SAFETY: `src`, the source of every chunk, is never written and its Mr lives to the
                // end; all four completions are polled after the loop.
                unsafe { a.post_send(&batch) }.unwrap();
                posted += n;
            }
            assert_eq!(posted, 4);
            let got = expect_n(&cq, 4);
            assert!(got.iter().all(|c| c.is_ok()), "{got:?}");
            let mut ids: Vec<u64> = got.iter().map(|c| c.wr_id()).collect();
            ids.sort();
            assert_eq!(ids, vec![2, 3, 4, 5], "chunk i has wr_id base + i");
            assert_eq!(target.to_vec(), pattern);

            // Chunked read back into a fresh buffer.
            let back = pd
                .register(vec![0u8; LEN], AccessFlags::LOCAL_WRITE)
                .unwrap();
            let mut chunks = RdmaChunks::new(&back, 0, target.remote(), max).unwrap();
            let mut batch = SendBatch::<8>::new(&a);
            assert_eq!(batch.fill_reads(100, &to_b, &mut chunks), Ok(4));
            // SAFETY: `back`, the RDMA-read destination, is not accessed until the four
            // completions are polled on the next line; its Mr lives to the end.
            unsafe { a.post_send(&batch) }.unwrap();
            let got = expect_n(&cq, 4);
            assert!(got.iter().all(|c| c.is_ok()), "{got:?}");
            let mut ids: Vec<u64> = got.iter().map(|c| c.wr_id()).collect();
            ids.sort();
            assert_eq!(ids, vec![100, 101, 102, 103]);
            assert_eq!(back.as_slice(), &pattern[..]);

            // The chunker refuses ranges outside the local MR and a zero chunk size.
            let small = pd
                .register(vec![0u8; 10], AccessFlags::LOCAL_WRITE)
                .unwrap();
            assert!(matches!(
                RdmaChunks::new(&small, 0, target.remote(), max),
                Err(Error::Invalid(InvalidInput::SgeOutOfBounds { .. }))
            ));
            assert_eq!(
                RdmaChunks::new(&back, 0, target.remote(), 0).unwrap_err(),
                Error::Invalid(InvalidInput::ZeroChunkSize)
            );
        },
    );
}
