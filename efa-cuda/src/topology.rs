//! GPUs and the EFA devices nearest to them, as one query a program makes at start-up.
//!
//! Each GPU's PCI address comes from the driver (`CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID`,
//! `_BUS_ID`, `_DEVICE_ID`); where it sits comes from sysfs (`bus/pci/devices/<address>`
//! below `$SYSFS_PATH` or `/sys`, as for the EFA devices); its nearest devices are
//! `efa_typestate::Topology::nearest`'s: those behind the same PCIe switch, then those on
//! its NUMA node.

use crate::driver::Driver;
use crate::error::Result;
use efa_typestate::{PciAddress, PciLocation, Topology};

/// One GPU and the EFA devices nearest to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuTopology {
    /// CUDA device ordinal.
    pub ordinal: i32,
    /// Its PCI address.
    pub pci: PciAddress,
    /// Where sysfs shows it (`None`: sysfs does not show this PCI function).
    pub location: Option<PciLocation>,
    /// Names of the nearest EFA devices, sorted (every device when nothing is known of
    /// where the GPU sits).
    pub nearest: Vec<String>,
}

impl GpuTopology {
    /// Its NUMA node, when sysfs knows it.
    pub fn numa_node(&self) -> Option<u32> {
        self.location.as_ref().and_then(|l| l.numa_node)
    }
}

/// The EFA devices and GPUs of this machine and which are near which.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceTopology {
    /// The EFA devices and NUMA nodes.
    pub nics: Topology,
    /// The GPUs, by ordinal.
    pub gpus: Vec<GpuTopology>,
}

impl InstanceTopology {
    /// Reads the EFA devices from sysfs and asks the process-wide driver for every GPU.
    pub fn discover() -> Result<InstanceTopology> {
        let nics = Topology::discover()?;
        let driver = Driver::get()?;
        let count = driver.device_count()?;
        let pcis = (0..count)
            .map(|i| driver.device(i)?.pci_address())
            .collect::<Result<Vec<_>>>()?;
        InstanceTopology::from_parts(nics, &pcis)
    }

    /// The topology of `nics` with GPUs at `gpu_pcis` (ordinal = index), each located in
    /// `nics`' sysfs root (a topology built by hand locates none).
    pub fn from_parts(nics: Topology, gpu_pcis: &[PciAddress]) -> Result<InstanceTopology> {
        let mut gpus = Vec::with_capacity(gpu_pcis.len());
        for (ordinal, &pci) in gpu_pcis.iter().enumerate() {
            let location = nics.locate(pci)?;
            let at = location.clone().unwrap_or(PciLocation {
                pci_path: vec![pci],
                numa_node: None,
            });
            let nearest = nics.nearest(&at).iter().map(|d| d.name.clone()).collect();
            gpus.push(GpuTopology {
                ordinal: ordinal as i32,
                pci,
                location,
                nearest,
            });
        }
        Ok(InstanceTopology { nics, gpus })
    }

    /// Names of the EFA devices nearest to GPU `ordinal` (empty for an unknown ordinal).
    pub fn nearest_devices(&self, ordinal: i32) -> &[String] {
        self.gpus
            .iter()
            .find(|g| g.ordinal == ordinal)
            .map_or(&[], |g| &g.nearest)
    }
}
