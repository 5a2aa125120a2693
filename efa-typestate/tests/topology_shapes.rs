//! Topology discovery against the sysfs tree of each efa-sim instance shape: device
//! count, PCI addresses, NUMA nodes, local CPUs, link speed, counters, and each GPU's
//! nearest devices matching the shape's wiring.

use efa_sim::config::Config;
use efa_sim::model::Sim;
use efa_sim::shape::{Shape, SHAPES};
use efa_sim::sysfs::{self, counters::PORT_COUNTERS, Tree};
use efa_typestate::{PciAddress, Topology};
use std::path::PathBuf;

/// Writes the tree of `shape` (or of the default devices) under a fresh directory.
fn tree_of(shape: Option<&Shape>) -> (PathBuf, PathBuf) {
    let name = shape.map_or("default", |s| s.name);
    let cache = std::env::temp_dir().join(format!("efa-topo-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let config = Config::from_vars(|k| match (k, shape) {
        ("EFA_SIM_SHAPE", Some(s)) => Some(s.name.to_string()),
        _ => None,
    })
    .unwrap();
    let sim = Sim::from_config(config);
    let tree = Tree::for_devices(sim.devices(), shape);
    (sysfs::prepare(&cache, &tree).unwrap(), cache)
}

fn addr(s: &str) -> PciAddress {
    s.parse().unwrap()
}

#[test]
fn each_shape_is_discovered_as_its_wiring_says() {
    for shape in SHAPES {
        let (root, cache) = tree_of(Some(shape));
        let t = Topology::from_sysfs(&root).unwrap();
        let n = shape.name;
        assert_eq!(t.devices.len() as u32, shape.devices(), "{n}");
        for (i, d) in t.devices.iter().enumerate() {
            let i = i as u32;
            let node = shape.numa_of_switch(shape.switch_of_device(i));
            assert_eq!(d.name, format!("efa_{i}"), "{n}");
            assert_eq!(d.pci, addr(&shape.device_address(i)), "{n} {}", d.name);
            // Root port, switch upstream, downstream port, the device.
            assert_eq!(d.pci_path.len(), 4, "{n} {}", d.name);
            assert_eq!(d.numa_node, Some(node), "{n} {}", d.name);
            assert_eq!(
                d.local_cpus.to_string(),
                shape.cpulist(node),
                "{n} {}",
                d.name
            );
            assert_eq!(d.link_gbps, shape.link_gbps, "{n} {}", d.name);
            assert_eq!(d.counters.len(), PORT_COUNTERS.len(), "{n} {}", d.name);
            assert!(d.counters.iter().all(|(_, v)| *v == 0), "{n} {}", d.name);
        }
        assert_eq!(t.numa_nodes.len() as u32, shape.numa_nodes, "{n}");
        for node in &t.numa_nodes {
            assert_eq!(node.cpus.to_string(), shape.cpulist(node.id), "{n}");
        }
        let all_cpus: usize = t.numa_nodes.iter().map(|x| x.cpus.len()).sum();
        assert_eq!(all_cpus as u32, shape.cpus(), "{n}");
        for gpu in 0..shape.gpus {
            let at = t.locate(addr(&shape.gpu_address(gpu))).unwrap().unwrap();
            assert_eq!(
                at.numa_node,
                Some(shape.numa_of_switch(gpu)),
                "{n} GPU {gpu}"
            );
            let nearest: Vec<&str> = t.nearest(&at).iter().map(|d| d.name.as_str()).collect();
            let wired: Vec<String> = (0..shape.nics_per_gpu)
                .map(|k| format!("efa_{}", gpu * shape.nics_per_gpu + k))
                .collect();
            assert_eq!(nearest, wired, "{n} GPU {gpu}");
        }
        let per_node = shape.devices() / shape.numa_nodes;
        assert_eq!(t.on_numa_node(1).len() as u32, per_node, "{n}");
        std::fs::remove_dir_all(cache).unwrap();
    }
}

#[test]
fn the_default_devices_have_no_numa_node_and_every_device_is_nearest() {
    let (root, cache) = tree_of(None);
    let t = Topology::from_sysfs(&root).unwrap();
    assert_eq!(t.devices.len(), 2);
    assert!(t
        .devices
        .iter()
        .all(|d| d.numa_node.is_none() && d.link_gbps == 100));
    assert_eq!(t.devices[1].pci, addr(&sysfs::pci_address(1)));
    assert_eq!(t.numa_nodes.len(), 1);
    // Nothing sits under a switch: a GPU elsewhere is as near to one device as the other.
    let at = efa_typestate::PciLocation {
        pci_path: vec![addr("0000:53:00.0")],
        numa_node: None,
    };
    assert_eq!(t.nearest(&at).len(), 2);
    std::fs::remove_dir_all(cache).unwrap();
}
