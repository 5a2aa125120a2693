//! efa-info as a user runs it, on the device this build selected (efa-sim unless
//! EFA_SIM=0): its text and JSON agree with what the safe API reports, profiles change
//! what it says, bad input is one line and a non-zero exit.

use std::process::{Command, Output, Stdio};

use efa::*;
use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_efa-info");

fn info(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(EXE);
    c.args(args).stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run efa-info")
}

fn json(args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    let o = info(&a, env);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("one JSON object")
}

#[test]
fn json_agrees_with_the_safe_api() {
    let v = json(&[], &[]);
    let want_kind = if efa_sim_select::SOFTWARE_DEVICE {
        "efa-sim"
    } else {
        "rdma-core"
    };
    for lib in v["libraries"].as_array().unwrap() {
        assert_eq!(lib["kind"], want_kind, "{lib}");
        assert!(
            lib["path"].as_str().is_some_and(|p| p.starts_with('/')),
            "{lib}"
        );
    }
    let list = DeviceList::new().unwrap();
    let names: Vec<&str> = list.iter().map(|d| d.name()).collect();
    let devs = v["devices"].as_array().unwrap();
    assert_eq!(
        devs.iter()
            .map(|d| d["name"].as_str().unwrap())
            .collect::<Vec<_>>(),
        names
    );
    let ctx = Context::open_first_efa().unwrap();
    let (attr, efa_attr, port) = (
        ctx.query_device().unwrap(),
        ctx.query_efa().unwrap(),
        ctx.query_port(1).unwrap(),
    );
    let d = devs
        .iter()
        .find(|d| d["name"] == ctx.device_name())
        .unwrap();
    assert_eq!(d["efa"], true);
    assert_eq!(d["verbs"]["fw_ver"], attr.fw_ver());
    assert_eq!(d["verbs"]["max_qp"], attr.max_qp());
    assert_eq!(d["verbs"]["vendor_part_id"], attr.vendor_part_id());
    assert_eq!(d["port"]["max_msg_sz"], port.max_msg_sz);
    assert_eq!(d["port"]["state_name"], "active");
    assert_eq!(d["gids"][0], ctx.gid().unwrap().to_string());
    assert_eq!(d["efadv"]["max_rdma_size"], efa_attr.max_rdma_size);
    assert_eq!(d["efadv"]["max_sq_wr"], efa_attr.max_sq_wr);
    assert_eq!(d["efadv"]["inline_buf_size"], efa_attr.inline_buf_size);
    assert_eq!(d["efadv"]["device_caps"], efa_attr.caps.bits());
    let feature = |name: &str| {
        d["features"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("no feature {name:?} in {d}"))
            .clone()
    };
    assert_eq!(feature("SRD queue pairs")["supported"], true);
    let write = feature("RDMA write and write with immediate");
    assert_eq!(
        write["supported"],
        ctx.caps().contains(DeviceCaps::RDMA_WRITE)
    );
    // The direct data path: supported exactly when the safe API can make a direct QP.
    let direct = feature("direct data path");
    let can = ctx
        .create_ext_cq(CqOptions::new(512).backend(Backend::Direct))
        .and_then(|cq| {
            let pd = ctx.alloc_pd()?;
            let qp = pd.create_qp(&cq, &cq, &QpConfig::srd().backend(Backend::Direct))?;
            Ok(qp.backend() == Backend::Direct)
        });
    assert_eq!(direct["supported"], can.is_ok(), "{direct}");
    // The path a program gets by default: what an Auto CQ gets, in words.
    let default = feature("default data path");
    let auto = ctx.create_ext_cq(CqOptions::new(16)).unwrap().backend();
    let detail = default["detail"].as_str().unwrap();
    match auto {
        Backend::Direct => assert!(detail.starts_with("direct"), "{default}"),
        _ => assert!(detail.starts_with("the provider"), "{default}"),
    }
    // The ring layout (efadv_query_qp_wqs): efa-sim models the rings since issue 11, so
    // the answer is whatever the safe API gets, on either device.
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_ext_cq(CqOptions::new(512)).unwrap();
    let qp = pd.create_qp(&cq, &cq, &QpConfig::srd()).unwrap();
    let rings = feature("send/receive ring layout");
    match qp.wq_layout() {
        Ok((sq, _)) => {
            assert_eq!(rings["supported"], true, "{rings}");
            assert_eq!(d["max_tx_batch"], sq.max_batch, "{d}");
            let detail = rings["detail"].as_str().unwrap();
            assert!(
                detail.contains(&format!("{} WRs per doorbell", sq.max_batch)),
                "{rings}"
            );
        }
        Err(_) => {
            assert_eq!(rings["supported"], false, "{rings}");
            assert!(d["max_tx_batch"].is_null(), "{d}");
        }
    }
}

#[test]
fn text_names_the_library_the_caps_and_the_features() {
    let o = info(&[], &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.starts_with("efa-info "), "{out}");
    let lib = out
        .lines()
        .find(|l| l.trim_start().starts_with("libibverbs.so.1"))
        .unwrap();
    assert_eq!(
        lib.contains("efa-sim, the software EFA device"),
        efa_sim_select::SOFTWARE_DEVICE,
        "{lib}"
    );
    assert!(out.contains("efa_0: EFA device"), "{out}");
    assert!(out.contains("  max_rdma_size "), "{out}");
    assert!(out.contains("  [yes] SRD queue pairs "), "{out}");
    if efa_sim_select::SOFTWARE_DEVICE {
        assert!(out.contains("device_caps              0x1f: RDMA_READ RNR_RETRY CQ_WITH_SGID RDMA_WRITE UNSOLICITED_WRITE_RECV"), "{out}");
    }
}

#[test]
fn a_smaller_device_is_described_as_such() {
    if !efa_sim_select::SOFTWARE_DEVICE {
        return; // needs efa-sim's profiles
    }
    let env = [
        (
            "EFA_SIM_PROFILE",
            "max_rdma_size=65536,caps=-rdma_write,vendor_part_id=0xefa1",
        ),
        ("EFA_SIM_DEVICES", "1"),
    ];
    let v = json(&[], &env);
    let devs = v["devices"].as_array().unwrap();
    assert_eq!(devs.len(), 1);
    let d = &devs[0];
    assert_eq!(d["efadv"]["max_rdma_size"], 65536);
    assert_eq!(d["verbs"]["vendor_part_id"], 0xefa1);
    let caps: Vec<&str> = d["efadv"]["device_caps_names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(
        !caps.contains(&"RDMA_WRITE") && caps.contains(&"RDMA_READ"),
        "{caps:?}"
    );
    let write = d["features"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "RDMA write and write with immediate")
        .unwrap();
    assert_eq!(write["supported"], false);
    assert!(
        write["detail"].as_str().unwrap().contains("RDMA_WRITE"),
        "{write}"
    );
    assert_eq!(
        json(&["-d", "efa_0"], &[])["devices"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn bad_input_is_one_line_and_a_non_zero_exit() {
    let one_line = |o: &Output, code: i32, needle: &str| {
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("efa-info: ") && err.contains(needle),
            "{err}"
        );
    };
    one_line(
        &info(&["-d", "efa_9"], &[]),
        1,
        "no device named efa_9 (devices: efa_0",
    );
    one_line(&info(&["--verbose"], &[]), 2, "unknown argument");
    if efa_sim_select::SOFTWARE_DEVICE {
        one_line(
            &info(&[], &[("EFA_SIM_DEVICES", "0")]),
            1,
            "no RDMA devices",
        );
    }
}

/// A stdout whose reader is gone: the write end of a pipe whose only reader, `true`,
/// has exited, so every write fails with EPIPE as after `efa-info | head -1`. The reader
/// is gone before efa-info starts, so the test does not depend on timing.
fn closed_pipe() -> Stdio {
    let mut reader = Command::new("true")
        .stdin(Stdio::piped())
        .spawn()
        .expect("run true");
    let w = reader.stdin.take().expect("pipe");
    reader.wait().expect("true exits");
    Stdio::from(std::os::fd::OwnedFd::from(w))
}

fn info_into(args: &[&str], stdout: Stdio) -> Output {
    Command::new(EXE)
        .args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .expect("run efa-info")
}

#[test]
fn a_closed_stdout_ends_it_quietly_with_status_0() {
    for args in [&["--json"][..], &[], &["--help"], &["-V"]] {
        let o = info_into(args, closed_pipe());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
        assert_eq!(err, "", "{args:?}: no message, no panic");
    }
}

#[test]
fn any_other_write_error_is_one_line_and_status_1() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let o = info_into(&["--json"], Stdio::from(full));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(
        err.starts_with("efa-info: cannot write to stdout: "),
        "{err:?}"
    );
}
