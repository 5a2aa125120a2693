//! Everything efa-info says about one device, gathered through the safe API, and its
//! two renderings: text for people, JSON for programs.

use std::fmt::Write as _;

use efa::*;
use serde_json::{json, Value};

use crate::probe::{self, Feature};

/// What was learnt about one device (each part may have failed on its own).
pub struct DeviceReport {
    /// `efa_0`, ...
    pub name: String,
    /// True if the device looks like EFA.
    pub efa: bool,
    /// `ibv_query_device`.
    pub attr: Result<DeviceAttr, String>,
    /// `ibv_query_port(1)`.
    pub port: Result<PortAttr, String>,
    /// `ibv_query_gid(1, i)` for every GID table entry.
    pub gids: Vec<Result<Gid, String>>,
    /// `efadv_query_device`.
    pub efadv: Result<EfaDeviceAttr, String>,
    /// The send queue's most WRs per doorbell, if the library reports it.
    pub max_tx_batch: Result<u32, String>,
    /// The crate's features.
    pub features: Vec<Feature>,
}

/// The capability bits efa-info names.
const CAPS: [(DeviceCaps, &str); 7] = [
    (DeviceCaps::RDMA_READ, "RDMA_READ"),
    (DeviceCaps::RNR_RETRY, "RNR_RETRY"),
    (DeviceCaps::CQ_WITH_SGID, "CQ_WITH_SGID"),
    (DeviceCaps::RDMA_WRITE, "RDMA_WRITE"),
    (DeviceCaps::UNSOLICITED_WRITE_RECV, "UNSOLICITED_WRITE_RECV"),
    (DeviceCaps::CQ_WITH_EXT_MEM_DMABUF, "CQ_WITH_EXT_MEM_DMABUF"),
    (DeviceCaps::COMP_CNTR, "COMP_CNTR"),
];

/// The names of `caps`, and the bits without a name.
pub fn cap_names(caps: DeviceCaps) -> (Vec<&'static str>, u32) {
    let names = CAPS
        .iter()
        .filter(|(c, _)| caps.contains(*c))
        .map(|&(_, n)| n)
        .collect();
    let known = CAPS.iter().fold(0, |a, (c, _)| a | c.bits());
    (names, caps.bits() & !known)
}

fn port_state(s: u32) -> &'static str {
    match s {
        1 => "down",
        2 => "init",
        3 => "armed",
        4 => "active",
        5 => "active_defer",
        _ => "unknown",
    }
}

fn mtu_bytes(m: u32) -> u32 {
    match m {
        1..=5 => 128 << m,
        _ => 0,
    }
}

/// Link rate in Gb/s from the IB width and speed codes, when both are known.
fn rate_gbps(width: u8, speed: u8) -> Option<f64> {
    let lanes = match width {
        1 => 1.0,
        2 => 4.0,
        4 => 8.0,
        8 => 12.0,
        16 => 2.0,
        _ => return None,
    };
    let lane = match speed {
        1 => 2.5,
        2 => 5.0,
        4 | 8 => 10.0,
        16 => 14.0,
        32 => 25.0,
        64 => 50.0,
        128 => 100.0,
        _ => return None,
    };
    Some(lanes * lane)
}

fn text<T>(r: Result<T>) -> Result<T, String> {
    r.map_err(|e| e.to_string())
}

/// Opens `dev` and gathers its report (`Err` if it cannot even be opened).
pub fn collect(dev: &efa::Device<'_>) -> Result<DeviceReport, String> {
    let name = dev.name().to_string();
    let ctx = dev.open().map_err(|e| format!("cannot open {name}: {e}"))?;
    let port = text(ctx.query_port(1));
    let n = port.as_ref().map_or(1, |p| p.gid_tbl_len.max(1));
    let gids = (0..n).map(|i| text(ctx.query_gid(1, i))).collect();
    let (features, max_tx_batch) = if dev.is_efa() {
        probe::features(&ctx)
    } else {
        (Vec::new(), Err("not an EFA device".into()))
    };
    Ok(DeviceReport {
        efa: dev.is_efa(),
        attr: text(ctx.query_device()),
        port,
        gids,
        efadv: text(ctx.query_efa()),
        max_tx_batch,
        features,
        name,
    })
}

impl DeviceReport {
    /// The text rendering.
    pub fn text(&self) -> String {
        let mut o = String::new();
        let kind = if self.efa {
            "EFA device"
        } else {
            "RDMA device (not EFA)"
        };
        let _ = writeln!(o, "{}: {kind}", self.name);
        let row = |o: &mut String, k: &str, v: String| {
            let _ = writeln!(o, "  {k:<24} {v}");
        };
        match &self.attr {
            Ok(a) => {
                row(&mut o, "firmware", a.fw_ver().to_string());
                row(&mut o, "node GUID", format!("{:016x}", a.node_guid()));
                let vendor = if a.vendor_id() == 0x1d0f {
                    " (Amazon)"
                } else {
                    ""
                };
                row(
                    &mut o,
                    "vendor id",
                    format!("0x{:04x}{vendor}", a.vendor_id()),
                );
                row(&mut o, "device id", format!("0x{:04x}", a.vendor_part_id()));
                row(&mut o, "hardware version", format!("0x{:x}", a.hw_ver()));
                row(&mut o, "ports", a.phys_port_cnt().to_string());
                for (k, v) in [
                    ("max_qp", a.max_qp() as u64),
                    ("max_qp_wr", a.max_qp_wr() as u64),
                    ("max_sge", a.max_sge() as u64),
                    ("max_cq", a.max_cq() as u64),
                    ("max_cqe", a.max_cqe() as u64),
                    ("max_mr", a.max_mr() as u64),
                    ("max_mr_size", a.max_mr_size()),
                    ("max_pd", a.max_pd() as u64),
                    ("max_ah", a.max_ah() as u64),
                ] {
                    row(&mut o, k, v.to_string());
                }
            }
            Err(e) => row(&mut o, "ibv_query_device", format!("failed: {e}")),
        }
        let _ = writeln!(o, " port 1");
        match &self.port {
            Ok(p) => {
                row(
                    &mut o,
                    "state",
                    format!("{} ({})", port_state(p.state), p.state),
                );
                row(
                    &mut o,
                    "max_msg_sz",
                    format!("{} bytes (largest SEND)", p.max_msg_sz),
                );
                row(
                    &mut o,
                    "active_mtu",
                    format!("{} bytes", mtu_bytes(p.active_mtu)),
                );
                let rate = rate_gbps(p.active_width, p.active_speed)
                    .map_or("unknown".into(), |r| format!("{r} Gb/s"));
                row(&mut o, "link rate", rate);
                row(&mut o, "gid_tbl_len", p.gid_tbl_len.to_string());
            }
            Err(e) => row(&mut o, "ibv_query_port", format!("failed: {e}")),
        }
        for (i, g) in self.gids.iter().enumerate() {
            let v = g
                .as_ref()
                .map_or_else(|e| format!("failed: {e}"), |g| g.to_string());
            row(&mut o, &format!("GID[{i}]"), v);
        }
        let _ = writeln!(o, " EFA (efadv_query_device)");
        match &self.efadv {
            Ok(e) => {
                row(
                    &mut o,
                    "max_sq_wr",
                    format!("{} (deepest send queue)", e.max_sq_wr),
                );
                row(
                    &mut o,
                    "max_rq_wr",
                    format!("{} (deepest receive queue)", e.max_rq_wr),
                );
                row(
                    &mut o,
                    "max_sq_sge",
                    format!("{} (SGEs per send)", e.max_sq_sge),
                );
                row(
                    &mut o,
                    "max_rq_sge",
                    format!("{} (SGEs per receive)", e.max_rq_sge),
                );
                row(
                    &mut o,
                    "inline_buf_size",
                    format!("{} bytes", e.inline_buf_size),
                );
                row(
                    &mut o,
                    "inline_buf_size_ex",
                    format!("{} bytes", e.inline_buf_size_ex),
                );
                row(
                    &mut o,
                    "max_rdma_size",
                    format!("{} bytes (largest RDMA read/write)", e.max_rdma_size),
                );
                let (names, rest) = cap_names(e.caps);
                let mut caps = format!("0x{:x}: {}", e.caps.bits(), names.join(" "));
                if rest != 0 {
                    let _ = write!(caps, " (unnamed bits 0x{rest:x})");
                }
                row(&mut o, "device_caps", caps);
                let yes = e.caps.contains(DeviceCaps::UNSOLICITED_WRITE_RECV);
                row(
                    &mut o,
                    "unsolicited write recv",
                    if yes { "yes" } else { "no" }.to_string(),
                );
            }
            Err(e) => row(&mut o, "efadv_query_device", format!("failed: {e}")),
        }
        let batch = match &self.max_tx_batch {
            Ok(b) => b.to_string(),
            Err(e) => format!("not reported ({e})"),
        };
        row(&mut o, "max TX batch", batch);
        if !self.features.is_empty() {
            let _ = writeln!(o, " features of the efa crate");
            for f in &self.features {
                let (mark, detail) = match &f.result {
                    Ok(d) if d.is_empty() => ("yes", String::new()),
                    Ok(d) => ("yes", format!(" ({d})")),
                    Err(e) => ("no ", format!(": {e}")),
                };
                let _ = writeln!(o, "  [{mark}] {:<38} {}{detail}", f.name, f.api);
            }
        }
        o
    }

    /// The JSON rendering.
    pub fn to_json(&self) -> Value {
        let err = |e: &String| json!({ "error": e });
        let verbs = self.attr.as_ref().map_or_else(err, |a| {
            json!({
                "fw_ver": a.fw_ver(),
                "node_guid": format!("{:016x}", a.node_guid()),
                "vendor_id": a.vendor_id(),
                "vendor_part_id": a.vendor_part_id(),
                "hw_ver": a.hw_ver(),
                "phys_port_cnt": a.phys_port_cnt(),
                "max_qp": a.max_qp(),
                "max_qp_wr": a.max_qp_wr(),
                "max_sge": a.max_sge(),
                "max_cq": a.max_cq(),
                "max_cqe": a.max_cqe(),
                "max_mr": a.max_mr(),
                "max_mr_size": a.max_mr_size(),
                "max_pd": a.max_pd(),
                "max_ah": a.max_ah(),
            })
        });
        let port = self.port.as_ref().map_or_else(err, |p| {
            json!({
                "state": p.state,
                "state_name": port_state(p.state),
                "max_msg_sz": p.max_msg_sz,
                "active_mtu": mtu_bytes(p.active_mtu),
                "gid_tbl_len": p.gid_tbl_len,
                "link_layer": p.link_layer,
                "active_width": p.active_width,
                "active_speed": p.active_speed,
                "rate_gbps": rate_gbps(p.active_width, p.active_speed),
            })
        });
        let efadv = self.efadv.as_ref().map_or_else(err, |e| {
            json!({
                "max_sq_wr": e.max_sq_wr,
                "max_rq_wr": e.max_rq_wr,
                "max_sq_sge": e.max_sq_sge,
                "max_rq_sge": e.max_rq_sge,
                "inline_buf_size": e.inline_buf_size,
                "inline_buf_size_ex": e.inline_buf_size_ex,
                "max_rdma_size": e.max_rdma_size,
                "device_caps": e.caps.bits(),
                "device_caps_names": cap_names(e.caps).0,
                "unsolicited_write_recv": e.caps.contains(DeviceCaps::UNSOLICITED_WRITE_RECV),
            })
        });
        let gids: Vec<Value> = self
            .gids
            .iter()
            .map(|g| g.as_ref().map_or_else(err, |g| json!(g.to_string())))
            .collect();
        json!({
            "name": self.name,
            "efa": self.efa,
            "verbs": verbs,
            "port": port,
            "gids": gids,
            "efadv": efadv,
            "max_tx_batch": self.max_tx_batch.as_ref().ok(),
            "max_tx_batch_error": self.max_tx_batch.as_ref().err(),
            "features": self.features.iter().map(Feature::to_json).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_for_codes() {
        let (names, rest) = cap_names(DeviceCaps::from_bits_retain(0x1 | 0x8 | 0x400));
        assert_eq!((names, rest), (vec!["RDMA_READ", "RDMA_WRITE"], 0x400));
        assert_eq!(
            (port_state(4), mtu_bytes(5), mtu_bytes(0)),
            ("active", 4096, 0)
        );
        assert_eq!(rate_gbps(2, 32), Some(100.0));
        assert_eq!(rate_gbps(3, 32), None);
    }
}
