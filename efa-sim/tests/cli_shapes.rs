//! `EFA_SIM_SHAPE` on the command line: `run` gives a program the shape's devices, its
//! sysfs tree (PCIe switches, NUMA nodes, link speed, counters) and, with `--gpus`, GPUs
//! that report the shape's PCI bus ids; unknown names and too many GPUs are one line.

use std::process::Command;

fn efa_sim(shape: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_efa-sim"));
    c.env_remove("EFA_SIM_PROFILE")
        .env_remove("EFA_SIM_DEVICES")
        .env_remove("EFA_SIM_LIB")
        .env_remove("EFA_SIM_GPU_LIB")
        .env_remove("EFA_SIM_GPU_DEVICES")
        .env_remove("SYSFS_PATH")
        .env("EFA_SIM_SHAPE", shape);
    c
}

/// Python printing GPU 7's PCI domain, bus and device attributes (50, 33, 34).
const BUS_ID_PROBE: &str = r#"
import ctypes
c = ctypes.CDLL("libcuda.so.1")
c.cuInit(0)
dev, v = ctypes.c_int(), ctypes.c_int()
c.cuDeviceGet(ctypes.byref(dev), 7)
out = []
for a in (50, 33, 34):
    c.cuDeviceGetAttribute(ctypes.byref(v), a, dev)
    out.append(v.value)
print("%04x:%02x:%02x.0" % tuple(out))
"#;

#[test]
fn run_gives_the_shape_s_devices_tree_and_gpu_bus_ids() {
    let script = r#"set -e
ls "$SYSFS_PATH/class/infiniband" | wc -l
echo "$EFA_SIM_GPU_PCI_BUS_IDS"
d="$SYSFS_PATH/class/infiniband/efa_31"
basename "$(readlink -f "$d/device")"
cat "$d/device/numa_node" "$d/device/local_cpulist" "$d/ports/1/rate" "$d/ports/1/hw_counters/tx_bytes"
basename "$(readlink -f "$d/device/..")"
cat "$SYSFS_PATH/bus/pci/devices/0000:ca:00.0/class""#;
    let out = efa_sim("p5.48xlarge")
        .args(["run", "--gpus", "8", "--", "sh", "-c", script])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{s}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines[0].trim(), "32", "{s}");
    let ids: Vec<&str> = lines[1].split(',').collect();
    assert_eq!(ids.len(), 8, "{s}");
    assert_eq!((ids[0], ids[7]), ("0000:53:00.0", "0000:ca:00.0"), "{s}");
    // efa_31: the fourth NIC of GPU 7's switch, on NUMA node 1.
    assert_eq!(lines[2], "0000:ce:00.0", "{s}");
    assert_eq!(
        &lines[3..6],
        ["1", "48-95,144-191", "100 Gb/sec (4X EDR)"],
        "{s}"
    );
    assert!(lines[6].parse::<u64>().is_ok(), "{s}");
    // Its parent is the switch's downstream port; GPU 7 is a 3D controller.
    assert_eq!(lines[7], "0000:c9:04.0", "{s}");
    assert_eq!(lines[8], "0x030200", "{s}");

    let out = efa_sim("p5.48xlarge")
        .args(["run", "--gpus", "8", "--", "python3", "-c", BUS_ID_PROBE])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        s.trim(),
        "0000:ca:00.0",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn info_shows_the_shape_s_link_speed() {
    let out = efa_sim("p6-b200.48xlarge").arg("info").output().unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{s}");
    assert_eq!(s.matches("hca_id:").count(), 8, "{s}");
    assert_eq!(s.matches("port 1 link:\t400 Gb/s").count(), 8, "{s}");
}

#[test]
fn unknown_shapes_and_too_many_gpus_are_one_line_and_exit_2() {
    let out = efa_sim("p4d.24xlarge")
        .args(["run", "--", "true"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    for name in [
        "EFA_SIM_SHAPE=`p4d.24xlarge`",
        "p5.48xlarge",
        "p5en.48xlarge",
        "p6-b200.48xlarge",
        "2nic",
    ] {
        assert!(e.contains(name), "{name}: {e}");
    }
    let out = efa_sim("2nic")
        .args(["run", "--gpus", "3", "--", "true"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(e.contains("--gpus 3") && e.contains("2 GPUs"), "{e}");
}
