//! rdma-core's provider-private node, `IBVERBS_PRIVATE_34` (rdma-core 44, the system's):
//! the interface provider libraries such as Debian's `libmlx5.so.1` link against. A
//! program that links a provider library directly (or a Python module that imports one)
//! needs every symbol of the node to load, even with `LD_BIND_NOW=1`.
//!
//! efa-sim's devices are not driven through this interface, and no other device is ever
//! listed, so a provider never gets a device to call these for. Each still answers
//! cleanly if called: `verbs_register_driver_34` (called by every provider's constructor
//! at load time) and the other `void` functions do nothing; the `ibv_cmd_*` commands and
//! `execute_ioctl` fail with EOPNOTSUPP (`ibv_cmd_poll_cq`: -1, the post commands also
//! point `*bad_wr` at the first WR); creators return NULL with `errno = EOPNOTSUPP`.
//! `ibv_query_gid_type` gets a real answer, in [`super::query`].

use super::set_errno;
use super::stubs::{op_int, op_ptr, op_void};
use core::ffi::{c_int, c_uint, c_void};
use libc::EOPNOTSUPP;

/// `ibv_cmd_poll_cq`: -1 (an error, not a count), `errno = EOPNOTSUPP`.
unsafe extern "C" fn cmd_poll_cq() -> c_int {
    set_errno(EOPNOTSUPP);
    -1
}

/// `ibv_cmd_post_send/post_recv/post_srq_recv(obj, wr, bad_wr)`: EOPNOTSUPP with
/// `*bad_wr` = the first WR, as a failed post reports.
unsafe extern "C" fn cmd_post(
    _obj: *mut c_void,
    wr: *mut c_void,
    bad_wr: *mut *mut c_void,
) -> c_int {
    if !bad_wr.is_null() {
        // SAFETY: the post contract: `bad_wr` is NULL or a writable WR pointer slot.
        unsafe { *bad_wr = wr };
    }
    EOPNOTSUPP
}

/// `__ioctl_final_num_attrs(num_attrs, link)`: no command buffers are ever linked here,
/// so the count is the one given.
unsafe extern "C" fn ioctl_final_num_attrs(num_attrs: c_uint, _link: *mut c_void) -> c_uint {
    num_attrs
}

/// `ibv_read_ibdev_sysfs_file(buf, size, ibdev, fmt, ...)`: -1 (no such device).
unsafe extern "C" fn read_ibdev_sysfs_file() -> c_int {
    set_errno(libc::ENODEV);
    -1
}

export!("IBVERBS_PRIVATE_34", verbs_register_driver_34 => op_void);
export!("IBVERBS_PRIVATE_34", verbs_set_ops => op_void);
export!("IBVERBS_PRIVATE_34", verbs_uninit_context => op_void);
export!("IBVERBS_PRIVATE_34", verbs_init_cq => op_void);
export!("IBVERBS_PRIVATE_34", __verbs_log => op_void);
export!("IBVERBS_PRIVATE_34", _verbs_init_and_alloc_context => op_ptr);
export!("IBVERBS_PRIVATE_34", verbs_open_device => op_ptr);
export!("IBVERBS_PRIVATE_34", __ioctl_final_num_attrs => ioctl_final_num_attrs);
export!("IBVERBS_PRIVATE_34", execute_ioctl => op_int);
export!("IBVERBS_PRIVATE_34", ibv_read_ibdev_sysfs_file => read_ibdev_sysfs_file);
export!("IBVERBS_PRIVATE_34", ibv_cmd_poll_cq => cmd_poll_cq);
export!("IBVERBS_PRIVATE_34", ibv_cmd_post_send => cmd_post);
export!("IBVERBS_PRIVATE_34", ibv_cmd_post_recv => cmd_post);
export!("IBVERBS_PRIVATE_34", ibv_cmd_post_srq_recv => cmd_post);
export_data!("IBVERBS_PRIVATE_34", verbs_allow_disassociate_destroy, 1);

/// The `ibv_cmd_*` commands that return an errno: EOPNOTSUPP.
macro_rules! cmd_stubs {
    ($($name:ident),* $(,)?) => {
        $(export!("IBVERBS_PRIVATE_34", $name => op_int);)*
    };
}

cmd_stubs!(
    ibv_cmd_advise_mr,
    ibv_cmd_alloc_dm,
    ibv_cmd_alloc_mw,
    ibv_cmd_alloc_pd,
    ibv_cmd_attach_mcast,
    ibv_cmd_close_xrcd,
    ibv_cmd_create_ah,
    ibv_cmd_create_counters,
    ibv_cmd_create_cq,
    ibv_cmd_create_cq_ex,
    ibv_cmd_create_flow,
    ibv_cmd_create_flow_action_esp,
    ibv_cmd_create_qp,
    ibv_cmd_create_qp_ex,
    ibv_cmd_create_qp_ex2,
    ibv_cmd_create_rwq_ind_table,
    ibv_cmd_create_srq,
    ibv_cmd_create_srq_ex,
    ibv_cmd_create_wq,
    ibv_cmd_dealloc_mw,
    ibv_cmd_dealloc_pd,
    ibv_cmd_dereg_mr,
    ibv_cmd_destroy_ah,
    ibv_cmd_destroy_counters,
    ibv_cmd_destroy_cq,
    ibv_cmd_destroy_flow,
    ibv_cmd_destroy_flow_action,
    ibv_cmd_destroy_qp,
    ibv_cmd_destroy_rwq_ind_table,
    ibv_cmd_destroy_srq,
    ibv_cmd_destroy_wq,
    ibv_cmd_detach_mcast,
    ibv_cmd_free_dm,
    ibv_cmd_get_context,
    ibv_cmd_modify_cq,
    ibv_cmd_modify_flow_action_esp,
    ibv_cmd_modify_qp,
    ibv_cmd_modify_qp_ex,
    ibv_cmd_modify_srq,
    ibv_cmd_modify_wq,
    ibv_cmd_open_qp,
    ibv_cmd_open_xrcd,
    ibv_cmd_query_context,
    ibv_cmd_query_device_any,
    ibv_cmd_query_mr,
    ibv_cmd_query_port,
    ibv_cmd_query_qp,
    ibv_cmd_query_srq,
    ibv_cmd_read_counters,
    ibv_cmd_reg_dm_mr,
    ibv_cmd_reg_dmabuf_mr,
    ibv_cmd_reg_mr,
    ibv_cmd_req_notify_cq,
    ibv_cmd_rereg_mr,
    ibv_cmd_resize_cq,
);
