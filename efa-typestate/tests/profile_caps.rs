//! A device without RDMA write, unsolicited write receive, CQ sender GIDs, RNR retry and
//! CQ notifications (EFA_SIM_PROFILE, in a child process): each feature is reported as
//! unsupported with the capability it lacks.

mod common;
use common::*;
use efa_typestate::*;

const PROFILE: &str = "caps=rdma_read,cq_notifications=false";

#[test]
fn capability_gated_features_are_unsupported() {
    in_child(
        "capability_gated_features_are_unsupported",
        &[("EFA_SIM_PROFILE", PROFILE)],
        || {
            let ctx = open(0);
            assert_eq!(ctx.caps(), DeviceCaps::RDMA_READ, "profile applied");
            let missing = |verb, cap| Error::Unsupported {
                verb,
                why: Unsupported::MissingCapability(cap),
            };
            let pd = ctx.alloc_pd().unwrap();
            let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();

            // Defaults follow the caps: an SRD QP gets send + read, no write.
            let qp = pd.create_qp(&cq, &cq, &QpConfig::srd()).unwrap();
            assert_eq!(
                qp.send_ops(),
                SendOps::SEND | SendOps::SEND_WITH_IMM | SendOps::RDMA_READ
            );

            let e = pd
                .create_qp(&cq, &cq, &QpConfig::srd().send_ops(SendOps::RDMA_WRITE))
                .unwrap_err();
            assert_eq!(e, missing(Verb::EfadvCreateQp, DeviceCaps::RDMA_WRITE));
            assert!(e.to_string().contains("lacks capability"), "{e}");
            let e = pd
                .create_qp(&cq, &cq, &QpConfig::srd().unsolicited_write_recv())
                .unwrap_err();
            assert_eq!(
                e,
                missing(Verb::EfadvCreateQp, DeviceCaps::UNSOLICITED_WRITE_RECV)
            );
            let e = pd
                .create_qp(&cq, &cq, &QpConfig::srd().inline_write())
                .unwrap_err();
            assert_eq!(e, missing(Verb::EfadvCreateQp, DeviceCaps::RDMA_WRITE));
            let e = ctx
                .create_ext_cq(CqOptions::new(1024).sender_gid())
                .unwrap_err();
            assert_eq!(e, missing(Verb::EfadvCreateCq, DeviceCaps::CQ_WITH_SGID));
            let e = ctx
                .create_ext_cq(CqOptions::new(1024).unsolicited_flag())
                .unwrap_err();
            assert_eq!(
                e,
                missing(Verb::EfadvCreateCq, DeviceCaps::UNSOLICITED_WRITE_RECV)
            );

            let rtr = qp.init(1).unwrap().rtr().unwrap();
            let e = rtr
                .rts(RtsOptions {
                    rnr_retry: Some(RnrRetry::Times(3)),
                    sq_psn: 0,
                })
                .unwrap_err();
            assert_eq!(e.error, missing(Verb::ModifyQp, DeviceCaps::RNR_RETRY));
            let qp = e.qp.rts(RtsOptions::default()).unwrap();

            // The provider itself refuses RDMA-write registration rights it cannot honour.
            let e = pd
                .register_remote_write(vec![0u8; 8], AccessFlags::empty())
                .map(drop)
                .unwrap_err();
            assert!(e.is_unsupported(), "{e}");

            // No CQ notifications on this device: a CQ with a channel is refused.
            let ch = ctx.create_comp_channel().unwrap();
            let e = ctx
                .create_cq_with_channel(&ch, CqOptions::new(8))
                .map(drop)
                .unwrap_err();
            assert!(e.is_unsupported(), "{e}");
            // Nor a waitable one (it needs a channel of its own).
            let e = ctx
                .create_ext_cq(CqOptions::new(8).waitable())
                .map(drop)
                .unwrap_err();
            assert!(e.is_unsupported(), "{e}");

            // A write on a QP without it is refused while building the batch.
            let to_self = pd.connect(&qp.endpoint()).unwrap();
            let src = pd.register(vec![0u8; 8], AccessFlags::empty()).unwrap();
            let mut s = SendBatch::<1>::new(&qp);
            assert_eq!(
                s.write(
                    1,
                    &to_self,
                    src.sge_all().unwrap(),
                    RemoteBuffer::new(0, 8, 0),
                ),
                Err(Error::Invalid(InvalidInput::SendOpNotEnabled {
                    op: SendOps::RDMA_WRITE,
                    enabled: SendOps::SEND | SendOps::SEND_WITH_IMM | SendOps::RDMA_READ
                }))
            );
            assert!(s.is_empty());
        },
    );
}
