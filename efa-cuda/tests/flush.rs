//! GPUDirect flush on the software GPU: whether it is needed, that it targets the current
//! context's device, and that it is counted.
mod support;

use efa_cuda::*;

#[test]
fn flush_is_needed_without_ordering_and_counted_on_the_owner() {
    let _serial = support::serial();
    let dev = support::sim().device(1).unwrap();
    let s = dev.flush_support().unwrap();
    assert_eq!(
        s,
        FlushSupport {
            options: 1,
            ordering: 0
        }
    );
    assert!(s.needs_flush(FlushScope::ToOwner) && s.host_flush_available());
    let before = support::flush_count(1);
    let other = support::flush_count(0);
    assert_eq!(
        dev.flush_gpudirect_writes(FlushScope::ToOwner),
        Ok(Flushed::Flushed)
    );
    assert_eq!(
        dev.flush_gpudirect_writes(FlushScope::ToAllDevices),
        Ok(Flushed::Flushed)
    );
    assert_eq!(support::flush_count(1), (before.0 + 1, before.1 + 1));
    assert_eq!(support::flush_count(0), other, "device 0 was not flushed");
}

#[test]
fn a_device_that_orders_writes_needs_no_flush_for_that_scope() {
    let _serial = support::serial();
    let dev = support::sim().device(0).unwrap();
    support::control("rdma_writes_ordering", 100);
    let before = support::flush_count(0);
    let owner = dev.flush_gpudirect_writes(FlushScope::ToOwner);
    let all = dev.flush_gpudirect_writes(FlushScope::ToAllDevices);
    let after = support::flush_count(0);
    support::control("rdma_writes_ordering", 0);
    assert_eq!(owner, Ok(Flushed::NotNeeded));
    assert_eq!(all, Ok(Flushed::Flushed));
    assert_eq!(after, (before.0, before.1 + 1));
}

#[test]
fn flushing_the_current_context_needs_one() {
    let _serial = support::serial();
    let d = support::sim();
    std::thread::spawn(move || {
        assert_eq!(
            d.flush_current_context(FlushScope::ToOwner),
            Err(Error::NoContext {
                call: "cuFlushGPUDirectRDMAWrites"
            })
        );
        let before = support::flush_count(0);
        let dev = d.device(0).unwrap();
        let _ctx = dev.make_current().unwrap();
        d.flush_current_context(FlushScope::ToOwner).unwrap();
        assert_eq!(support::flush_count(0), (before.0 + 1, before.1));
    })
    .join()
    .unwrap();
}

#[test]
fn a_device_without_the_host_flush_option_reports_the_driver_error() {
    let _serial = support::serial();
    let dev = support::sim().device(0).unwrap();
    support::control("flush_options", 0);
    let s = dev.flush_support();
    let r = dev.flush_gpudirect_writes(FlushScope::ToOwner);
    support::control("flush_options", 1);
    assert!(!s.unwrap().host_flush_available());
    assert_eq!(support::cu_code(&r.unwrap_err()), Some(801));
}
