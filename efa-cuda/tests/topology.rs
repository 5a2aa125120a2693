//! Each GPU's PCI address and nearest EFA devices, as `efa-sim run --gpus 8` with
//! `EFA_SIM_SHAPE=p6-b200.48xlarge` shows them: the software GPU reports the shape's bus
//! ids, sysfs (the shape's tree, through `SYSFS_PATH`) places them. One binary, because
//! the driver and the device read their environment once.

use efa_cuda::{Driver, InstanceTopology};
use efa_sim::shape::P6_B200;
use efa_typestate::{CpuList, NicTopology, PciAddress, Topology};

#[test]
fn every_gpu_finds_the_nic_on_its_switch() {
    if !efa_sim_select::SOFTWARE_GPU {
        eprintln!("skipped: the shape's GPUs are efa-sim-gpu's");
        return;
    }
    let shape = &P6_B200;
    let cache = std::env::temp_dir().join(format!("efa-cuda-topo-{}", std::process::id()));
    let config = efa_sim::config::Config::from_vars(|k| {
        (k == "EFA_SIM_SHAPE").then(|| shape.name.to_string())
    })
    .unwrap();
    let sim = efa_sim::model::Sim::from_config(config);
    let tree = efa_sim::sysfs::Tree::for_devices(sim.devices(), Some(shape));
    let root = efa_sim::sysfs::prepare(&cache, &tree).unwrap();
    let bus_ids: Vec<String> = (0..shape.gpus).map(|g| shape.gpu_address(g)).collect();
    // Before the driver's cuInit and the first sysfs read.
    std::env::set_var("SYSFS_PATH", &root);
    std::env::set_var("EFA_SIM_GPU_DEVICES", shape.gpus.to_string());
    std::env::set_var("EFA_SIM_GPU_PCI_BUS_IDS", bus_ids.join(","));

    let t = InstanceTopology::discover().unwrap();
    assert_eq!(t.nics.devices.len(), 8);
    assert_eq!(t.gpus.len(), 8);
    for (g, gpu) in t.gpus.iter().enumerate() {
        let pci: PciAddress = shape.gpu_address(g as u32).parse().unwrap();
        assert_eq!(gpu.pci, pci);
        assert_eq!(
            Driver::get()
                .unwrap()
                .device(g as i32)
                .unwrap()
                .pci_address()
                .unwrap(),
            pci
        );
        assert_eq!(gpu.numa_node(), Some(shape.numa_of_switch(g as u32)));
        assert_eq!(gpu.nearest, [format!("efa_{g}")], "GPU {g}");
        assert_eq!(t.nearest_devices(g as i32), [format!("efa_{g}")]);
    }
    assert!(t.nearest_devices(99).is_empty());
    std::fs::remove_dir_all(cache).unwrap();
}

#[test]
fn gpus_of_a_topology_built_by_hand_are_near_every_device() {
    let nic = |name: &str, bus: u8| NicTopology {
        name: name.into(),
        pci: PciAddress::new(0, bus, 0),
        pci_path: vec![PciAddress::new(0, bus, 0)],
        numa_node: Some(0),
        local_cpus: CpuList::range(0, 3),
        link_gbps: 400,
        counters: Vec::new(),
    };
    let nics = Topology::new(vec![nic("efa_0", 0x20), nic("efa_1", 0x30)], Vec::new());
    let t = InstanceTopology::from_parts(nics, &[PciAddress::new(0, 0x10, 0)]).unwrap();
    // Nothing locates the GPU: no switch, no NUMA node in common with anything.
    assert_eq!(t.gpus[0].location, None);
    assert_eq!(t.gpus[0].nearest, ["efa_0", "efa_1"]);
}
