//! Which data path a program gets (issue 35): [`Backend::Auto`] is the provider unless
//! `EFA_RS_DIRECT=1` asks for the direct path; `EFA_RS_DIRECT=0` refuses
//! [`Backend::Direct`] too; a value it does not know is an error, not a guess; a device
//! with sub-CQs (first-generation EFA) never gets the direct path. Each case runs in a
//! child process, since the setting is read once per process.

#[macro_use]
mod common;
use common::*;
use efa_sys::vendor::EFA_PART_ID_EFA0;
use efa_typestate::*;

const ENV: &str = "EFA_RS_DIRECT";
/// A first-generation device.
const EFA0: &str = "vendor_part_id=0xefa0";

/// The backends `Auto` gives an extended CQ, a classic CQ with a channel and a QP.
fn auto_backends(ctx: &Context) -> [Backend; 3] {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let classic = ctx.create_cq(CqOptions::new(1024).waitable()).unwrap();
    let qp = pd.create_qp(&cq, &cq, &QpConfig::srd()).unwrap();
    [cq.backend(), classic.backend(), qp.backend()]
}

/// A message from one `Auto` QP to another on one `Auto` CQ arrives, whichever path.
fn auto_pair_moves_a_message(ctx: &Context) -> Backend {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let a = rts_qp(&pd, &cq, &QpConfig::srd(), 0x11);
    let b = rts_qp(&pd, &cq, &QpConfig::srd(), 0x22);
    let inbox = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .unwrap();
    recv_one(&b, 9, inbox.sge(0, 64).unwrap());
    let src = pd
        .register(b"either path".to_vec(), AccessFlags::empty())
        .unwrap();
    let to_b = pd.connect(&b.endpoint()).unwrap();
    let mut s = SendBatch::<1>::new(&a);
    s.send(1, &to_b, src.sge(0, 11).unwrap()).unwrap();
    // SAFETY: `src` is not written until the completion is polled.
    unsafe { a.post_send(&s).unwrap() };
    let mut done = ArrayVec::<Completion, 2>::new();
    cq.poll_until(&mut done, 2, std::time::Duration::from_secs(10))
        .unwrap();
    for c in &done {
        c.result().unwrap();
    }
    assert_eq!(&inbox.as_slice()[..11], b"either path");
    a.backend()
}

fn direct_cq(ctx: &Context) -> Result<ExtCq<&Context>> {
    ctx.create_ext_cq(CqOptions::new(64).backend(Backend::Direct))
}

#[test]
fn auto_is_the_provider_by_default() {
    in_child_without("auto_is_the_provider_by_default", &[], &[ENV], || {
        let ctx = open(0);
        assert_eq!(auto_backends(&ctx), [Backend::Provider; 3]);
        assert_eq!(auto_pair_moves_a_message(&ctx), Backend::Provider);
        // The direct path is still there for a program that names it.
        assert_eq!(direct_cq(&ctx).unwrap().backend(), Backend::Direct);
    });
}

#[test]
fn the_environment_turns_auto_to_the_direct_path() {
    in_child(
        "the_environment_turns_auto_to_the_direct_path",
        &[(ENV, "1")],
        || {
            let ctx = open(0);
            assert_eq!(auto_backends(&ctx), [Backend::Direct; 3]);
            assert_eq!(auto_pair_moves_a_message(&ctx), Backend::Direct);
            // An explicit provider CQ, and an Auto QP on it, stay the provider's.
            let pd = ctx.alloc_pd().unwrap();
            let prov = ctx
                .create_ext_cq(CqOptions::new(1024).backend(Backend::Provider))
                .unwrap();
            let qp = pd.create_qp(&prov, &prov, &QpConfig::srd()).unwrap();
            assert_eq!(qp.backend(), Backend::Provider);
        },
    );
}

#[test]
fn the_environment_turns_the_direct_path_off_for_everyone() {
    in_child(
        "the_environment_turns_the_direct_path_off_for_everyone",
        &[(ENV, "off")],
        || {
            let ctx = open(0);
            assert_eq!(auto_backends(&ctx), [Backend::Provider; 3]);
            let off = Error::Direct(DirectError::DisabledByEnvironment);
            assert_eq!(direct_cq(&ctx).unwrap_err(), off);
            let classic = ctx.create_cq(CqOptions::new(64).backend(Backend::Direct));
            assert_eq!(classic.unwrap_err(), off);
            // A direct QP is refused for that reason, not for its CQs.
            let pd = ctx.alloc_pd().unwrap();
            let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
            let qp = pd.create_qp(&cq, &cq, &QpConfig::srd().backend(Backend::Direct));
            assert_eq!(qp.unwrap_err(), off);
            assert_eq!(
                off.to_string(),
                "direct backend: turned off by EFA_RS_DIRECT=0"
            );
        },
    );
}

#[test]
fn a_setting_it_does_not_know_is_an_error() {
    in_child(
        "a_setting_it_does_not_know_is_an_error",
        &[(ENV, "yes")],
        || {
            let ctx = open(0);
            let e = ctx.create_ext_cq(CqOptions::new(64)).unwrap_err();
            assert!(
                matches!(e, Error::Direct(DirectError::BadSetting(_))),
                "{e:?}"
            );
            assert_eq!(
                e.to_string(),
                "direct backend: EFA_RS_DIRECT=\"yes\" is not one of 1, on, 0, off"
            );
            // An explicit provider CQ does not consult it.
            let cq = ctx.create_ext_cq(CqOptions::new(64).backend(Backend::Provider));
            assert_eq!(cq.unwrap().backend(), Backend::Provider);
        },
    );
}

/// What first-generation EFA gives: the provider, whatever is asked.
fn on_a_device_with_sub_cqs() {
    let ctx = open(0);
    assert_eq!(
        ctx.query_device().unwrap().vendor_part_id(),
        EFA_PART_ID_EFA0
    );
    assert_eq!(auto_backends(&ctx), [Backend::Provider; 3]);
    assert_eq!(auto_pair_moves_a_message(&ctx), Backend::Provider);
    let sub_cqs = Error::Direct(DirectError::SubCqs {
        vendor_part_id: EFA_PART_ID_EFA0,
    });
    assert_eq!(direct_cq(&ctx).unwrap_err(), sub_cqs);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(1024)).unwrap();
    let qp = pd.create_qp(&cq, &cq, &QpConfig::srd().backend(Backend::Direct));
    assert_eq!(qp.unwrap_err(), sub_cqs);
}

#[test]
fn a_device_with_sub_cqs_never_gets_the_direct_path() {
    in_child_without(
        "a_device_with_sub_cqs_never_gets_the_direct_path",
        &[("EFA_SIM_PROFILE", EFA0)],
        &[ENV],
        on_a_device_with_sub_cqs,
    );
}

#[test]
fn a_device_with_sub_cqs_never_gets_the_direct_path_even_when_asked() {
    in_child(
        "a_device_with_sub_cqs_never_gets_the_direct_path_even_when_asked",
        &[("EFA_SIM_PROFILE", EFA0), (ENV, "1")],
        on_a_device_with_sub_cqs,
    );
}
