"""efa: AWS EFA (SRD RDMA) from Python, on the efa-rs Rust core.

The API of the ``efa`` package (handles, work requests, enums, endpoint exchange and
tensor helpers), with the Rust crate's checks: a bad argument raises what the package
raises, other misuse :class:`EfaError`; nothing crashes. ``efa.cuda`` (GPUDirect helpers) is imported explicitly, so that ``import efa``
never loads libcuda.
"""

from __future__ import annotations

from ._efa import (
    AH,
    AHAttr,
    AsyncEvent,
    CompChannel,
    CompletionError,
    Context,
    CQ,
    CQAttr,
    CQEx,
    Device,
    DeviceAttr,
    EfaDeviceAttr,
    EfaError,
    get_device_list,
    get_efa_device_list,
    Gid,
    MR,
    MRAttr,
    PD,
    PortAttr,
    QP,
    QPCap,
    QPInitAttr,
    RecvWR,
    SendWR,
    SGE,
    WC,
    WQAttr,
)
from .enums import (
    AccessFlags,
    CreateCQWCFlags,
    EfaDeviceCaps,
    MTU,
    PortState,
    QPAttrMask,
    QPExSendOpsFlags,
    QPState,
    QPType,
    SendFlags,
    WCFlags,
    WCOpcode,
    WCStatus,
    WROpcode,
)
from .helpers import (
    EndpointInfo,
    local_endpoint_info,
    Peer,
    read_wrs,
    reg_tensor,
    tensor_addr_len,
    write_wrs,
)
from ._efa import poll_into, post_array  # the array API (README: "Posting from arrays")

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "AH", "AHAttr", "AsyncEvent", "CompChannel", "CompletionError", "Context", "CQ",
    "CQAttr", "CQEx", "Device", "DeviceAttr", "EfaDeviceAttr", "EfaError", "Gid", "MR",
    "MRAttr", "PD", "PortAttr", "QP", "QPCap", "QPInitAttr", "RecvWR", "SendWR", "SGE",
    "WC", "WQAttr", "get_device_list", "get_efa_device_list",
    "AccessFlags", "CreateCQWCFlags", "EfaDeviceCaps", "MTU", "PortState", "QPAttrMask",
    "QPExSendOpsFlags", "QPState", "QPType", "SendFlags", "WCFlags", "WCOpcode",
    "WCStatus", "WROpcode",
    "EndpointInfo", "Peer", "local_endpoint_info", "read_wrs", "reg_tensor",
    "tensor_addr_len", "write_wrs",
    "poll_into", "post_array",
]
