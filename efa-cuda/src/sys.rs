//! The CUDA driver ABI this crate uses (x86_64/aarch64 Linux, `cuda.h` 11.7-13.5): scalar
//! types, the enum values it passes, and the VMM structs with their layouts pinned.
//!
//! Hand-written from the header's documented values (they are stable across versions);
//! only what the crate calls is here.
#![allow(non_camel_case_types)]

use core::ffi::{c_int, c_void};

/// `CUresult`: 0 on success, an error code otherwise.
pub type CUresult = c_int;
/// `CUdevice`: a device ordinal handle.
pub type CUdevice = c_int;
/// `CUdeviceptr`: a 64-bit device address (the `_v2` ABI).
pub type CUdeviceptr = u64;
/// `CUcontext`: an opaque context pointer.
pub type CUcontext = *mut c_void;
/// `CUmemGenericAllocationHandle`: a VMM physical allocation.
pub type CUmemGenericAllocationHandle = u64;

/// `CUDA_SUCCESS`.
pub const CUDA_SUCCESS: CUresult = 0;
/// `CUDA_ERROR_INVALID_VALUE`.
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
/// `CUDA_ERROR_NOT_INITIALIZED`.
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
/// `CUDA_ERROR_NO_DEVICE`.
pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
/// `CUDA_ERROR_INVALID_CONTEXT`.
pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
/// `CUDA_ERROR_NOT_SUPPORTED`.
pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;

/// `CUdevice_attribute` values read by this crate.
pub mod attr {
    /// `CU_DEVICE_ATTRIBUTE_PCI_BUS_ID`.
    pub const PCI_BUS_ID: i32 = 33;
    /// `CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID`.
    pub const PCI_DEVICE_ID: i32 = 34;
    /// `CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID`.
    pub const PCI_DOMAIN_ID: i32 = 50;
    /// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR`.
    pub const COMPUTE_CAPABILITY_MAJOR: i32 = 75;
    /// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR`.
    pub const COMPUTE_CAPABILITY_MINOR: i32 = 76;
    /// `CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED`.
    pub const VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: i32 = 102;
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED`.
    pub const GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: i32 = 110;
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED`.
    pub const GPU_DIRECT_RDMA_SUPPORTED: i32 = 116;
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS` (bitmask).
    pub const GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS: i32 = 117;
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING` (0 / 100 / 200).
    pub const GPU_DIRECT_RDMA_WRITES_ORDERING: i32 = 118;
    /// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`.
    pub const DMA_BUF_SUPPORTED: i32 = 124;
}

/// `CUpointer_attribute` values read by this crate.
pub mod ptr_attr {
    /// `CU_POINTER_ATTRIBUTE_CONTEXT` (`CUcontext`).
    pub const CONTEXT: i32 = 1;
    /// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE` (`unsigned int`, [`super::CU_MEMORYTYPE_DEVICE`]).
    pub const MEMORY_TYPE: i32 = 2;
    /// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL` (`int`).
    pub const DEVICE_ORDINAL: i32 = 9;
    /// `CU_POINTER_ATTRIBUTE_RANGE_START_ADDR` (`CUdeviceptr`; the reservation for VMM).
    pub const RANGE_START_ADDR: i32 = 11;
    /// `CU_POINTER_ATTRIBUTE_RANGE_SIZE` (`size_t`; the reservation for VMM).
    pub const RANGE_SIZE: i32 = 12;
    /// `CU_POINTER_ATTRIBUTE_MAPPED` (boolean).
    pub const MAPPED: i32 = 13;
    /// `CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE` (`unsigned int`).
    pub const IS_GPU_DIRECT_RDMA_CAPABLE: i32 = 15;
}

/// `CU_MEMORYTYPE_HOST`.
pub const CU_MEMORYTYPE_HOST: u32 = 1;
/// `CU_MEMORYTYPE_DEVICE`.
pub const CU_MEMORYTYPE_DEVICE: u32 = 2;

/// `CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD`: the handle is an `int` file descriptor.
pub const CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD: c_int = 1;

/// `CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX` (the only target).
pub const CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX: c_int = 0;
/// `CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER`.
pub const CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER: c_int = 100;
/// `CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES`.
pub const CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES: c_int = 200;
/// `CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST`: `cuFlushGPUDirectRDMAWrites` works.
pub const CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST: i32 = 1;

/// `CU_MEM_ALLOCATION_TYPE_PINNED`.
pub const CU_MEM_ALLOCATION_TYPE_PINNED: c_int = 1;
/// `CU_MEM_LOCATION_TYPE_DEVICE`.
pub const CU_MEM_LOCATION_TYPE_DEVICE: c_int = 1;
/// `CU_MEM_HANDLE_TYPE_NONE`.
pub const CU_MEM_HANDLE_TYPE_NONE: c_int = 0;
/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
pub const CU_MEM_ACCESS_FLAGS_PROT_READWRITE: c_int = 3;
/// `CU_MEM_ALLOC_GRANULARITY_MINIMUM`.
pub const CU_MEM_ALLOC_GRANULARITY_MINIMUM: c_int = 0;
/// `CU_MEM_ALLOC_GRANULARITY_RECOMMENDED`.
pub const CU_MEM_ALLOC_GRANULARITY_RECOMMENDED: c_int = 1;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUmemLocation {
    /// `CUmemLocationType`.
    pub type_: c_int,
    /// Device ordinal for `CU_MEM_LOCATION_TYPE_DEVICE`.
    pub id: c_int,
}

/// `CUmemAllocationProp::allocFlags`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUmemAllocFlags {
    /// `compressionType`.
    pub compression_type: u8,
    /// `gpuDirectRDMACapable`: the allocation may be used with GPUDirect RDMA.
    pub gpu_direct_rdma_capable: u8,
    /// `usage`.
    pub usage: u16,
    /// `reserved[4]`.
    pub reserved: [u8; 4],
}

/// `CUmemAllocationProp`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUmemAllocationProp {
    /// `CUmemAllocationType`.
    pub type_: c_int,
    /// `CUmemAllocationHandleType` bitmask of shareable handle types.
    pub requested_handle_types: c_int,
    /// Where the memory lives.
    pub location: CUmemLocation,
    /// `win32HandleMetaData` (unused on Linux).
    pub win32_handle_meta_data: *mut c_void,
    /// `allocFlags`.
    pub alloc_flags: CUmemAllocFlags,
}

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUmemAccessDesc {
    /// Who gets access.
    pub location: CUmemLocation,
    /// `CUmemAccess_flags`.
    pub flags: c_int,
}

// Layouts checked with gcc against cuda.h 12.9 and 13.5 (cuda-gpudirect.md §1.3).
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(core::mem::size_of::<CUmemLocation>() == 8);
    assert!(core::mem::size_of::<CUmemAllocationProp>() == 32);
    assert!(core::mem::offset_of!(CUmemAllocationProp, location) == 8);
    assert!(core::mem::offset_of!(CUmemAllocationProp, win32_handle_meta_data) == 16);
    assert!(core::mem::offset_of!(CUmemAllocationProp, alloc_flags) == 24);
    assert!(core::mem::offset_of!(CUmemAllocFlags, gpu_direct_rdma_capable) == 1);
    assert!(core::mem::offset_of!(CUmemAllocFlags, usage) == 2);
    assert!(core::mem::size_of::<CUmemAccessDesc>() == 12);
    assert!(core::mem::offset_of!(CUmemAccessDesc, flags) == 8);
};
