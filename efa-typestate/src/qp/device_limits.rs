//! QP creation parameters checked against the device before the provider sees them
//! (which would only say EINVAL), and the QP's CQs checked to hold what it can complete.

use super::config::QpCaps;
use crate::context::{Context, EfaDeviceAttr};
use crate::error::{CqRole, DeviceLimit, InvalidInput, Result};
use crate::ffi;

fn exceeds(what: DeviceLimit, value: u32, max: u32) -> Result<()> {
    if value > max {
        return Err(InvalidInput::ExceedsDeviceLimit { what, value, max }.into());
    }
    Ok(())
}

/// The deepest send queue the device allows a QP with these SGE and inline settings:
/// libefa's own answer (`efadv_get_max_sq_depth`, rdma-core 63) where the library has
/// it, the device's `max_sq_wr` otherwise.
fn max_send_depth(ctx: &Context, dev: &EfaDeviceAttr, caps: &QpCaps, inline_write: bool) -> u32 {
    let mut a = ffi::efadv_sq_depth_attr {
        flags: if inline_write {
            ffi::EFADV_SQ_DEPTH_ATTR_INLINE_WRITE
        } else {
            0
        },
        max_send_sge: caps.max_send_sge,
        max_rdma_sge: 1,
        max_inline_data: caps.max_inline_data,
        ..Default::default()
    };
    // SAFETY: valid context; `a` is a readable struct of exactly `inlen` bytes.
    let got = unsafe {
        ffi::efadv_get_max_sq_depth(ctx.as_ptr(), &mut a, core::mem::size_of_val(&a) as u32)
    };
    match got {
        Ok(n) if n > 0 => n as u32,
        _ => dev.max_sq_wr,
    }
}

/// The deepest receive queue for this many SGEs per receive (`efadv_get_max_rq_depth`
/// where the library has it, the device's `max_rq_wr` otherwise).
fn max_recv_depth(ctx: &Context, dev: &EfaDeviceAttr, caps: &QpCaps) -> u32 {
    let mut a = ffi::efadv_rq_depth_attr {
        max_recv_sge: caps.max_recv_sge.max(1),
        ..Default::default()
    };
    // SAFETY: valid context; `a` is a readable struct of exactly `inlen` bytes.
    let got = unsafe {
        ffi::efadv_get_max_rq_depth(ctx.as_ptr(), &mut a, core::mem::size_of_val(&a) as u32)
    };
    match got {
        Ok(n) if n > 0 => n as u32,
        _ => dev.max_rq_wr,
    }
}

/// Refuses requested QP limits beyond the device's with
/// [`InvalidInput::ExceedsDeviceLimit`], naming the parameter, the value and the limit.
/// Without EFA attributes (`efadv_query_device` failed) the provider is left to judge.
pub(super) fn check_qp_caps(
    ctx: &Context,
    dev: Option<&EfaDeviceAttr>,
    caps: &QpCaps,
    inline_write: bool,
) -> Result<()> {
    let Some(dev) = dev else {
        return Ok(());
    };
    exceeds(
        DeviceLimit::SendSges,
        caps.max_send_sge,
        u32::from(dev.max_sq_sge),
    )?;
    exceeds(
        DeviceLimit::RecvSges,
        caps.max_recv_sge,
        u32::from(dev.max_rq_sge),
    )?;
    let inline = dev.inline_buf_size.max(dev.inline_buf_size_ex);
    exceeds(
        DeviceLimit::InlineData,
        caps.max_inline_data,
        u32::from(inline),
    )?;
    exceeds(
        DeviceLimit::SendDepth,
        caps.max_send_wr,
        max_send_depth(ctx, dev, caps, inline_write),
    )?;
    exceeds(
        DeviceLimit::RecvDepth,
        caps.max_recv_wr,
        max_recv_depth(ctx, dev, caps),
    )
}

/// Refuses a CQ depth beyond the device's `max_cqe` (when it is known).
pub(crate) fn check_cq_depth(ctx: &Context, depth: u32) -> Result<()> {
    match ctx.max_cqe() {
        Some(max) => exceeds(DeviceLimit::CqEntries, depth, max),
        None => Ok(()),
    }
}

/// Refuses CQs that cannot hold every completion the QP can have outstanding: its
/// granted send depth on the send CQ, its granted receive depth on the receive CQ, their
/// sum on a CQ that serves both ([`InvalidInput::CqTooSmall`]). `send_cq_depth` and
/// `recv_cq_depth` are the CQs' granted depths.
pub(super) fn check_cqs(
    shared: bool,
    send_cq_depth: u32,
    recv_cq_depth: u32,
    granted: &QpCaps,
) -> Result<()> {
    let too_small = |cq, depth: u32, needed: u32| {
        if depth < needed {
            return Err(InvalidInput::CqTooSmall { cq, depth, needed }.into());
        }
        Ok(())
    };
    if shared {
        let needed = granted.max_send_wr.saturating_add(granted.max_recv_wr);
        return too_small(CqRole::Shared, send_cq_depth, needed);
    }
    too_small(CqRole::Send, send_cq_depth, granted.max_send_wr)?;
    too_small(CqRole::Recv, recv_cq_depth, granted.max_recv_wr)
}
