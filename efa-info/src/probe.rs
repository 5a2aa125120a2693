//! Which features of the `efa` crate a device supports: each is tried for real (objects
//! made and destroyed through the safe API) or read from the device's capabilities, and
//! a feature that does not work says why, in the crate's own error words.

use efa::*;
use serde_json::{json, Value};

/// One feature of the crate, and whether this device has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Feature {
    /// In words.
    pub name: &'static str,
    /// The API that uses it.
    pub api: &'static str,
    /// `Ok` with a detail (may be empty), or why not.
    pub result: Result<String, String>,
}

impl Feature {
    /// As JSON.
    pub fn to_json(&self) -> Value {
        match &self.result {
            Ok(d) => json!({ "name": self.name, "api": self.api, "supported": true, "detail": d }),
            Err(e) => {
                json!({ "name": self.name, "api": self.api, "supported": false, "detail": e })
            }
        }
    }
}

fn cap(ctx: &Context, c: DeviceCaps) -> Result<String, String> {
    if ctx.caps().contains(c) {
        Ok(String::new())
    } else {
        Err(format!("the device lacks {c:?}"))
    }
}

fn ok<T>(r: Result<T>) -> Result<String, String> {
    r.map(|_| String::new()).map_err(|e| e.to_string())
}

/// An SRD QP of `cfg` brought to RTS with `rnr` on a fresh CQ.
fn qp(pd: &Pd<&Context>, cfg: QpConfig, rnr: Option<RnrRetry>) -> Result<()> {
    // 512 entries: room for the QP's default 256 sends and 256 receives.
    let cq = pd.context().create_ext_cq(CqOptions::new(512))?;
    pd.create_qp(&cq, &cq, &cfg)?.prepare(1, rnr).map(drop)
}

/// A direct SRD QP (the crate writes the device's rings itself) brought to RTS on a
/// direct CQ.
fn direct_qp(pd: &Pd<&Context>) -> Result<()> {
    let cq = pd
        .context()
        .create_ext_cq(CqOptions::new(512).backend(Backend::Direct))?;
    let cfg = QpConfig::srd().backend(Backend::Direct);
    pd.create_qp(&cq, &cq, &cfg)?.prepare(1, None).map(drop)
}

/// The data path a program that names none (`Backend::Auto`) gets on this device, and
/// why: the provider unless `EFA_RS_DIRECT=1` asked for the direct path and it can be had.
fn default_path(ctx: &Context) -> Result<String, String> {
    let cq = ctx
        .create_ext_cq(CqOptions::new(16))
        .map_err(|e| e.to_string())?;
    let env = std::env::var(DIRECT_ENV).ok();
    let why = match (cq.backend(), env.as_deref()) {
        (Backend::Direct, _) => format!("direct ({DIRECT_ENV}=1)"),
        (_, Some("1" | "on")) => format!(
            "the provider: {DIRECT_ENV}=1 asked for the direct path, which this device \
             cannot have"
        ),
        (_, Some(v)) => format!("the provider ({DIRECT_ENV}={v})"),
        (_, None) => format!(
            "the provider (libefa's; {DIRECT_ENV}=1 asks for the direct path: qualify it \
             first with scripts/qualify-direct.sh)"
        ),
    };
    Ok(why)
}

/// Every feature, tried on `ctx`; also returns the send queue's most WRs per doorbell
/// (`efadv_query_qp_wqs`' `max_batch`, the device's "max TX batch") when reported.
pub fn features(ctx: &Context) -> (Vec<Feature>, Result<u32, String>) {
    let f = |name, api, result| Feature { name, api, result };
    let pd = match ctx.alloc_pd() {
        Ok(pd) => pd,
        Err(e) => {
            let why = format!("no protection domain: {e}");
            let pd = f("protection domains", "Context::alloc_pd", Err(why.clone()));
            return (vec![pd], Err(why));
        }
    };
    let mut v = vec![
        f(
            "SRD queue pairs",
            "QpConfig::srd",
            ok(qp(&pd, QpConfig::srd(), None)),
        ),
        f(
            "UD queue pairs",
            "QpConfig::ud",
            ok(qp(&pd, QpConfig::ud(), None)),
        ),
        f(
            "RDMA write and write with immediate",
            "SendBatch::write, SendBatch::write_imm, Qp::write_all",
            cap(ctx, DeviceCaps::RDMA_WRITE).and_then(|_| {
                ok(pd.register_remote_write(vec![0u8; 64], AccessFlags::LOCAL_WRITE))
            }),
        ),
        f(
            "RDMA read",
            "SendBatch::read, Qp::read_all",
            cap(ctx, DeviceCaps::RDMA_READ).and_then(|_| {
                ok(pd.register(
                    vec![0u8; 64],
                    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
                ))
            }),
        ),
        f(
            "inline RDMA write",
            "QpConfig::inline_write",
            ok(qp(&pd, QpConfig::srd().inline_write(), None)),
        ),
        f(
            "unsolicited write with immediate",
            "QpConfig::unsolicited_write_recv, CqOptions::unsolicited_flag",
            ok(qp(&pd, QpConfig::srd().unsolicited_write_recv(), None))
                .and_then(|_| ok(ctx.create_ext_cq(CqOptions::new(16).unsolicited_flag()))),
        ),
        f(
            "sender GID in receive completions",
            "CqOptions::sender_gid, Completion::sender_gid",
            ok(ctx.create_ext_cq(CqOptions::new(16).sender_gid())),
        ),
        f(
            "finite RNR retry on SRD",
            "RtsOptions::rnr_retry, RnrRetry",
            cap(ctx, DeviceCaps::RNR_RETRY)
                .and_then(|_| ok(qp(&pd, QpConfig::srd(), Some(DEFAULT_RNR_RETRY)))),
        ),
        f(
            "extended CQs",
            "ExtCq",
            ok(ctx.create_ext_cq(CqOptions::new(16))),
        ),
        f(
            "completion channels (sleeping waits)",
            "CqOptions::waitable, CompChannel, CompletionQueue::poll_until",
            ok(ctx.create_ext_cq(CqOptions::new(16).waitable())),
        ),
        f(
            "CQ ring layout",
            "CompletionQueue::layout (efadv_query_cq)",
            ctx.create_ext_cq(CqOptions::new(16))
                .and_then(|cq| cq.layout())
                .map(|l| format!("{} entries of {} bytes", l.num_entries, l.entry_size))
                .map_err(|e| e.to_string()),
        ),
        f(
            "direct data path",
            "Backend::Direct: the crate writes the rings, not libefa",
            ok(direct_qp(&pd)),
        ),
        f(
            "default data path",
            "Backend::Auto (EFA_RS_DIRECT)",
            default_path(ctx),
        ),
    ];
    let wq = ctx.create_ext_cq(CqOptions::new(512)).and_then(|cq| {
        let q = pd.create_qp(&cq, &cq, &QpConfig::srd())?;
        q.wq_layout()
    });
    let batch = wq.map(|(sq, _)| sq.max_batch).map_err(|e| e.to_string());
    v.push(f(
        "send/receive ring layout",
        "Qp::wq_layout (efadv_query_qp_wqs)",
        batch
            .clone()
            .map(|b| format!("send queue: {b} WRs per doorbell")),
    ));
    let ic = pd
        .register(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
        .and_then(|mr| mr.query_efa());
    v.push(f(
        "MR interconnect ids",
        "MemoryRegion::query_efa (efadv_query_mr)",
        ic.map(|i| match (i.recv, i.rdma_read, i.rdma_recv) {
            (None, None, None) => "the device reports none".to_string(),
            (a, b, c) => format!("recv {a:?}, rdma read {b:?}, rdma recv {c:?}"),
        })
        .map_err(|e| e.to_string()),
    ));
    (v, batch)
}
