/* The C baseline of efa-bench's vs_c benchmark (see vs_c.h and benches/vs_c.rs).
 *
 * Each function is what a careful C program writes for one case, with rdma-core's own
 * inline helpers: no checks beyond what such a program does, every send signaled, one
 * doorbell (ibv_wr_start ... ibv_wr_complete) per post. Loops run `count` times so that
 * the measured code is all C; their Rust counterparts are in src/ours.rs. Waits give up
 * after SPIN_LIMIT empty polls (-ETIMEDOUT) so that a broken device cannot hang a run. */
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "vs_c.h"

#define SPIN_LIMIT (1u << 28)
#define MAX_QPN 0xffffffu

int vs_c_send(struct ibv_qp_ex *q, const struct vs_dest *d, const struct vs_local *m,
	      uint32_t len, uint32_t slot_mask, uint64_t wr_id, uint32_t count)
{
	for (uint32_t i = 0; i < count; i++) {
		uint64_t off = (uint64_t)(i & slot_mask) * len;
		ibv_wr_start(q);
		q->wr_id = wr_id + i;
		q->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(q);
		ibv_wr_set_ud_addr(q, d->ah, d->qpn, d->qkey);
		ibv_wr_set_sge(q, m->lkey, m->addr + off, len);
		int rc = ibv_wr_complete(q);
		if (rc)
			return -rc;
	}
	return 0;
}

int vs_c_write(struct ibv_qp_ex *q, const struct vs_dest *d, const struct vs_local *m,
	       const struct vs_remote *r, uint32_t len, uint32_t slot_mask, uint64_t wr_id,
	       uint32_t count)
{
	for (uint32_t i = 0; i < count; i++) {
		uint64_t off = (uint64_t)(i & slot_mask) * len;
		ibv_wr_start(q);
		q->wr_id = wr_id + i;
		q->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(q, r->rkey, r->addr + off);
		ibv_wr_set_ud_addr(q, d->ah, d->qpn, d->qkey);
		ibv_wr_set_sge(q, m->lkey, m->addr + off, len);
		int rc = ibv_wr_complete(q);
		if (rc)
			return -rc;
	}
	return 0;
}

int vs_c_send_inline(struct ibv_qp_ex *q, const struct vs_dest *d, const void *bytes,
		     uint32_t len, uint64_t wr_id, uint32_t count)
{
	for (uint32_t i = 0; i < count; i++) {
		ibv_wr_start(q);
		q->wr_id = wr_id + i;
		q->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
		ibv_wr_send(q);
		ibv_wr_set_ud_addr(q, d->ah, d->qpn, d->qkey);
		ibv_wr_set_inline_data(q, (void *)bytes, len);
		int rc = ibv_wr_complete(q);
		if (rc)
			return -rc;
	}
	return 0;
}

int vs_c_send_2sge(struct ibv_qp_ex *q, const struct vs_dest *d, const struct vs_local *m,
		   uint32_t len, uint32_t slot_mask, uint64_t wr_id, uint32_t count)
{
	for (uint32_t i = 0; i < count; i++) {
		uint64_t off = (uint64_t)(i & slot_mask) * 2 * len;
		struct ibv_sge sg[2] = {
			{ .addr = m->addr + off, .length = len, .lkey = m->lkey },
			{ .addr = m->addr + off + len, .length = len, .lkey = m->lkey },
		};
		ibv_wr_start(q);
		q->wr_id = wr_id + i;
		q->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(q);
		ibv_wr_set_ud_addr(q, d->ah, d->qpn, d->qkey);
		ibv_wr_set_sge_list(q, 2, sg);
		int rc = ibv_wr_complete(q);
		if (rc)
			return -rc;
	}
	return 0;
}

int vs_c_write_batch(struct ibv_qp_ex *q, const struct vs_dest *d, const struct vs_local *m,
		     const struct vs_remote *r, uint32_t len, uint32_t n, uint64_t wr_id)
{
	ibv_wr_start(q);
	for (uint32_t i = 0; i < n; i++) {
		uint64_t off = (uint64_t)i * len;
		q->wr_id = wr_id + i;
		q->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(q, r->rkey, r->addr + off);
		ibv_wr_set_ud_addr(q, d->ah, d->qpn, d->qkey);
		ibv_wr_set_sge(q, m->lkey, m->addr + off, len);
	}
	return -ibv_wr_complete(q);
}

/* The fields the safe API's Completion carries, read the way C reads them. */
static inline void read_comp(struct ibv_cq_ex *cq, struct vs_comp *c)
{
	c->wr_id = cq->wr_id;
	c->status = cq->status;
	c->opcode = ibv_wc_read_opcode(cq);
	c->vendor_err = c->status == IBV_WC_SUCCESS ? 0 : ibv_wc_read_vendor_err(cq);
	c->qp_num = ibv_wc_read_qp_num(cq);
	if (c->opcode & IBV_WC_RECV) {
		c->wc_flags = ibv_wc_read_wc_flags(cq);
		c->byte_len = ibv_wc_read_byte_len(cq);
		c->src_qp = ibv_wc_read_src_qp(cq);
		c->slid = (uint16_t)ibv_wc_read_slid(cq);
		c->imm = (c->wc_flags & IBV_WC_WITH_IMM) ? ntohl(ibv_wc_read_imm_data(cq)) : 0;
	} else {
		c->wc_flags = 0;
		c->byte_len = 0;
		c->src_qp = 0;
		c->slid = 0;
		c->imm = 0;
	}
}

int vs_c_drain_ex(struct ibv_cq_ex *cq, struct vs_comp *out, uint32_t n)
{
	uint32_t got = 0, empty = 0;
	while (got < n) {
		struct ibv_poll_cq_attr attr = { .comp_mask = 0 };
		int rc = ibv_start_poll(cq, &attr);
		if (rc == ENOENT) {
			if (++empty == SPIN_LIMIT)
				return -ETIMEDOUT;
			continue;
		}
		if (rc)
			return -rc;
		for (;;) {
			read_comp(cq, &out[got++]);
			if (got == n)
				break;
			rc = ibv_next_poll(cq);
			if (rc == ENOENT)
				break;
			if (rc) {
				ibv_end_poll(cq);
				return -rc;
			}
		}
		ibv_end_poll(cq);
	}
	return (int)got;
}

int vs_c_drain(struct ibv_cq *cq, struct ibv_wc *out, uint32_t n)
{
	uint32_t got = 0, empty = 0;
	while (got < n) {
		int k = ibv_poll_cq(cq, (int)(n - got), out + got);
		if (k < 0)
			return k;
		if (k == 0 && ++empty == SPIN_LIMIT)
			return -ETIMEDOUT;
		got += (uint32_t)k;
	}
	return (int)got;
}

int vs_c_round_trip(struct ibv_qp_ex *q, struct ibv_qp *rq, struct ibv_cq_ex *cq,
		    const struct vs_dest *d, const struct vs_local *src,
		    const struct vs_local *inbox, uint32_t len, uint32_t n, uint64_t wr_id,
		    struct vs_comp *out)
{
	struct ibv_recv_wr wrs[32], *bad = NULL;
	struct ibv_sge sges[32];
	uint32_t slot = (uint32_t)(inbox->len / 32);
	if (n == 0 || n > 32)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		sges[i] = (struct ibv_sge){ .addr = inbox->addr + (uint64_t)i * slot,
					    .length = slot, .lkey = inbox->lkey };
		wrs[i] = (struct ibv_recv_wr){ .wr_id = wr_id + i, .next = i + 1 < n ? &wrs[i + 1] : NULL,
					       .sg_list = &sges[i], .num_sge = 1 };
	}
	int rc = ibv_post_recv(rq, wrs, &bad);
	if (rc)
		return -rc;
	ibv_wr_start(q);
	for (uint32_t i = 0; i < n; i++) {
		q->wr_id = wr_id + i;
		q->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(q);
		ibv_wr_set_ud_addr(q, d->ah, d->qpn, d->qkey);
		ibv_wr_set_sge(q, src->lkey, src->addr + (uint64_t)i * len, len);
	}
	rc = ibv_wr_complete(q);
	if (rc)
		return -rc;
	return vs_c_drain_ex(cq, out, 2 * n);
}

int vs_c_poll_empty_ex(struct ibv_cq_ex *cq, uint32_t count)
{
	for (uint32_t i = 0; i < count; i++) {
		struct ibv_poll_cq_attr attr = { .comp_mask = 0 };
		int rc = ibv_start_poll(cq, &attr);
		if (rc == ENOENT)
			continue;
		if (rc == 0) {
			ibv_end_poll(cq);
			return -EAGAIN; /* the CQ was meant to stay empty */
		}
		return -rc;
	}
	return 0;
}

int vs_c_poll_empty(struct ibv_cq *cq, uint32_t count)
{
	struct ibv_wc wc[16];
	for (uint32_t i = 0; i < count; i++) {
		int n = ibv_poll_cq(cq, 16, wc);
		if (n != 0)
			return n < 0 ? n : -EAGAIN;
	}
	return 0;
}

int vs_c_build_writes(struct vs_staged *out, uint32_t cap, const struct vs_limits *lim,
		      const struct vs_dest *d, const struct vs_local *m,
		      const struct vs_remote *r, uint32_t len, uint32_t n, uint64_t wr_id)
{
	for (uint32_t i = 0; i < n; i++) {
		uint64_t off = (uint64_t)i * len;
		if (i >= cap || i >= lim->max_send_wr)
			return -ENOSPC;
		if (len > lim->max_rdma_size)
			return -EMSGSIZE;
		if (off + len > m->len || off + len > r->len)
			return -ERANGE;
		out[i] = (struct vs_staged){
			.wr_id = wr_id + i, .ah = d->ah, .qpn = d->qpn, .qkey = d->qkey,
			.addr = m->addr + off, .len = len, .lkey = m->lkey,
			.raddr = r->addr + off, .rkey = r->rkey,
		};
	}
	return (int)n;
}

static int ep_encode(uint8_t wire[24], const uint8_t gid[16], uint32_t qpn, uint32_t qkey)
{
	uint32_t be;
	if (qpn > MAX_QPN)
		return -EINVAL;
	memcpy(wire, gid, 16);
	be = htonl(qpn);
	memcpy(wire + 16, &be, 4);
	be = htonl(qkey);
	memcpy(wire + 20, &be, 4);
	return 0;
}

static int ep_decode(const uint8_t *wire, size_t len, uint8_t gid[16], uint32_t *qpn,
		     uint32_t *qkey)
{
	uint32_t be;
	if (len != 24)
		return -EINVAL;
	memcpy(gid, wire, 16);
	memcpy(&be, wire + 16, 4);
	*qpn = ntohl(be);
	memcpy(&be, wire + 20, 4);
	*qkey = ntohl(be);
	return *qpn > MAX_QPN ? -EINVAL : 0;
}

int64_t vs_c_endpoint(const uint8_t gid[16], uint32_t qpn, uint32_t qkey, uint32_t count)
{
	int64_t sum = 0;
	for (uint32_t i = 0; i < count; i++) {
		uint8_t wire[24], g[16];
		uint32_t q, k;
		if (ep_encode(wire, gid, (qpn + i) & MAX_QPN, qkey))
			return -1;
		/* The bytes go to a peer: they must really be written. */
		__asm__ volatile("" : : "r"(wire) : "memory");
		if (ep_decode(wire, sizeof wire, g, &q, &k))
			return -1;
		/* The decoded GID must really be written (it goes to ibv_create_ah). */
		__asm__ volatile("" : : "r"(g) : "memory");
		sum += (int64_t)q + k;
	}
	return sum;
}
