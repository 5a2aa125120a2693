//! The topology section: NUMA nodes, EFA devices (PCI address, NUMA node, link speed),
//! GPUs with their nearest devices, a devices × GPUs matrix of how close each pair is,
//! and each device's hardware counters.

use std::fmt::Write as _;

use efa::cuda::{Driver, Error as CudaError, GpuTopology, InstanceTopology};
use efa::{PciLocation, Proximity, Topology};
use serde_json::{json, Value};

/// What was learnt of the machine's topology (each part may have failed on its own).
pub struct TopologyReport {
    /// The EFA devices and NUMA nodes, from sysfs.
    pub nics: Result<Topology, String>,
    /// The GPUs; an error when the CUDA driver could not be asked (none is not an error).
    pub gpus: Result<Vec<GpuTopology>, String>,
}

/// Reads sysfs and asks the CUDA driver (if one loads) for its GPUs.
pub fn collect() -> TopologyReport {
    let nics = Topology::discover().map_err(|e| e.to_string());
    let gpus = match &nics {
        Err(_) => Ok(Vec::new()),
        Ok(t) => gpus(t.clone()),
    };
    TopologyReport { nics, gpus }
}

fn gpus(nics: Topology) -> Result<Vec<GpuTopology>, String> {
    let driver = Driver::get().map_err(|e| e.to_string())?;
    let count = match driver.device_count() {
        Ok(n) => n,
        Err(CudaError::NoDevice) => 0,
        Err(e) => return Err(e.to_string()),
    };
    let pcis = (0..count)
        .map(|i| driver.device(i).and_then(|d| d.pci_address()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    InstanceTopology::from_parts(nics, &pcis)
        .map(|t| t.gpus)
        .map_err(|e| e.to_string())
}

/// How a devices × GPUs matrix cell reads (as `nvidia-smi topo -m` names the same).
fn cell(p: Proximity) -> &'static str {
    match p {
        Proximity::PciBridge => "PIX",
        Proximity::NumaNode => "NODE",
        Proximity::Remote => "SYS",
    }
}

fn node(n: Option<u32>) -> String {
    n.map_or("-".into(), |n| n.to_string())
}

fn location(g: &GpuTopology) -> PciLocation {
    g.location.clone().unwrap_or(PciLocation {
        pci_path: vec![g.pci],
        numa_node: None,
    })
}

impl TopologyReport {
    /// The section as text.
    pub fn text(&self) -> String {
        let mut o = String::from("topology\n");
        let t = match &self.nics {
            Ok(t) => t,
            Err(e) => {
                let _ = writeln!(o, "  cannot read sysfs: {e}");
                return o;
            }
        };
        if let Some(root) = t.sysfs_root() {
            let _ = writeln!(o, "  sysfs: {}", root.display());
        }
        if t.devices.is_empty() {
            let root = t
                .sysfs_root()
                .map_or(String::new(), |r| r.display().to_string());
            let _ = writeln!(
                o,
                "  no EFA devices under {root}/class/infiniband (efa-sim run sets SYSFS_PATH to its tree)"
            );
        }
        for n in &t.numa_nodes {
            let _ = writeln!(o, "  NUMA node {}: CPUs {}", n.id, n.cpus);
        }
        for d in &t.devices {
            let _ = writeln!(
                o,
                "  {:<10} {}  NUMA {:<2} {} Gb/s  CPUs {}",
                d.name,
                d.pci,
                node(d.numa_node),
                d.link_gbps,
                d.local_cpus
            );
        }
        let gpus = match &self.gpus {
            Ok(g) => g.as_slice(),
            Err(e) => {
                let _ = writeln!(o, "  GPUs: none known ({e})");
                &[]
            }
        };
        for g in gpus {
            let _ = writeln!(
                o,
                "  GPU {:<6} {}  NUMA {:<2} nearest: {}",
                g.ordinal,
                g.pci,
                node(g.numa_node()),
                g.nearest.join(" ")
            );
        }
        if !gpus.is_empty() && !t.devices.is_empty() {
            let _ = write!(o, "  {:<10}", "");
            for g in gpus {
                let _ = write!(o, " GPU{:<3}", g.ordinal);
            }
            o.push('\n');
            for d in &t.devices {
                let _ = write!(o, "  {:<10}", d.name);
                for g in gpus {
                    let _ = write!(o, " {:<6}", cell(d.proximity(&location(g))));
                }
                o.push('\n');
            }
            o += "  (PIX: same PCIe switch, NODE: same NUMA node, SYS: across NUMA nodes)\n";
        }
        // Counters that moved (all of them are in --json).
        for d in &t.devices {
            let moved: Vec<String> = d
                .counters
                .iter()
                .filter(|(_, v)| *v != 0)
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let shown = if moved.is_empty() {
                format!("all {} zero", d.counters.len())
            } else {
                moved.join(" ")
            };
            let _ = writeln!(o, "  counters {}: {shown}", d.name);
        }
        o
    }

    /// The section as JSON.
    pub fn to_json(&self) -> Value {
        let t = match &self.nics {
            Ok(t) => t,
            Err(e) => return json!({ "error": e }),
        };
        let devices: Vec<Value> = t
            .devices
            .iter()
            .map(|d| {
                json!({
                    "name": d.name,
                    "pci": d.pci.to_string(),
                    "pci_path": d.pci_path.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
                    "numa_node": d.numa_node,
                    "local_cpus": d.local_cpus.to_string(),
                    "link_gbps": d.link_gbps,
                    "counters": d.counters.iter()
                        .map(|(k, v)| (k.clone(), json!(v)))
                        .collect::<serde_json::Map<_, _>>(),
                })
            })
            .collect();
        let gpus = match &self.gpus {
            Ok(g) => json!(g
                .iter()
                .map(|g| json!({
                    "ordinal": g.ordinal,
                    "pci": g.pci.to_string(),
                    "numa_node": g.numa_node(),
                    "nearest": g.nearest,
                    "proximity": t.devices.iter()
                        .map(|d| (d.name.clone(), json!(cell(d.proximity(&location(g))))))
                        .collect::<serde_json::Map<_, _>>(),
                }))
                .collect::<Vec<_>>()),
            Err(e) => json!({ "error": e }),
        };
        json!({
            "sysfs": t.sysfs_root().map(|r| r.display().to_string()),
            "numa_nodes": t.numa_nodes.iter()
                .map(|n| json!({ "id": n.id, "cpus": n.cpus.to_string() }))
                .collect::<Vec<_>>(),
            "devices": devices,
            "gpus": gpus,
        })
    }
}
