//! Completion counters: where their values live (`EFA_1.7`).

/// `efadv_memory_location.type`: the memory is a virtual address (`ptr`).
pub const EFADV_MEMORY_LOCATION_VA: u8 = 0;
/// `efadv_memory_location.type`: the memory is a dmabuf (`dmabuf`).
pub const EFADV_MEMORY_LOCATION_DMABUF: u8 = 1;

/// The anonymous `dmabuf` member of `struct efadv_memory_location`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct efadv_memory_location_dmabuf {
    /// Offset inside the dmabuf.
    pub offset: u64,
    /// dmabuf file descriptor.
    pub fd: i32,
    /// Reserved, must be 0.
    pub reserved: u32,
}
assert_layout!(
    efadv_memory_location_dmabuf,
    size = 16,
    align = 8,
    offset = 0,
    fd = 8,
    reserved = 12
);

/// `struct efadv_memory_location`: where a completion counter lives.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct efadv_memory_location {
    /// Virtual address (with [`EFADV_MEMORY_LOCATION_VA`]).
    pub ptr: *mut u8,
    /// dmabuf location (with [`EFADV_MEMORY_LOCATION_DMABUF`]).
    pub dmabuf: efadv_memory_location_dmabuf,
    /// `EFADV_MEMORY_LOCATION_*` (the C field is named `type`).
    pub type_: u8,
    /// Reserved, must be 0.
    pub reserved: [u8; 7],
}
assert_layout!(
    efadv_memory_location,
    size = 32,
    align = 8,
    ptr = 0,
    dmabuf = 8,
    type_ = 24,
    reserved = 25
);

impl Default for efadv_memory_location {
    fn default() -> Self {
        Self {
            ptr: core::ptr::null_mut(),
            dmabuf: efadv_memory_location_dmabuf::default(),
            type_: 0,
            reserved: [0; 7],
        }
    }
}

/// `efadv_comp_cntr_init_attr.flags` bit: the completion count lives in `comp_cntr_ext_mem`.
pub const EFADV_COMP_CNTR_INIT_WITH_COMP_EXTERNAL_MEM: u32 = 1 << 0;
/// `efadv_comp_cntr_init_attr.flags` bit: the error count lives in `err_cntr_ext_mem`.
pub const EFADV_COMP_CNTR_INIT_WITH_ERR_EXTERNAL_MEM: u32 = 1 << 1;

/// `struct efadv_comp_cntr_init_attr`: EFA-specific input of [`efadv_create_comp_cntr`](super::efadv_create_comp_cntr).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct efadv_comp_cntr_init_attr {
    /// Compatibility mask; must be 0.
    pub comp_mask: u64,
    /// Bitmask of `EFADV_COMP_CNTR_INIT_WITH_*`.
    pub flags: u32,
    /// Reserved, must be 0.
    pub reserved: u32,
    /// External memory of the completion count.
    pub comp_cntr_ext_mem: efadv_memory_location,
    /// External memory of the error count.
    pub err_cntr_ext_mem: efadv_memory_location,
}
assert_layout!(
    efadv_comp_cntr_init_attr,
    size = 80,
    align = 8,
    comp_mask = 0,
    flags = 8,
    reserved = 12,
    comp_cntr_ext_mem = 16,
    err_cntr_ext_mem = 48
);
