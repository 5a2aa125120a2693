//! Where the EFA devices sit: PCI address and path, NUMA node, local CPUs, link speed and
//! hardware counters of each, and the NUMA nodes of the machine — read from sysfs once at
//! start-up ([`Topology::discover`]), or built by hand ([`Topology::new`]) in tests.
//!
//! Instances with many NICs (p5: 32, p5en: 16, p6-b200: 8) reach their bandwidth only
//! when each NIC is driven from memory close to it. [`Topology::nearest`] answers "which
//! devices are nearest this PCI function (a GPU) or this NUMA node": the devices sharing
//! the longest part of its PCIe path (the same switch first), then those on its NUMA node.
//! `efa-cuda` uses it for each GPU.
//!
//! sysfs is text: the layout read is the kernel's (`class/infiniband/<dev>/device` → the
//! PCI function under its bridges, `numa_node`, `local_cpulist`, `ports/1/rate`,
//! `ports/1/hw_counters/*`, `devices/system/node/node<N>/cpulist`), below `$SYSFS_PATH`
//! when set (as rdma-core reads it), else `/sys`. Bad content is a [`TopologyError`]
//! naming the file.

mod discover;
mod parse;

pub use discover::sysfs_root;
pub use parse::{CpuList, PciAddress};

use std::path::{Path, PathBuf};

/// One EFA device and where it sits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicTopology {
    /// Device name (`efa_0`, `rdmap79s0`, ...), as `ibv_get_device_name` gives it.
    pub name: String,
    /// Its PCI function.
    pub pci: PciAddress,
    /// PCI functions from the host bridge down to the device: root port, switch ports,
    /// the device itself (last).
    pub pci_path: Vec<PciAddress>,
    /// NUMA node of the device (`None`: the kernel reports -1, no affinity).
    pub numa_node: Option<u32>,
    /// CPUs local to the device.
    pub local_cpus: CpuList,
    /// Link speed of port 1 in Gb/s.
    pub link_gbps: u32,
    /// Port 1 hardware counters (`hw_counters`) at discovery, sorted by name.
    pub counters: Vec<(String, u64)>,
}

/// How close a device is to a PCI function (a GPU), nearest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Proximity {
    /// Behind the same PCIe bridge(s) (switch or root port): traffic stays off the CPU.
    PciBridge,
    /// On the same NUMA node, through the CPU's root complex.
    NumaNode,
    /// Across NUMA nodes (or unknown).
    Remote,
}

impl NicTopology {
    /// How close this device is to `at`.
    pub fn proximity(&self, at: &PciLocation) -> Proximity {
        if self.shared_pci_bridges(at) > 0 {
            Proximity::PciBridge
        } else if at.numa_node.is_some() && self.numa_node == at.numa_node {
            Proximity::NumaNode
        } else {
            Proximity::Remote
        }
    }

    /// PCI functions this device's path shares with `at`'s, from the host bridge down.
    pub fn shared_pci_bridges(&self, at: &PciLocation) -> usize {
        self.pci_path
            .iter()
            .zip(&at.pci_path)
            .take_while(|(a, b)| a == b)
            .count()
    }

    /// The counter `name` at discovery.
    pub fn counter(&self, name: &str) -> Option<u64> {
        self.counters
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }
}

/// A NUMA node and its CPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumaNode {
    /// Node number.
    pub id: u32,
    /// Its CPUs.
    pub cpus: CpuList,
}

/// Where any PCI function (a GPU) sits: its PCI path and NUMA node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PciLocation {
    /// PCI functions from the host bridge down to the function itself (last).
    pub pci_path: Vec<PciAddress>,
    /// Its NUMA node (`None`: unknown or -1).
    pub numa_node: Option<u32>,
}

/// The EFA devices of a machine and its NUMA nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// The EFA devices, sorted by name.
    pub devices: Vec<NicTopology>,
    /// The NUMA nodes, by number.
    pub numa_nodes: Vec<NumaNode>,
    /// The sysfs root it was read from (`None`: built by hand).
    sysfs_root: Option<PathBuf>,
}

/// Why the topology could not be read: the file, and what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyError {
    /// The file or link that was missing or malformed.
    pub path: PathBuf,
    /// What was wrong.
    pub kind: TopologyErrorKind,
}

/// What was wrong with a sysfs file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopologyErrorKind {
    /// It does not exist.
    Missing,
    /// It could not be read (or a link not resolved).
    Unreadable(std::io::ErrorKind),
    /// Its content is not what the kernel writes there.
    Malformed {
        /// The content (trimmed, at most 64 bytes).
        content: String,
        /// What was expected.
        expected: &'static str,
    },
}

impl std::fmt::Display for TopologyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = self.path.display();
        match &self.kind {
            TopologyErrorKind::Missing => write!(f, "{p}: missing"),
            TopologyErrorKind::Unreadable(k) => write!(f, "{p}: cannot read ({k})"),
            TopologyErrorKind::Malformed { content, expected } => {
                write!(f, "{p}: `{content}` is not {expected}")
            }
        }
    }
}

impl std::error::Error for TopologyError {}

impl Topology {
    /// A topology built by hand (tests, or a machine described elsewhere); devices are
    /// sorted by name and nodes by number.
    pub fn new(mut devices: Vec<NicTopology>, mut numa_nodes: Vec<NumaNode>) -> Topology {
        devices.sort_by_key(|d| natural_key(&d.name));
        numa_nodes.sort_by_key(|n| n.id);
        Topology {
            devices,
            numa_nodes,
            sysfs_root: None,
        }
    }

    /// Reads the topology below [`sysfs_root`] (`$SYSFS_PATH`, else `/sys`). A machine
    /// without RDMA devices has an empty device list.
    pub fn discover() -> Result<Topology, TopologyError> {
        Topology::from_sysfs(&sysfs_root())
    }

    /// Reads the topology below the sysfs root `root`.
    pub fn from_sysfs(root: &Path) -> Result<Topology, TopologyError> {
        let mut t = Topology::new(discover::devices(root)?, discover::numa_nodes(root)?);
        t.sysfs_root = Some(root.to_path_buf());
        Ok(t)
    }

    /// The sysfs root this topology was read from (`None` when built by hand).
    pub fn sysfs_root(&self) -> Option<&Path> {
        self.sysfs_root.as_deref()
    }

    /// The device named `name`.
    pub fn device(&self, name: &str) -> Option<&NicTopology> {
        self.devices.iter().find(|d| d.name == name)
    }

    /// Where PCI function `pci` (a GPU) sits, read from the same sysfs root; `None` for
    /// a topology built by hand or a function sysfs does not show.
    pub fn locate(&self, pci: PciAddress) -> Result<Option<PciLocation>, TopologyError> {
        match &self.sysfs_root {
            Some(root) => discover::locate(root, pci),
            None => Ok(None),
        }
    }

    /// The devices nearest to `at`: those sharing the longest part of its PCIe path
    /// (behind the same switch), and among them those on its NUMA node. With nothing in
    /// common with any device, every device on its NUMA node; with no NUMA node either,
    /// every device. Sorted by name.
    pub fn nearest(&self, at: &PciLocation) -> Vec<&NicTopology> {
        let score = |d: &NicTopology| {
            let same_node = at.numa_node.is_some() && d.numa_node == at.numa_node;
            (d.shared_pci_bridges(at), same_node)
        };
        let best = self.devices.iter().map(score).max();
        self.devices
            .iter()
            .filter(|d| Some(score(d)) == best)
            .collect()
    }

    /// The devices on NUMA node `node`.
    pub fn on_numa_node(&self, node: u32) -> Vec<&NicTopology> {
        self.devices
            .iter()
            .filter(|d| d.numa_node == Some(node))
            .collect()
    }

    /// Device `name`'s port counters now (re-read from sysfs; sorted by name).
    pub fn read_counters(&self, name: &str) -> Result<Vec<(String, u64)>, TopologyError> {
        let root = self.sysfs_root.as_deref().ok_or_else(|| TopologyError {
            path: PathBuf::from(format!("class/infiniband/{name}")),
            kind: TopologyErrorKind::Missing,
        })?;
        discover::counters(&root.join("class/infiniband").join(name))
    }
}

/// Sort key that puts `efa_2` before `efa_10`.
fn natural_key(name: &str) -> (String, u64) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (stem, num) = name.split_at(name.len() - digits);
    (stem.to_string(), num.parse().unwrap_or(0))
}

#[cfg(test)]
mod tests;
