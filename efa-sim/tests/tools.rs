//! Unmodified rdma-core consumers on the software device: Debian's `ibv_devices` and
//! `ibv_devinfo -v` (ibverbs-utils, built against the real rdma-core 44), Python
//! `ctypes` dlopen users, and the ELF version nodes the loader checks.

mod support;

use std::path::Path;
use std::process::Command;

fn run(cmd: &mut Command) -> (String, String) {
    let out = support::run_with_timeout(cmd, 60);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    support::assert_no_loader_warnings(&format!("{cmd:?}"), &out);
    (stdout, stderr)
}

fn tool_available(name: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {name}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[test]
fn ibv_devices_lists_both_devices() {
    assert!(
        tool_available("ibv_devices"),
        "ibv_devices (ibverbs-utils) is not installed"
    );
    let (out, _) = run(&mut support::on_sim("ibv_devices"));
    let names: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.starts_with("efa_"))
        .collect();
    assert_eq!(names, ["efa_0", "efa_1"], "ibv_devices output:\n{out}");
}

#[test]
fn ibv_devinfo_verbose_shows_model_attributes() {
    assert!(
        tool_available("ibv_devinfo"),
        "ibv_devinfo (ibverbs-utils) is not installed"
    );
    let (out, _) = run(support::on_sim("ibv_devinfo").arg("-v"));
    let blocks: Vec<&str> = out.split("hca_id:").skip(1).collect();
    assert_eq!(blocks.len(), 2, "two devices expected:\n{out}");
    for (i, b) in blocks.iter().enumerate() {
        let field = |name: &str| -> String {
            b.lines()
                .find(|l| l.trim_start().starts_with(&format!("{name}:")))
                .unwrap_or_else(|| panic!("no `{name}` in block {i}:\n{b}"))
                .split_once(':')
                .unwrap()
                .1
                .trim()
                .to_string()
        };
        assert_eq!(
            b.split_whitespace().next(),
            Some(format!("efa_{i}").as_str())
        );
        assert_eq!(field("transport"), "unspecified (4)");
        assert!(field("fw_ver").starts_with("efa-sim"), "fw_ver");
        assert_eq!(field("vendor_id"), "0x1d0f");
        assert_eq!(field("vendor_part_id"), "61346"); // 0xefa2
        assert_eq!(field("phys_port_cnt"), "1");
        assert_eq!(field("max_sge_rd"), "1");
        assert_eq!(field("max_pkeys"), "1");
        assert_eq!(field("atomic_cap"), "ATOMIC_NONE (0)");
        assert_eq!(field("state"), "PORT_ACTIVE (4)");
        assert_eq!(field("max_mtu"), "4096 (5)");
        assert_eq!(field("active_mtu"), "4096 (5)");
        assert_eq!(field("link_layer"), "Unspecified");
        assert_eq!(field("port_lmc"), "0x01");
        assert_eq!(field("gid_tbl_len"), "1");
        assert_eq!(field("pkey_tbl_len"), "1");
        let gid = b
            .lines()
            .find(|l| l.contains("GID[  0]:"))
            .expect("GID line");
        assert!(gid.contains("fe80:0000:0000:efa5:"), "GID {gid}");
        assert!(
            gid.trim_end().ends_with(&format!("{i:04x}")),
            "GID encodes the device index: {gid}"
        );
    }
}

#[test]
fn python_ctypes_dlopen_lists_devices() {
    assert!(tool_available("python3"), "python3 is not installed");
    let script = r#"
import ctypes
lib = ctypes.CDLL("libibverbs.so.1")
efa = ctypes.CDLL("libefa.so.1")
assert efa.efadv_query_device, "efadv_query_device"
lib.ibv_get_device_list.restype = ctypes.POINTER(ctypes.c_void_p)
lib.ibv_get_device_name.restype = ctypes.c_char_p
lib.ibv_get_device_name.argtypes = [ctypes.c_void_p]
lib.ibv_free_device_list.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
n = ctypes.c_int(-1)
lst = lib.ibv_get_device_list(ctypes.byref(n))
print("count", n.value)
for i in range(n.value):
    print("device", lib.ibv_get_device_name(lst[i]).decode())
lib.ibv_open_device.restype = ctypes.c_void_p
lib.ibv_open_device.argtypes = [ctypes.c_void_p]
ctx = lib.ibv_open_device(lst[0])
assert ctx
# Exported legacy ibv_query_port: writes the 48-byte _compat_ibv_port_attr only.
buf = (ctypes.c_ubyte * 64)(*([0xAB] * 64))
lib.ibv_query_port.argtypes = [ctypes.c_void_p, ctypes.c_uint8, ctypes.c_void_p]
rc = lib.ibv_query_port(ctx, 1, buf)
print("query_port", rc, "state", buf[0], "past48", buf[48])
lib.ibv_close_device.argtypes = [ctypes.c_void_p]
lib.ibv_close_device(ctx)
lib.ibv_free_device_list(lst)
"#;
    let (out, _) = run(support::on_sim("python3").arg("-c").arg(script));
    assert!(out.contains("count 2"), "{out}");
    assert!(
        out.contains("device efa_0") && out.contains("device efa_1"),
        "{out}"
    );
    assert!(out.contains("query_port 0 state 4 past48 171"), "{out}");
}

fn readelf(args: &[&str]) -> String {
    let so = support::lib_dir().join("libibverbs.so.1");
    let out = Command::new("readelf")
        .args(args)
        .arg(&so)
        .output()
        .expect("readelf");
    assert!(out.status.success(), "readelf failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn elf_soname_and_version_nodes() {
    let dynamic = readelf(&["-d"]);
    assert!(
        dynamic.contains("Library soname: [libibverbs.so.1]"),
        "{dynamic}"
    );
    let needed: Vec<&str> = dynamic.lines().filter(|l| l.contains("(NEEDED)")).collect();
    assert!(
        !needed
            .iter()
            .any(|l| l.contains("libibverbs") || l.contains("libefa") || l.contains("librdmacm")),
        "must not depend on the real rdma-core libraries: {needed:?}"
    );
    let versions = readelf(&["-V"]);
    for node in [
        "IBVERBS_1.0",
        "IBVERBS_1.1",
        "IBVERBS_1.5",
        "IBVERBS_1.6",
        "IBVERBS_1.7",
        "IBVERBS_1.8",
        "IBVERBS_1.9",
        "IBVERBS_1.10",
        "IBVERBS_1.11",
        "IBVERBS_1.12",
        "IBVERBS_1.13",
        "IBVERBS_1.14",
        "IBVERBS_1.15",
        "IBVERBS_1.16",
        "IBVERBS_1.17",
        "IBVERBS_1.18",
        "EFA_1.0",
        "EFA_1.1",
        "EFA_1.2",
        "EFA_1.3",
        "EFA_1.4",
        "EFA_1.5",
        "EFA_1.6",
        "EFA_1.7",
    ] {
        assert!(
            versions.contains(&format!("Name: {node}\n")),
            "version node {node} missing"
        );
    }
}

/// Every symbol of the system libibverbs's provider-private node (`IBVERBS_PRIVATE_34`,
/// rdma-core 44) is exported at that node, with the same kind (function or data object):
/// provider libraries such as libmlx5 import them.
#[test]
fn every_private_34_symbol_of_the_system_libibverbs_is_exported() {
    let gcc = Command::new("gcc")
        .arg("-print-file-name=libibverbs.so.1")
        .output()
        .expect("gcc");
    let system = String::from_utf8_lossy(&gcc.stdout).trim().to_string();
    assert!(
        Path::new(&system).is_file(),
        "system libibverbs.so.1 not found: {system}"
    );
    let dyn_syms = |file: &str| {
        let out = Command::new("readelf")
            .args(["--dyn-syms", "-W", file])
            .output()
            .expect("readelf");
        assert!(out.status.success(), "readelf {file}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let private = |table: &str| -> std::collections::BTreeSet<(String, String)> {
        table
            .lines()
            .filter(|l| !l.contains(" UND "))
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let name = f.last()?.strip_suffix("@@IBVERBS_PRIVATE_34")?;
                let kind = f.get(3)?; // FUNC / OBJECT
                (*kind != "NOTYPE").then(|| (name.to_string(), kind.to_string()))
            })
            .collect()
    };
    let want = private(&dyn_syms(&system));
    assert!(want.len() >= 70, "system node looks incomplete: {want:?}");
    let ours = private(&readelf(&["--dyn-syms", "-W"]));
    let missing: Vec<_> = want.difference(&ours).collect();
    assert!(
        missing.is_empty(),
        "not exported at IBVERBS_PRIVATE_34: {missing:?}"
    );
}

/// Every function of rdma-core 65's libibverbs/libefa maps is exported at its default node.
#[test]
fn every_v65_function_is_exported_at_its_default_version() {
    let tsv = include_str!("symbol_versions_v65.tsv");
    let syms = readelf(&["--dyn-syms", "-W"]);
    let mut missing = Vec::new();
    for line in tsv.lines().filter(|l| !l.trim().is_empty()) {
        let (node, name) = line.split_once('\t').expect("node<TAB>name");
        let want = format!(" {name}@@{node}");
        if !syms
            .lines()
            .any(|l| l.ends_with(&want) && l.contains(" FUNC ") && !l.contains(" UND "))
        {
            missing.push(format!("{name}@@{node}"));
        }
    }
    assert!(missing.is_empty(), "not exported: {missing:?}");
}
