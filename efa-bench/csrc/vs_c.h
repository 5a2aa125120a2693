/* The C side of efa-bench's vs_c benchmark: what a careful C program does on the data
 * path with rdma-core's inline helpers (ibv_wr_*, ibv_start_poll/ibv_next_poll/
 * ibv_end_poll, ibv_wc_read_*, ibv_poll_cq, ibv_post_recv). The Rust side (src/ffi.rs)
 * mirrors these declarations; the QPs, CQs, AHs and memory are the safe API's, passed
 * in as raw pointers, so both sides drive the same objects. */
#ifndef EFA_BENCH_VS_C_H
#define EFA_BENCH_VS_C_H

#include <stdint.h>
#include <infiniband/verbs.h>

/* Where sends go: an address handle, the remote QP number and qkey. */
struct vs_dest {
	struct ibv_ah *ah;
	uint32_t qpn;
	uint32_t qkey;
};

/* A local registered region: device address, length, lkey. */
struct vs_local {
	uint64_t addr;
	uint64_t len;
	uint32_t lkey;
};

/* A peer's registered region: device address, length, rkey. */
struct vs_remote {
	uint64_t addr;
	uint64_t len;
	uint32_t rkey;
};

/* What a C program keeps of one extended-CQ completion. */
struct vs_comp {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm;
	uint32_t qp_num;
	uint32_t src_qp;
	uint32_t wc_flags;
	uint16_t slid;
};

/* One RDMA write staged for posting later (what a C engine keeps per work request). */
struct vs_staged {
	uint64_t wr_id;
	struct ibv_ah *ah;
	uint32_t qpn;
	uint32_t qkey;
	uint64_t addr;
	uint32_t len;
	uint32_t lkey;
	uint64_t raddr;
	uint32_t rkey;
};

/* The limits a careful C program checks staged work requests against. */
struct vs_limits {
	uint32_t max_send_wr;
	uint32_t max_rdma_size;
};

int vs_c_send(struct ibv_qp_ex *q, const struct vs_dest *d, const struct vs_local *m,
	      uint32_t len, uint32_t slot_mask, uint64_t wr_id, uint32_t count);
int vs_c_write(struct ibv_qp_ex *q, const struct vs_dest *d, const struct vs_local *m,
	       const struct vs_remote *r, uint32_t len, uint32_t slot_mask, uint64_t wr_id,
	       uint32_t count);
int vs_c_send_inline(struct ibv_qp_ex *q, const struct vs_dest *d, const void *bytes,
		     uint32_t len, uint64_t wr_id, uint32_t count);
int vs_c_send_2sge(struct ibv_qp_ex *q, const struct vs_dest *d, const struct vs_local *m,
		   uint32_t len, uint32_t slot_mask, uint64_t wr_id, uint32_t count);
int vs_c_write_batch(struct ibv_qp_ex *q, const struct vs_dest *d, const struct vs_local *m,
		     const struct vs_remote *r, uint32_t len, uint32_t n, uint64_t wr_id);
int vs_c_round_trip(struct ibv_qp_ex *q, struct ibv_qp *rq, struct ibv_cq_ex *cq,
		    const struct vs_dest *d, const struct vs_local *src,
		    const struct vs_local *inbox, uint32_t len, uint32_t n, uint64_t wr_id,
		    struct vs_comp *out);
int vs_c_poll_empty_ex(struct ibv_cq_ex *cq, uint32_t count);
int vs_c_poll_empty(struct ibv_cq *cq, uint32_t count);
int vs_c_drain_ex(struct ibv_cq_ex *cq, struct vs_comp *out, uint32_t n);
int vs_c_drain(struct ibv_cq *cq, struct ibv_wc *out, uint32_t n);
int vs_c_build_writes(struct vs_staged *out, uint32_t cap, const struct vs_limits *lim,
		      const struct vs_dest *d, const struct vs_local *m,
		      const struct vs_remote *r, uint32_t len, uint32_t n, uint64_t wr_id);
int64_t vs_c_endpoint(const uint8_t gid[16], uint32_t qpn, uint32_t qkey, uint32_t count);

#endif
