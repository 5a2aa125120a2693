//! A topology built by hand, and malformed sysfs trees written by hand.

use super::*;

fn pci(bus: u8, device: u8) -> PciAddress {
    PciAddress::new(0, bus, device)
}

/// Two switches (buses 0x10 and 0x20), each with one GPU and two NICs, on nodes 0 and 1.
fn two_switches() -> Topology {
    let nic = |name: &str, switch: u8, port: u8, node: u32| NicTopology {
        name: name.into(),
        pci: pci(switch + 3 + port, 0),
        pci_path: vec![
            pci(switch, 1),
            pci(switch + 1, 0),
            pci(switch + 2, port),
            pci(switch + 3 + port, 0),
        ],
        numa_node: Some(node),
        local_cpus: CpuList::range(node * 4, node * 4 + 3),
        link_gbps: 200,
        counters: vec![("tx_bytes".into(), 7)],
    };
    Topology::new(
        vec![
            nic("efa_10", 0x20, 2, 1),
            nic("efa_2", 0x20, 1, 1),
            nic("efa_1", 0x10, 2, 0),
            nic("efa_0", 0x10, 1, 0),
        ],
        vec![
            NumaNode {
                id: 1,
                cpus: CpuList::range(4, 7),
            },
            NumaNode {
                id: 0,
                cpus: CpuList::range(0, 3),
            },
        ],
    )
}

fn gpu_at(switch: u8, node: Option<u32>) -> PciLocation {
    PciLocation {
        pci_path: vec![
            pci(switch, 1),
            pci(switch + 1, 0),
            pci(switch + 2, 0),
            pci(switch + 3, 0),
        ],
        numa_node: node,
    }
}

fn names(devices: Vec<&NicTopology>) -> Vec<&str> {
    devices.into_iter().map(|d| d.name.as_str()).collect()
}

#[test]
fn a_topology_built_by_hand_is_sorted_and_answers_nearest() {
    let t = two_switches();
    let all: Vec<&str> = t.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(all, ["efa_0", "efa_1", "efa_2", "efa_10"]);
    assert_eq!(t.numa_nodes[0].id, 0);
    assert_eq!(names(t.nearest(&gpu_at(0x10, Some(0)))), ["efa_0", "efa_1"]);
    assert_eq!(
        names(t.nearest(&gpu_at(0x20, Some(1)))),
        ["efa_2", "efa_10"]
    );
    assert_eq!(names(t.on_numa_node(1)), ["efa_2", "efa_10"]);
    assert_eq!(t.device("efa_1").unwrap().counter("tx_bytes"), Some(7));
    // Built by hand: nothing to locate or re-read.
    assert_eq!(t.locate(pci(0x13, 0)), Ok(None));
    assert!(t.read_counters("efa_0").is_err());
}

#[test]
fn with_no_common_switch_the_numa_node_decides_then_nothing_does() {
    let t = two_switches();
    // A GPU under another host bridge, on node 1: the NICs of node 1.
    assert_eq!(
        names(t.nearest(&gpu_at(0x40, Some(1)))),
        ["efa_2", "efa_10"]
    );
    // Under the same root port as efa_0/efa_1 but NUMA unknown: the switch decides.
    assert_eq!(names(t.nearest(&gpu_at(0x10, None))), ["efa_0", "efa_1"]);
    // Nothing in common: every device.
    assert_eq!(t.nearest(&gpu_at(0x40, None)).len(), 4);
}

#[test]
fn proximity_orders_switch_then_node_then_remote() {
    let t = two_switches();
    let gpu = gpu_at(0x10, Some(0));
    let of = |name: &str| t.device(name).unwrap().proximity(&gpu);
    assert_eq!(of("efa_0"), Proximity::PciBridge);
    assert_eq!(t.device("efa_0").unwrap().shared_pci_bridges(&gpu), 2);
    assert_eq!(of("efa_2"), Proximity::Remote);
    let elsewhere_on_node_1 = gpu_at(0x40, Some(1));
    assert_eq!(
        t.device("efa_2").unwrap().proximity(&elsewhere_on_node_1),
        Proximity::NumaNode
    );
    assert!(Proximity::PciBridge < Proximity::NumaNode && Proximity::NumaNode < Proximity::Remote);
}

/// A one-device sysfs tree under a fresh temporary directory.
struct FakeSysfs {
    root: PathBuf,
}

impl FakeSysfs {
    fn new(tag: &str) -> FakeSysfs {
        let root = std::env::temp_dir().join(format!("efa-topo-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dev = root.join("devices/pci0000:10/0000:10:01.0/0000:11:00.0");
        let ib = dev.join("infiniband/efa_0");
        let f = FakeSysfs { root };
        f.write(&dev.join("numa_node"), "1\n");
        f.write(&dev.join("local_cpulist"), "4-7\n");
        f.write(&ib.join("ports/1/rate"), "400 Gb/sec (8X HDR)\n");
        f.write(&ib.join("ports/1/hw_counters/tx_bytes"), "42\n");
        f.write(&ib.join("ports/1/hw_counters/lifespan"), "10\n");
        f.write(&f.root.join("devices/system/node/node1/cpulist"), "4-7\n");
        f.link(&dev.join("driver"), &f.root.join("bus/pci/drivers/efa"));
        f.link(&f.root.join("class/infiniband/efa_0"), &ib);
        f.link(&ib.join("device"), &dev);
        f.link(&f.root.join("bus/pci/devices/0000:11:00.0"), &dev);
        f
    }

    fn write(&self, path: &Path, content: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    fn link(&self, path: &Path, target: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::create_dir_all(target).unwrap();
        std::os::unix::fs::symlink(target, path).unwrap();
    }

    fn file(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }
}

impl Drop for FakeSysfs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

const DEV: &str = "devices/pci0000:10/0000:10:01.0/0000:11:00.0";

#[test]
#[cfg_attr(miri, ignore)] // the file system is outside Miri's isolation
fn a_well_formed_tree_is_read() {
    let f = FakeSysfs::new("good");
    let t = Topology::from_sysfs(&f.root).unwrap();
    let d = &t.devices[0];
    assert_eq!((d.name.as_str(), d.pci), ("efa_0", pci(0x11, 0)));
    assert_eq!(d.pci_path, [pci(0x10, 1), pci(0x11, 0)]);
    assert_eq!((d.numa_node, d.link_gbps), (Some(1), 400));
    assert_eq!(d.local_cpus.to_string(), "4-7");
    assert_eq!(d.counters, [("tx_bytes".to_string(), 42)]);
    assert_eq!(
        t.numa_nodes,
        [NumaNode {
            id: 1,
            cpus: CpuList::range(4, 7)
        }]
    );
    let at = t.locate(pci(0x11, 0)).unwrap().unwrap();
    assert_eq!(at.numa_node, Some(1));
    assert_eq!(t.locate(pci(0x99, 0)), Ok(None));
}

#[test]
#[cfg_attr(miri, ignore)] // the file system is outside Miri's isolation
fn bad_content_is_an_error_naming_the_file() {
    let cases: [(&str, &str, &str); 5] = [
        ("numa_node", "two\n", "a NUMA node number or -1"),
        ("local_cpulist", "4-x\n", "a CPU list"),
        (
            "infiniband/efa_0/ports/1/rate",
            "fast\n",
            "a rate in Gb/sec",
        ),
        (
            "infiniband/efa_0/ports/1/hw_counters/tx_bytes",
            "-1\n",
            "a counter value",
        ),
        ("../../../system/node/node1/cpulist", "7-4\n", "a CPU list"),
    ];
    for (rel, content, expected) in cases {
        let f = FakeSysfs::new("bad");
        let path = f.file(&format!("{DEV}/{rel}"));
        f.write(&path, content);
        let e = Topology::from_sysfs(&f.root).unwrap_err();
        assert_eq!(
            std::fs::canonicalize(&e.path).ok(),
            std::fs::canonicalize(&path).ok(),
            "{e}"
        );
        match &e.kind {
            TopologyErrorKind::Malformed { expected: x, .. } => assert_eq!(*x, expected, "{e}"),
            k => panic!("{rel}: {k:?}"),
        }
        assert!(e.to_string().contains(content.trim()), "{e}");
    }
}

#[test]
#[cfg_attr(miri, ignore)] // the file system is outside Miri's isolation
fn missing_files_are_errors_naming_them() {
    for rel in [
        "local_cpulist",
        "numa_node",
        "infiniband/efa_0/ports/1/rate",
    ] {
        let f = FakeSysfs::new("missing");
        let path = f.file(&format!("{DEV}/{rel}"));
        std::fs::remove_file(&path).unwrap();
        let e = Topology::from_sysfs(&f.root).unwrap_err();
        assert_eq!(e.kind, TopologyErrorKind::Missing, "{rel}: {e}");
        assert!(e.path.ends_with(rel.rsplit('/').next().unwrap()), "{e}");
    }
    // A device link that leads nowhere.
    let f = FakeSysfs::new("dangling");
    std::fs::remove_file(f.file("class/infiniband/efa_0/device")).unwrap();
    std::os::unix::fs::symlink(
        "/nonexistent/0000:11:00.0",
        f.file("class/infiniband/efa_0/device"),
    )
    .unwrap();
    let e = Topology::from_sysfs(&f.root).unwrap_err();
    assert!(
        e.path.ends_with("device") && e.kind == TopologyErrorKind::Missing,
        "{e}"
    );
}

#[test]
#[cfg_attr(miri, ignore)] // the file system is outside Miri's isolation
fn devices_of_other_drivers_are_skipped() {
    let f = FakeSysfs::new("others");
    // A software device without a parent, and a PCI device of another driver.
    std::fs::create_dir_all(f.file("class/infiniband/rxe0")).unwrap();
    let mlx = f.file("devices/pci0000:10/0000:10:02.0");
    f.link(&mlx.join("driver"), &f.file("bus/pci/drivers/mlx5_core"));
    f.link(&f.file("class/infiniband/mlx5_0/device"), &mlx);
    let t = Topology::from_sysfs(&f.root).unwrap();
    let names: Vec<&str> = t.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["efa_0"]);
    // An EFA device whose parent is not a PCI function is broken sysfs.
    let odd = f.file("devices/platform/efa-odd");
    f.link(&odd.join("driver"), &f.file("bus/pci/drivers/efa"));
    f.link(&f.file("class/infiniband/efa_9/device"), &odd);
    let e = Topology::from_sysfs(&f.root).unwrap_err();
    assert!(e.path.ends_with("efa_9/device"), "{e}");
    assert!(matches!(e.kind, TopologyErrorKind::Malformed { .. }), "{e}");
}

#[test]
#[cfg_attr(miri, ignore)] // the file system is outside Miri's isolation
fn no_rdma_class_means_no_devices() {
    let root = std::env::temp_dir().join(format!("efa-topo-empty-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let t = Topology::from_sysfs(&root).unwrap();
    assert!(t.devices.is_empty() && t.numa_nodes.is_empty());
    std::fs::remove_dir_all(&root).unwrap();
}
