//! Configuration that cannot do harm: every value the README does not list is rejected
//! with one line naming the variable, the value and what is allowed (`Config::from_vars`,
//! the parser the library and the CLI share). The CLI side (exit status, stderr) is in
//! `cli.rs`.

use efa_sim::config::Config;
use efa_sim::transport::faults::{FaultSpec, MAX_DELAY_US};

/// The error for one variable set to `value`, everything else unset.
fn err(name: &str, value: &str) -> String {
    let e = Config::from_vars(|k| (k == name).then(|| value.to_string()))
        .expect_err(&format!("{name}={value:?} must be rejected"));
    assert!(!e.contains('\n'), "one line: {e:?}");
    e
}

fn ok(name: &str, value: &str) -> Config {
    Config::from_vars(|k| (k == name).then(|| value.to_string()))
        .unwrap_or_else(|e| panic!("{name}={value:?} must be accepted: {e}"))
}

const SWITCH: &str = "must be 0, 1, off, on, false or true";

#[test]
fn switches_take_exactly_the_documented_spellings() {
    for name in ["EFA_SIM_DIRECT", "EFA_SIM_NO_PROCESS_VM", "EFA_SIM_TRACE"] {
        for (v, on) in [("1", true), ("on", true), ("true", true)]
            .into_iter()
            .chain([("0", false), ("off", false), ("false", false)])
        {
            let c = ok(name, v);
            let got = match name {
                "EFA_SIM_DIRECT" => c.direct,
                "EFA_SIM_NO_PROCESS_VM" => c.no_process_vm,
                _ => c.trace,
            };
            assert_eq!(got, on, "{name}={v}");
        }
        for v in ["yes", "no", "ON", "2", "enabled"] {
            assert_eq!(err(name, v), format!("{name}=`{v}`: {SWITCH}"));
        }
    }
}

#[test]
fn enum_knobs_take_exactly_their_values() {
    assert_eq!(
        err("EFA_SIM_TRANSPORT", "UDP"),
        "EFA_SIM_TRANSPORT=`UDP`: must be auto, udp or shm"
    );
    assert_eq!(
        err("EFA_SIM_READ_OPCODE", "read"),
        "EFA_SIM_READ_OPCODE=`read`: must be send or rdma_read"
    );
    assert_eq!(
        err("EFA_SIM_DEVICES", "65"),
        "EFA_SIM_DEVICES=`65`: must be a number 0..=64"
    );
    assert_eq!(
        err("EFA_SIM_SHAPE", "P5.48xlarge"),
        "EFA_SIM_SHAPE=`P5.48xlarge`: must be one of p5.48xlarge, p5en.48xlarge, \
         p6-b200.48xlarge, 2nic"
    );
    assert_eq!(ok("EFA_SIM_SHAPE", " 2nic ").devices(), 2);
}

#[test]
fn a_control_character_in_a_value_stays_on_one_line() {
    assert_eq!(
        err("EFA_SIM_DEVICES", "1\n2"),
        "EFA_SIM_DEVICES=`1\\n2`: must be a number 0..=64"
    );
}

#[test]
fn addresses_that_name_no_host_are_rejected() {
    for a in ["0.0.0.0", "224.0.0.1", "255.255.255.255", "::1"] {
        assert_eq!(
            err("EFA_SIM_ADDR", a),
            format!(
                "EFA_SIM_ADDR=`{a}`: must be an IPv4 address a.b.c.d of this host \
                 (not 0.0.0.0, broadcast or multicast)"
            )
        );
    }
    assert_eq!(
        ok("EFA_SIM_ADDR", "127.0.0.2").addr.octets(),
        [127, 0, 0, 2]
    );
}

#[test]
fn port_base_zero_or_without_room_is_rejected() {
    for p in ["0", "57345", "70000"] {
        assert_eq!(
            err("EFA_SIM_PORT_BASE", p),
            format!(
                "EFA_SIM_PORT_BASE=`{p}`: must be a port 1..=57344 (room for 64 x 128 ports from it)"
            )
        );
    }
    assert_eq!(ok("EFA_SIM_PORT_BASE", "57344").port_base, 57344);
}

#[test]
fn a_relative_lock_directory_is_rejected() {
    assert_eq!(
        err("EFA_SIM_LOCK_DIR", "locks"),
        "EFA_SIM_LOCK_DIR=`locks`: must be an absolute path \
         (processes with other working directories must find the same one)"
    );
}

#[test]
fn faults_reject_bad_probabilities_numbers_and_keys() {
    for (item, allowed) in [
        ("loss=1.5", "must be a probability 0..=1"),
        ("dup=-0.1", "must be a probability 0..=1"),
        ("reorder=nan", "must be a probability 0..=1"),
        (
            "seed=0x10",
            "must be a whole number 0..=18446744073709551615",
        ),
        (
            "kill_after=-1",
            "must be a whole number 0..=18446744073709551615",
        ),
        ("loss", "must be key=value"),
        (
            "chaos=1",
            "unknown fault (known: seed, loss, dup, reorder, delay_us, kill_after)",
        ),
    ] {
        let e = err("EFA_SIM_FAULTS", &format!("seed=1,{item}"));
        assert_eq!(e, format!("EFA_SIM_FAULTS: `{item}`: {allowed}"));
    }
    let f = FaultSpec::parse("loss=1,dup=0,reorder=1").unwrap();
    assert_eq!((f.loss, f.dup, f.reorder), (1.0, 0.0, 1.0));
}

#[test]
fn a_delay_beyond_the_peer_timeout_is_rejected() {
    assert_eq!(MAX_DELAY_US, 400_000);
    assert_eq!(
        FaultSpec::parse("delay_us=400000").unwrap().delay_us,
        400_000
    );
    assert_eq!(
        err("EFA_SIM_FAULTS", "delay_us=400001"),
        "EFA_SIM_FAULTS: `delay_us=400001`: must be 0..=400000 (request and answer are \
         both delayed; longer makes every WR hit the 1000 ms peer timeout)"
    );
}

const RDMA: &str =
    "while caps has rdma_read or rdma_write (drop them with caps=-rdma_read-rdma_write)";

#[test]
fn rdma_limits_of_zero_are_rejected_while_rdma_is_advertised() {
    for key in ["max_rdma_size", "max_sge_rd"] {
        for caps in ["", ",caps=-rdma_write", ",caps=-rdma_read"] {
            assert_eq!(
                err("EFA_SIM_PROFILE", &format!("{key}=0{caps}")),
                format!("EFA_SIM_PROFILE: efa_0: {key}=0: must be 1..=4294967295 {RDMA}")
            );
        }
        // Without RDMA the limit means nothing and 0 is accepted.
        let c = ok(
            "EFA_SIM_PROFILE",
            &format!("{key}=0,caps=-rdma_read-rdma_write"),
        );
        assert_eq!(c.profiles[1].device_caps & 0b1001, 0);
    }
    // Per device: the message names the device.
    assert_eq!(
        err("EFA_SIM_PROFILE", "efa_1.max_rdma_size=0"),
        format!("EFA_SIM_PROFILE: efa_1: max_rdma_size=0: must be 1..=4294967295 {RDMA}")
    );
}

#[test]
fn limits_that_make_the_device_unusable_are_rejected() {
    let unusable = "(0 makes the device unusable)";
    let mut wrong = Vec::new();
    for (item, msg) in [
        (
            "max_pd=0",
            format!("max_pd=0: must be 1..=4294967295 {unusable}"),
        ),
        (
            "max_cq=0",
            format!("max_cq=0: must be 1..=4294967295 {unusable}"),
        ),
        (
            "max_ah=0",
            format!("max_ah=0: must be 1..=4294967295 {unusable}"),
        ),
        (
            "max_mr_size=0",
            format!("max_mr_size=0: must be 1..=18446744073709551615 {unusable}"),
        ),
        (
            "max_mr=0",
            "max_mr=0: must be 1..=65536 (24-bit MR keys)".to_string(),
        ),
        (
            "page_size_cap=0",
            "page_size_cap=0: must be 1..=18446744073709551615 (0: no page size at all)"
                .to_string(),
        ),
        (
            "min_sq_wr=5000",
            "min_sq_wr=5000: must be 0..=4096 (at most max_sq_wr)".to_string(),
        ),
        (
            "max_sq_wr=0",
            "max_sq_wr=0: must be 1..=32768 (16-bit ring indices)".to_string(),
        ),
    ] {
        // Every item is tried, so that one run shows each check that is missing.
        let want = format!("EFA_SIM_PROFILE: efa_0: {msg}");
        match Config::from_vars(|k| (k == "EFA_SIM_PROFILE").then(|| item.to_string())) {
            Err(e) if e == want => {}
            other => wrong.push(format!("{item}: {other:?}")),
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn profile_items_name_the_item_and_what_is_allowed() {
    for (item, msg) in [
        ("dmabuf_mr=yes", SWITCH.to_string()),
        ("peermem=no", SWITCH.to_string()),
        ("max_sq_wr=lots", "must be a number (decimal or 0x hex)".into()),
        ("max_sq_sge=70000", "must be a number 0..=65535".into()),
        ("read_opcode=read", "must be send or rdma_read".into()),
        ("caps=-teleport", "unknown capability `teleport` (known: rdma_read, rnr_retry, cq_with_sgid, rdma_write, unsolicited_write_recv)".into()),
        ("efa_x.max_qp=1", "the device prefix must be efa_<N>".into()),
        ("max_sq_wr", "must be key=value".into()),
    ] {
        assert_eq!(
            err("EFA_SIM_PROFILE", &format!("max_qp=4,{item}")),
            format!("EFA_SIM_PROFILE: `{item}`: {msg}")
        );
    }
    let e = err("EFA_SIM_PROFILE", "teleport=1");
    assert!(
        e.starts_with("EFA_SIM_PROFILE: `teleport=1`: unknown profile key (known: vendor_id, "),
        "{e}"
    );
    assert_eq!(
        err("EFA_SIM_PROFILE", "efa_5.max_qp=3"),
        "EFA_SIM_PROFILE: names efa_5, but there are only 2 devices (EFA_SIM_DEVICES)"
    );
    let e = err("EFA_SIM_PROFILE", "/nonexistent/efa.profile");
    assert_eq!(
        e,
        "EFA_SIM_PROFILE: `/nonexistent/efa.profile`: must be a key=value list or the path \
         of a readable file (No such file or directory (os error 2))"
    );
}
