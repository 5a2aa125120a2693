//! Instance shapes (`EFA_SIM_SHAPE`): how many EFA devices an EC2 instance type has, their
//! link speed, and where they sit — PCIe switches shared with GPUs, NUMA nodes and the
//! CPUs local to each — so that topology discovery can be tested against each shape's
//! sysfs tree (see [`crate::sysfs`]).
//!
//! # Sources and assumptions
//!
//! * Devices per instance and per GPU, link speed: AWS EC2 accelerated-computing instance
//!   specifications (p5/p5e: 32 × 100 Gb/s, 4 per GPU; p5en: 16 × 200 Gb/s, 2 per GPU;
//!   p6-b200: 8 × 400 Gb/s, 1 per GPU), as also quoted by the engines in
//!   `shared/reference/field-engines.md` ("Instance shapes").
//! * 8 GPUs and 192 vCPUs on two sockets for all three: the same AWS specification pages.
//! * **Assumption (modelled):** each GPU shares one PCIe switch with its EFA devices (what
//!   the engines' nearest-NIC selection by PCIe distance relies on: UCCL
//!   `efa_device_selection.h`, pplx-garden `topo.rs`); GPUs 0–3 on NUMA node 0, 4–7 on
//!   node 1; Linux's CPU numbering with SMT siblings in the upper half (node 0 =
//!   `0-47,96-143`). Exact bus numbers of real instances are not published: the layout
//!   gives GPU `i` the bus `0x53 + 0x11·i` under its own host bridge, root port and
//!   switch, and its NICs the buses after it. Device names stay `efa_N` (real instances
//!   show udev names such as `rdmap79s0`).
//! * `2nic` is not an EC2 shape: two NUMA nodes of four CPUs, each with one GPU and one
//!   100 Gb/s NIC on one switch — small enough for any test.

/// Known shapes, in the order error messages list them.
pub const SHAPES: &[Shape] = &[P5, P5EN, P6_B200, TWO_NIC];

/// One instance type's devices and their placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// `EFA_SIM_SHAPE` value (the EC2 instance type name).
    pub name: &'static str,
    /// GPUs, one per PCIe switch (switch `i` holds GPU `i`).
    pub gpus: u32,
    /// EFA devices per GPU (per switch); devices of switch `i` are
    /// `efa_{i*nics_per_gpu} ..`.
    pub nics_per_gpu: u32,
    /// Link speed of every device, Gb/s.
    pub link_gbps: u32,
    /// NUMA nodes; switches are spread over them in order (the first half on node 0).
    pub numa_nodes: u32,
    /// Physical cores per NUMA node (logical CPUs are twice this with SMT).
    pub cores_per_node: u32,
    /// Whether CPUs have an SMT sibling numbered `cores_per_node * numa_nodes` higher.
    pub smt: bool,
    /// Bus of GPU 0; switch `i`'s buses start `bus_stride * i` later.
    pub first_gpu_bus: u8,
    /// Bus numbers between switches.
    pub bus_stride: u8,
}

/// p5.48xlarge (and p5e): 8 H100, 32 EFA devices of 100 Gb/s, 4 per GPU.
pub const P5: Shape = Shape {
    name: "p5.48xlarge",
    gpus: 8,
    nics_per_gpu: 4,
    link_gbps: 100,
    numa_nodes: 2,
    cores_per_node: 48,
    smt: true,
    first_gpu_bus: 0x53,
    bus_stride: 0x11,
};

/// p5en.48xlarge: 8 H200, 16 EFA devices of 200 Gb/s, 2 per GPU.
pub const P5EN: Shape = Shape {
    name: "p5en.48xlarge",
    nics_per_gpu: 2,
    link_gbps: 200,
    ..P5
};

/// p6-b200.48xlarge: 8 B200, 8 EFA devices of 400 Gb/s, 1 per GPU.
pub const P6_B200: Shape = Shape {
    name: "p6-b200.48xlarge",
    nics_per_gpu: 1,
    link_gbps: 400,
    ..P5
};

/// A small test shape: 2 NUMA nodes of 4 CPUs (no SMT), each with one GPU and one NIC.
pub const TWO_NIC: Shape = Shape {
    name: "2nic",
    gpus: 2,
    nics_per_gpu: 1,
    link_gbps: 100,
    numa_nodes: 2,
    cores_per_node: 4,
    smt: false,
    first_gpu_bus: 0x10,
    bus_stride: 0x10,
};

/// A PCI function address `DDDD:BB:DD.F` (domain 0 throughout).
pub fn bdf(bus: u8, device: u8) -> String {
    format!("0000:{bus:02x}:{device:02x}.0")
}

impl Shape {
    /// The shape named `name`, or an error listing the known names.
    pub fn by_name(name: &str) -> Result<&'static Shape, String> {
        SHAPES
            .iter()
            .find(|s| s.name == name.trim())
            .ok_or_else(|| {
                let known: Vec<&str> = SHAPES.iter().map(|s| s.name).collect();
                format!("one of {}", known.join(", "))
            })
    }

    /// EFA devices of the instance.
    pub fn devices(&self) -> u32 {
        self.gpus * self.nics_per_gpu
    }

    /// The switch (= GPU index) device `efa_index` sits under.
    pub fn switch_of_device(&self, index: u32) -> u32 {
        index / self.nics_per_gpu
    }

    /// NUMA node of switch `switch`.
    pub fn numa_of_switch(&self, switch: u32) -> u32 {
        switch * self.numa_nodes / self.gpus
    }

    /// First bus of switch `switch`: its host bridge's root bus.
    fn base_bus(&self, switch: u32) -> u8 {
        // The GPU is three buses below the root: root port, switch upstream, downstream.
        self.first_gpu_bus - 3 + (self.bus_stride as u32 * switch) as u8
    }

    /// The PCI path from the host bridge to the endpoint at `slot` of switch `switch`
    /// (slot 0: the GPU, slot 1 + k: its k-th NIC): root port, switch upstream port,
    /// switch downstream port, endpoint.
    pub fn pci_path(&self, switch: u32, slot: u32) -> [String; 4] {
        let b = self.base_bus(switch);
        [
            bdf(b, 1),
            bdf(b + 1, 0),
            bdf(b + 2, slot as u8),
            bdf(b + 3 + slot as u8, 0),
        ]
    }

    /// `pci0000:BB`, the host bridge directory of switch `switch`.
    pub fn host_bridge(&self, switch: u32) -> String {
        format!("pci0000:{:02x}", self.base_bus(switch))
    }

    /// PCI address of GPU `gpu`.
    pub fn gpu_address(&self, gpu: u32) -> String {
        self.pci_path(gpu, 0)[3].clone()
    }

    /// PCI address of device `efa_index`.
    pub fn device_address(&self, index: u32) -> String {
        let switch = self.switch_of_device(index);
        self.pci_path(switch, 1 + index % self.nics_per_gpu)[3].clone()
    }

    /// Logical CPUs of NUMA node `node` as the kernel lists them (`0-47,96-143`).
    pub fn cpulist(&self, node: u32) -> String {
        let n = self.cores_per_node;
        let first = node * n;
        let mut list = format!("{}-{}", first, first + n - 1);
        if self.smt {
            let sibling = first + n * self.numa_nodes;
            list += &format!(",{}-{}", sibling, sibling + n - 1);
        }
        list
    }

    /// Logical CPUs of the instance.
    pub fn cpus(&self) -> u32 {
        self.cores_per_node * self.numa_nodes * if self.smt { 2 } else { 1 }
    }

    /// `local_cpus` of a PCI function on node `node`: the kernel's hex mask, 32-bit words
    /// separated by commas, most significant first.
    pub fn cpumask(&self, node: u32) -> String {
        let words = self.cpus().div_ceil(32) as usize;
        let mut mask = vec![0u32; words];
        for cpu in 0..self.cpus() {
            let core = cpu % (self.cores_per_node * self.numa_nodes);
            if core / self.cores_per_node == node {
                mask[(cpu / 32) as usize] |= 1 << (cpu % 32);
            }
        }
        let parts: Vec<String> = mask.iter().rev().map(|w| format!("{w:08x}")).collect();
        parts.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_has_the_documented_devices() {
        let counts: Vec<(u32, u32)> = SHAPES.iter().map(|s| (s.devices(), s.link_gbps)).collect();
        assert_eq!(counts, [(32, 100), (16, 200), (8, 400), (2, 100)]);
        assert_eq!(P5.gpu_address(0), "0000:53:00.0");
        assert_eq!(P5.gpu_address(7), "0000:ca:00.0");
        assert_eq!(P5.device_address(0), "0000:54:00.0");
        assert_eq!(P5.device_address(31), "0000:ce:00.0");
        assert_eq!(P5.cpulist(1), "48-95,144-191");
        assert_eq!(TWO_NIC.cpulist(1), "4-7");
        assert_eq!(TWO_NIC.cpumask(1), "000000f0");
        assert_eq!(P5.cpumask(0).len(), 6 * 8 + 5);
    }

    #[test]
    fn addresses_are_distinct_within_a_shape() {
        for s in SHAPES {
            let mut all: Vec<String> = (0..s.gpus).map(|g| s.gpu_address(g)).collect();
            all.extend((0..s.devices()).map(|d| s.device_address(d)));
            let n = all.len();
            all.sort();
            all.dedup();
            assert_eq!(all.len(), n, "{}", s.name);
        }
    }

    #[test]
    fn unknown_names_list_the_known_ones() {
        let e = Shape::by_name("p4d.24xlarge").unwrap_err();
        assert!(e.contains("p5.48xlarge") && e.contains("2nic"), "{e}");
        assert_eq!(Shape::by_name(" p5en.48xlarge ").unwrap().devices(), 16);
    }
}
