//! Where the devices sit in the sysfs tree: PCI functions under their host bridge, root
//! port and PCIe switch ([`crate::shape`]), the GPUs beside them, NUMA nodes with their
//! CPU lists, and what the kernel shows for each PCI function (`numa_node`,
//! `local_cpulist`, `local_cpus`; drivers/pci/pci-sysfs.c) and for the port's `rate`
//! (drivers/infiniband/core/sysfs.c `rate_show`).

use super::{pci_address, Entry};
use crate::shape::Shape;

/// PCI class of a PCI-to-PCI bridge (root ports, switch ports).
const BRIDGE_CLASS: u32 = 0x060400;
/// PCI class of an NVIDIA data-center GPU: display controller, 3D (0x0302), prog-if 0.
pub const GPU_CLASS: u32 = 0x030200;
/// NVIDIA's PCI vendor id.
const NVIDIA_VENDOR: u32 = 0x10de;

/// `ports/1/rate` as `rate_show` prints it for the EFA driver's speed and width
/// (efa-sim's `ibv_query_port` reports the same pair).
pub fn rate(gbps: u32) -> String {
    match gbps {
        400.. => format!("{gbps} Gb/sec (8X HDR)"),
        200.. => format!("{gbps} Gb/sec (4X HDR)"),
        _ => format!("{gbps} Gb/sec (4X EDR)"),
    }
}

/// The placement of a tree's PCI functions: a shape's, or none (bus 0, no NUMA node).
pub struct Placement<'a> {
    shape: Option<&'a Shape>,
    /// Logical CPUs of the host (the tree without a shape shows one node of them all).
    host_cpus: u32,
}

impl<'a> Placement<'a> {
    pub fn new(shape: Option<&'a Shape>) -> Placement<'a> {
        let host_cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        Placement { shape, host_cpus }
    }

    /// `devices/<host bridge>/<bridges...>/<function>` of the endpoint at `slot` of
    /// `switch` (see [`Shape::pci_path`]).
    fn endpoint_dir(shape: &Shape, switch: u32, slot: u32) -> (String, String) {
        let path = shape.pci_path(switch, slot);
        let dir = format!("devices/{}/{}", shape.host_bridge(switch), path.join("/"));
        (path[3].clone(), dir)
    }

    /// The PCI address and directory of device `efa_index`.
    pub fn device_dir(&self, index: u32) -> (String, String) {
        match self.shape {
            Some(s) => {
                let switch = s.switch_of_device(index);
                Self::endpoint_dir(s, switch, 1 + index % s.nics_per_gpu)
            }
            None => {
                let pci = pci_address(index);
                let dir = format!("devices/pci0000:00/{pci}");
                (pci, dir)
            }
        }
    }

    /// NUMA node of device `efa_index` (`None`: the kernel's -1).
    fn device_node(&self, index: u32) -> Option<u32> {
        self.shape
            .map(|s| s.numa_of_switch(s.switch_of_device(index)))
    }

    /// `(local_cpulist, local_cpus)` of a function on `node`.
    fn local_cpus(&self, node: Option<u32>) -> (String, String) {
        match (self.shape, node) {
            (Some(s), Some(n)) => (s.cpulist(n), s.cpumask(n)),
            _ => {
                let n = self.host_cpus;
                let words = n.div_ceil(32);
                let mask: Vec<String> = (0..words)
                    .rev()
                    .map(|w| {
                        let bits = (n - w * 32).min(32);
                        format!(
                            "{:08x}",
                            if bits == 32 {
                                u32::MAX
                            } else {
                                (1u32 << bits) - 1
                            }
                        )
                    })
                    .collect();
                (format!("0-{}", n - 1), mask.join(","))
            }
        }
    }

    /// What every PCI function directory `dir` shows: ids, NUMA node, local CPUs, its
    /// `subsystem` link and its `bus/pci/devices` entry.
    fn pci_function(&self, e: &mut Vec<Entry>, dir: &str, ids: (u32, u32), node: Option<u32>) {
        let pci = dir.rsplit('/').next().unwrap_or(dir);
        e.push(Entry::file(
            format!("{dir}/vendor"),
            format!("0x{:04x}", ids.0),
        ));
        e.push(Entry::file(
            format!("{dir}/device"),
            format!("0x{:04x}", ids.1),
        ));
        e.push(Entry::file(
            format!("{dir}/subsystem_vendor"),
            format!("0x{:04x}", ids.0),
        ));
        e.push(Entry::file(
            format!("{dir}/subsystem_device"),
            format!("0x{:04x}", ids.1),
        ));
        e.push(Entry::file(
            format!("{dir}/numa_node"),
            node.map_or(-1, |n| n as i64),
        ));
        let (list, mask) = self.local_cpus(node);
        e.push(Entry::file(format!("{dir}/local_cpulist"), list));
        e.push(Entry::file(format!("{dir}/local_cpus"), mask));
        e.push(Entry::link_to(format!("{dir}/subsystem"), "bus/pci"));
        e.push(Entry::link_to(format!("bus/pci/devices/{pci}"), dir));
    }

    /// The PCI function of device `efa_index` at `dir` (class and driver are the caller's).
    pub fn function_entries(&self, e: &mut Vec<Entry>, dir: &str, index: u32, ids: (u32, u32)) {
        self.pci_function(e, dir, ids, self.device_node(index));
    }

    /// NUMA nodes, and with a shape its bridges and GPUs.
    pub fn system_entries(&self, e: &mut Vec<Entry>) {
        let Some(s) = self.shape else {
            let (list, mask) = self.local_cpus(None);
            e.push(Entry::file("devices/system/node/online", "0"));
            e.push(Entry::file("devices/system/node/node0/cpulist", list));
            e.push(Entry::file("devices/system/node/node0/cpumap", mask));
            return;
        };
        e.push(Entry::file(
            "devices/system/node/online",
            format!("0-{}", s.numa_nodes - 1),
        ));
        for n in 0..s.numa_nodes {
            e.push(Entry::file(
                format!("devices/system/node/node{n}/cpulist"),
                s.cpulist(n),
            ));
            e.push(Entry::file(
                format!("devices/system/node/node{n}/cpumap"),
                s.cpumask(n),
            ));
        }
        for switch in 0..s.gpus {
            let node = Some(s.numa_of_switch(switch));
            let path = s.pci_path(switch, 0);
            let mut dir = format!("devices/{}", s.host_bridge(switch));
            // Root port, switch upstream port, the GPU's downstream port.
            for bridge in &path[..3] {
                dir = format!("{dir}/{bridge}");
                self.bridge(e, &dir, node);
            }
            // The NICs' downstream ports (their functions come with the devices).
            for slot in 1..=s.nics_per_gpu {
                let (_, nic) = Self::endpoint_dir(s, switch, slot);
                let port = nic.rsplit_once('/').map_or(nic.as_str(), |(p, _)| p);
                self.bridge(e, port, node);
            }
            let (_, gpu) = Self::endpoint_dir(s, switch, 0);
            self.pci_function(e, &gpu, (NVIDIA_VENDOR, gpu_device_id(s)), node);
            e.push(Entry::file(
                format!("{gpu}/class"),
                format!("0x{GPU_CLASS:06x}"),
            ));
        }
    }

    fn bridge(&self, e: &mut Vec<Entry>, dir: &str, node: Option<u32>) {
        // A bridge shared by several endpoints is listed once.
        if e.iter().any(|x| x.path() == format!("{dir}/class")) {
            return;
        }
        self.pci_function(e, dir, (0x1000, 0xc030), node);
        e.push(Entry::file(
            format!("{dir}/class"),
            format!("0x{BRIDGE_CLASS:06x}"),
        ));
    }
}

/// The GPU's PCI device id: H100 SXM5 (0x2330) on p5, H200 (0x2335) on p5en, B200
/// (0x2901) on p6-b200 (the PCI ID repository's entries; modelled, not read from an
/// instance).
fn gpu_device_id(s: &Shape) -> u32 {
    match s.link_gbps {
        400.. => 0x2901,
        200.. => 0x2335,
        _ => 0x2330,
    }
}
