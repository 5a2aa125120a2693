//! efa-info's topology section on the software device shaped as p5.48xlarge (32 NICs, 8
//! GPUs on 8 PCIe switches, 2 NUMA nodes), with the software GPU reporting the shape's
//! GPU bus ids: the same variables `efa-sim run --gpus 8` sets with `EFA_SIM_SHAPE`.

use std::process::{Command, Output, Stdio};

use efa_sim::shape::P5;
use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_efa-info");

/// Runs efa-info on a fresh sysfs tree of the p5 shape.
fn on_p5(tag: &str, args: &[&str]) -> (Output, std::path::PathBuf) {
    let cache = std::env::temp_dir().join(format!("efa-info-topo-{tag}-{}", std::process::id()));
    let config =
        efa_sim::config::Config::from_vars(|k| (k == "EFA_SIM_SHAPE").then(|| P5.name.to_string()))
            .unwrap();
    let sim = efa_sim::model::Sim::from_config(config);
    let tree = efa_sim::sysfs::Tree::for_devices(sim.devices(), Some(&P5));
    let root = efa_sim::sysfs::prepare(&cache, &tree).unwrap();
    let bus_ids: Vec<String> = (0..P5.gpus).map(|g| P5.gpu_address(g)).collect();
    let out = Command::new(EXE)
        .args(args)
        .stdin(Stdio::null())
        .env("SYSFS_PATH", &root)
        .env("EFA_SIM_SHAPE", P5.name)
        .env("EFA_SIM_GPU_DEVICES", P5.gpus.to_string())
        .env("EFA_SIM_GPU_PCI_BUS_IDS", bus_ids.join(","))
        .output()
        .expect("run efa-info");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out, cache)
}

#[test]
fn json_shows_every_nic_gpu_and_which_are_nearest() {
    if !efa_sim_select::SOFTWARE_DEVICE || !efa_sim_select::SOFTWARE_GPU {
        eprintln!("skipped: the topology shapes are efa-sim's and efa-sim-gpu's");
        return;
    }
    let (out, cache) = on_p5("json", &["--json", "-d", "efa_0"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &v["topology"];
    let devices = t["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 32, "{t}");
    assert_eq!(devices[5]["pci"], P5.device_address(5));
    assert_eq!(devices[5]["numa_node"], 0);
    assert_eq!(devices[31]["numa_node"], 1);
    assert_eq!(devices[31]["local_cpus"], "48-95,144-191");
    assert_eq!(devices[0]["link_gbps"], 100);
    assert_eq!(devices[0]["counters"].as_object().unwrap().len(), 22);
    assert_eq!(t["numa_nodes"].as_array().unwrap().len(), 2);
    let gpus = t["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 8, "{t}");
    for (g, gpu) in gpus.iter().enumerate() {
        assert_eq!(gpu["pci"], P5.gpu_address(g as u32), "{gpu}");
        let wired: Vec<String> = (0..4).map(|k| format!("efa_{}", g * 4 + k)).collect();
        assert_eq!(gpu["nearest"], serde_json::json!(wired), "{gpu}");
        assert_eq!(gpu["proximity"][&wired[0]], "PIX", "{gpu}");
        // A NIC of another switch: same node for GPU 0..3 and efa_12, else across nodes.
        let other = if g < 3 {
            "NODE"
        } else if g == 3 {
            "PIX"
        } else {
            "SYS"
        };
        assert_eq!(gpu["proximity"]["efa_12"], other, "GPU {g}: {gpu}");
    }
    std::fs::remove_dir_all(cache).unwrap();
}

#[test]
fn text_has_the_matrix_and_the_counters() {
    if !efa_sim_select::SOFTWARE_DEVICE || !efa_sim_select::SOFTWARE_GPU {
        eprintln!("skipped: the topology shapes are efa-sim's and efa-sim-gpu's");
        return;
    }
    let (out, cache) = on_p5("text", &["-d", "efa_31"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let section = &text[text.find("\ntopology\n").expect("a topology section")..];
    assert!(
        section.contains("  NUMA node 1: CPUs 48-95,144-191\n"),
        "{section}"
    );
    assert!(
        section.contains("  efa_31     0000:ce:00.0  NUMA 1  100 Gb/s  CPUs 48-95,144-191\n"),
        "{section}"
    );
    assert!(
        section
            .contains("  GPU 7      0000:ca:00.0  NUMA 1  nearest: efa_28 efa_29 efa_30 efa_31\n"),
        "{section}"
    );
    // The matrix row comes after the device's own line.
    let row = section
        .lines()
        .rfind(|l| l.starts_with("  efa_0 "))
        .unwrap();
    let cells: Vec<&str> = row.split_whitespace().skip(1).collect();
    assert_eq!(
        cells,
        ["PIX", "NODE", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"],
        "{row}"
    );
    assert!(section.contains("  counters efa_0: "), "{section}");
    std::fs::remove_dir_all(cache).unwrap();
}
