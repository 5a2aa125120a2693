/* Error behaviour: completion statuses (model §4 mapping, vendor_err = raw EFA status),
 * latched errors in ibv_wr_* sessions, wr_abort, SQ full, unsolicited write-with-imm,
 * source GID of unknown senders, flush on modify-to-ERR. */
#include "common.h"

#define LEN 16384

static struct ibv_mr *amr, *bmr;
static char *abuf, *bbuf;

struct comp {
	int status;
	uint32_t vendor_err, opcode, byte_len;
	uint64_t wr_id;
};

static struct comp poll_comp(struct ibv_cq_ex *cq)
{
	struct ibv_poll_cq_attr pa = { 0 };
	int ret = poll_one_ex(cq, &pa, 10);
	if (ret)
		FAIL("no completion: %d (%s)", ret, strerror(ret));
	struct comp c = { cq->status, ibv_wc_read_vendor_err(cq), ibv_wc_read_opcode(cq), ibv_wc_read_byte_len(cq),
			  cq->wr_id };
	ibv_end_poll(cq);
	return c;
}

static void expect_empty(struct ibv_cq_ex *cq)
{
	struct ibv_poll_cq_attr pa = { 0 };
	usleep(50000);
	int ret = ibv_start_poll(cq, &pa);
	if (ret == 0) {
		uint64_t id = cq->wr_id;
		ibv_end_poll(cq);
		FAIL("unexpected completion wr_id %llu", (unsigned long long)id);
	}
	CHECK_EQ(ret, ENOENT);
}

enum op { SEND, WRITE, WRITE_IMM, READ };

static int post(struct ep *e, struct ibv_ah *ah, uint32_t qpn, enum op op, uint32_t lkey, void *laddr, uint32_t len,
		uint32_t rkey, void *raddr, uint64_t id)
{
	ibv_wr_start(e->qpx);
	e->qpx->wr_id = id;
	e->qpx->wr_flags = IBV_SEND_SIGNALED;
	switch (op) {
	case SEND:
		ibv_wr_send(e->qpx);
		break;
	case WRITE:
		ibv_wr_rdma_write(e->qpx, rkey, (uintptr_t)raddr);
		break;
	case WRITE_IMM:
		ibv_wr_rdma_write_imm(e->qpx, rkey, (uintptr_t)raddr, htobe32(7));
		break;
	case READ:
		ibv_wr_rdma_read(e->qpx, rkey, (uintptr_t)raddr);
		break;
	}
	ibv_wr_set_ud_addr(e->qpx, ah, qpn, 0x11111111);
	ibv_wr_set_sge(e->qpx, lkey, (uintptr_t)laddr, len);
	return ibv_wr_complete(e->qpx);
}

static void post_recv(struct ibv_qp *qp, void *buf, uint32_t len, uint32_t lkey, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK_EQ(ibv_post_recv(qp, &wr, &bad), 0);
}

#define EXPECT_STATUS(c, st, vendor)                                                             \
	do {                                                                                     \
		struct comp _c = (c);                                                            \
		if (_c.status != (st) || _c.vendor_err != (vendor))                              \
			FAIL("status %d (%s) vendor_err %u, expected %s vendor_err %d", _c.status, \
			     ibv_wc_status_str(_c.status), _c.vendor_err, #st, vendor);          \
		g_checks++;                                                                      \
	} while (0)

int main(void)
{
	g_test = "errors";
	struct ep a, b;
	ep_open(&a, 0, 0, 0);
	ep_open(&b, 1, EFADV_WC_EX_WITH_SGID | SIM_EFADV_WC_EX_WITH_IS_UNSOLICITED,
		SIM_EFADV_QP_FLAGS_UNSOLICITED_WRITE_RECV);
	abuf = calloc(1, LEN);
	bbuf = calloc(1, LEN);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	amr = reg(a.pd, abuf, LEN, acc);
	bmr = reg(b.pd, bbuf, LEN, acc);
	struct ibv_mr *b_ro = reg(b.pd, bbuf, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	struct ibv_ah *a2b = ah_to(a.pd, &b.gid);
	struct efadv_cq_v65 *bef = (struct efadv_cq_v65 *)efadv_cq_from_ibv_cq_ex(b.cq);

	/* Two-sided SEND works without a responder AH; the receiver reads the sender's GID. */
	post_recv(b.qp, bbuf, LEN, bmr->lkey, 11);
	CHECK_EQ(post(&a, a2b, b.qp->qp_num, SEND, amr->lkey, abuf, 64, 0, NULL, 1), 0);
	EXPECT_STATUS(poll_comp(a.cq), IBV_WC_SUCCESS, 0);
	{
		struct ibv_poll_cq_attr pa = { 0 };
		CHECK_EQ(poll_one_ex(b.cq, &pa, 5), 0);
		CHECK_EQ(b.cq->wr_id, 11);
		CHECK_EQ(ibv_wc_read_slid(b.cq), 0xffff);
		union ibv_gid g;
		CHECK_EQ(bef->wc_read_sgid((struct efadv_cq *)bef, &g), 0);
		CHECK(memcmp(&g, &a.gid, 16) == 0, "sgid is the sender's GID");
		CHECK_EQ(bef->wc_is_unsolicited((struct efadv_cq *)bef), false);
		ibv_end_poll(b.cq);
	}

	/* RDMA write to a responder that has no AH for the requester: UNKNOWN_PEER (14) */
	CHECK_EQ(post(&a, a2b, b.qp->qp_num, WRITE, amr->lkey, abuf, 64, bmr->rkey, bbuf, 2), 0);
	EXPECT_STATUS(poll_comp(a.cq), IBV_WC_REM_OP_ERR, 14);

	struct ibv_ah *b2a = ah_to(b.pd, &a.gid);
	/* with the AH the receiver knows the sender: slid = its AH number, no SGID */
	post_recv(b.qp, bbuf, LEN, bmr->lkey, 12);
	CHECK_EQ(post(&a, a2b, b.qp->qp_num, SEND, amr->lkey, abuf, 64, 0, NULL, 3), 0);
	EXPECT_STATUS(poll_comp(a.cq), IBV_WC_SUCCESS, 0);
	{
		struct ibv_poll_cq_attr pa = { 0 };
		CHECK_EQ(poll_one_ex(b.cq, &pa, 5), 0);
		struct efadv_ah_attr x;
		CHECK_EQ(efadv_query_ah(b2a, &x, sizeof(x)), 0);
		CHECK_EQ(ibv_wc_read_slid(b.cq), x.ahn);
		union ibv_gid g;
		CHECK_EQ(bef->wc_read_sgid((struct efadv_cq *)bef, &g), -ENOENT);
		ibv_end_poll(b.cq);
	}

	/* bad lkey: LOCAL_ERROR_INVALID_LKEY (5) → LOC_PROT_ERR */
	CHECK_EQ(post(&a, a2b, b.qp->qp_num, SEND, amr->lkey + 1000, abuf, 64, 0, NULL, 4), 0);
	EXPECT_STATUS(poll_comp(a.cq), IBV_WC_LOC_PROT_ERR, 5);
	/* bad rkey: REMOTE_ERROR_BAD_ADDRESS (7) → REM_ACCESS_ERR */
	CHECK_EQ(post(&a, a2b, b.qp->qp_num, WRITE, amr->lkey, abuf, 64, bmr->rkey + 1000, bbuf, 5), 0);
	EXPECT_STATUS(poll_comp(a.cq), IBV_WC_REM_ACCESS_ERR, 7);
	/* write into an MR without REMOTE_WRITE */
	CHECK_EQ(post(&a, a2b, b.qp->qp_num, WRITE, amr->lkey, abuf, 64, b_ro->rkey, bbuf, 6), 0);
	EXPECT_STATUS(poll_comp(a.cq), IBV_WC_REM_ACCESS_ERR, 7);
	/* out of range of the remote MR */
	CHECK_EQ(post(&a, a2b, b.qp->qp_num, READ, amr->lkey, abuf, 64, bmr->rkey, bbuf + LEN - 8, 7), 0);
	EXPECT_STATUS(poll_comp(a.cq), IBV_WC_REM_ACCESS_ERR, 7);
	/* destination QP does not exist: REMOTE_ERROR_BAD_DEST_QPN (9) → REM_INV_RD_REQ_ERR */
	CHECK_EQ(post(&a, a2b, b.qp->qp_num + 100, SEND, amr->lkey, abuf, 64, 0, NULL, 8), 0);
	EXPECT_STATUS(poll_comp(a.cq), IBV_WC_REM_INV_RD_REQ_ERR, 9);
	/* message larger than the port MTU: LOCAL_ERROR_BAD_LENGTH (6) → LOC_LEN_ERR */
	struct ibv_port_attr pattr;
	CHECK_EQ(ibv_query_port(a.ctx, 1, &pattr), 0);
	CHECK(pattr.max_msg_sz + 1 <= LEN, "buffer large enough");
	CHECK_EQ(post(&a, a2b, b.qp->qp_num, SEND, amr->lkey, abuf, pattr.max_msg_sz + 1, 0, NULL, 9), 0);
	EXPECT_STATUS(poll_comp(a.cq), IBV_WC_LOC_LEN_ERR, 6);
	/* receive buffer too small: REMOTE_ERROR_BAD_LENGTH (11) → REM_INV_REQ_ERR */
	post_recv(b.qp, bbuf, 16, bmr->lkey, 13);
	CHECK_EQ(post(&a, a2b, b.qp->qp_num, SEND, amr->lkey, abuf, 64, 0, NULL, 10), 0);
	EXPECT_STATUS(poll_comp(a.cq), IBV_WC_REM_INV_REQ_ERR, 11);

	/* unsolicited write-with-imm: wr_id 0, flag set, the posted receive (13) is not consumed */
	CHECK_EQ(post(&a, a2b, b.qp->qp_num, WRITE_IMM, amr->lkey, abuf, 100, bmr->rkey, bbuf + 4096, 14), 0);
	EXPECT_STATUS(poll_comp(a.cq), IBV_WC_SUCCESS, 0);
	{
		struct ibv_poll_cq_attr pa = { 0 };
		CHECK_EQ(poll_one_ex(b.cq, &pa, 5), 0);
		CHECK_EQ(b.cq->status, IBV_WC_SUCCESS);
		CHECK_EQ(b.cq->wr_id, 0);
		CHECK_EQ(ibv_wc_read_opcode(b.cq), IBV_WC_RECV_RDMA_WITH_IMM);
		CHECK_EQ(ibv_wc_read_byte_len(b.cq), 100);
		CHECK_EQ(bef->wc_is_unsolicited((struct efadv_cq *)bef), true);
		ibv_end_poll(b.cq);
	}
	/* the 16-byte receive (13) is still there: a 16-byte send lands in it */
	CHECK_EQ(post(&a, a2b, b.qp->qp_num, SEND, amr->lkey, abuf, 16, 0, NULL, 15), 0);
	EXPECT_STATUS(poll_comp(a.cq), IBV_WC_SUCCESS, 0);
	CHECK_EQ(poll_comp(b.cq).wr_id, 13);

	/* ---- ibv_wr_* session errors are latched and returned by wr_complete ---- */
	/* unsignaled WR on a QP without sq_sig_all */
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 20;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(a.qpx);
	ibv_wr_set_ud_addr(a.qpx, a2b, b.qp->qp_num, 0x11111111);
	ibv_wr_set_sge(a.qpx, amr->lkey, (uintptr_t)abuf, 8);
	a.qpx->wr_id = 21;
	a.qpx->wr_flags = 0;
	ibv_wr_send(a.qpx);
	ibv_wr_set_ud_addr(a.qpx, a2b, b.qp->qp_num, 0x11111111);
	ibv_wr_set_sge(a.qpx, amr->lkey, (uintptr_t)abuf, 8);
	CHECK_EQ(ibv_wr_complete(a.qpx), EINVAL);
	expect_empty(a.cq); /* the whole session (incl. the valid WR 20) was discarded */
	/* unsupported flag */
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 22;
	a.qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE;
	ibv_wr_send(a.qpx);
	ibv_wr_set_ud_addr(a.qpx, a2b, b.qp->qp_num, 0x11111111);
	ibv_wr_set_sge(a.qpx, amr->lkey, (uintptr_t)abuf, 8);
	CHECK_EQ(ibv_wr_complete(a.qpx), EINVAL);
	/* too many SGEs for RDMA */
	struct ibv_sge two[2] = { { (uintptr_t)abuf, 8, amr->lkey }, { (uintptr_t)abuf + 8, 8, amr->lkey } };
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 23;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, bmr->rkey, (uintptr_t)bbuf);
	ibv_wr_set_ud_addr(a.qpx, a2b, b.qp->qp_num, 0x11111111);
	ibv_wr_set_sge_list(a.qpx, 2, two);
	CHECK_EQ(ibv_wr_complete(a.qpx), EINVAL);
	/* inline data on RDMA read */
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 24;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(a.qpx, bmr->rkey, (uintptr_t)bbuf);
	ibv_wr_set_ud_addr(a.qpx, a2b, b.qp->qp_num, 0x11111111);
	ibv_wr_set_inline_data(a.qpx, abuf, 8);
	CHECK_EQ(ibv_wr_complete(a.qpx), EINVAL);
	/* inline RDMA write needs EFADV_QP_FLAGS_INLINE_WRITE */
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 25;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, bmr->rkey, (uintptr_t)bbuf);
	ibv_wr_set_ud_addr(a.qpx, a2b, b.qp->qp_num, 0x11111111);
	ibv_wr_set_inline_data(a.qpx, abuf, 8);
	CHECK_EQ(ibv_wr_complete(a.qpx), EINVAL);
	/* wr_abort discards */
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 26;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(a.qpx);
	ibv_wr_set_ud_addr(a.qpx, a2b, b.qp->qp_num, 0x11111111);
	ibv_wr_set_sge(a.qpx, amr->lkey, (uintptr_t)abuf, 8);
	ibv_wr_abort(a.qpx);
	expect_empty(a.cq);
	/* SQ full inside one session: depth WRs fit, one more → ENOMEM, none posted */
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	CHECK_EQ(ibv_query_qp(a.qp, &qattr, IBV_QP_CAP, &qinit), 0);
	uint32_t depth = qattr.cap.max_send_wr;
	ibv_wr_start(a.qpx);
	for (uint32_t i = 0; i <= depth; i++) {
		a.qpx->wr_id = 1000 + i;
		a.qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(a.qpx, bmr->rkey, (uintptr_t)bbuf);
		ibv_wr_set_ud_addr(a.qpx, a2b, b.qp->qp_num, 0x11111111);
		ibv_wr_set_sge(a.qpx, amr->lkey, (uintptr_t)abuf, 8);
	}
	CHECK_EQ(ibv_wr_complete(a.qpx), ENOMEM);
	expect_empty(a.cq);
	/* a full session of exactly depth WRs works; the SQ is then full until polled */
	ibv_wr_start(a.qpx);
	for (uint32_t i = 0; i < depth; i++) {
		a.qpx->wr_id = 2000 + i;
		a.qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(a.qpx, bmr->rkey, (uintptr_t)bbuf);
		ibv_wr_set_ud_addr(a.qpx, a2b, b.qp->qp_num, 0x11111111);
		ibv_wr_set_sge(a.qpx, amr->lkey, (uintptr_t)abuf, 8);
	}
	CHECK_EQ(ibv_wr_complete(a.qpx), 0);
	usleep(100000); /* completions are in the CQ but not polled: slots still held */
	CHECK_EQ(post(&a, a2b, b.qp->qp_num, SEND, amr->lkey, abuf, 8, 0, NULL, 3000), ENOMEM);
	/* next_poll protocol over the batch */
	{
		struct ibv_poll_cq_attr pa = { 0 };
		uint32_t n = 0;
		int ret = poll_one_ex(a.cq, &pa, 5);
		CHECK_EQ(ret, 0);
		while (ret == 0) {
			CHECK_EQ(a.cq->status, IBV_WC_SUCCESS);
			CHECK_EQ(ibv_wc_read_opcode(a.cq), IBV_WC_RDMA_WRITE);
			n++;
			ret = ibv_next_poll(a.cq);
			if (ret == ENOENT && n < depth) {
				ibv_end_poll(a.cq);
				ret = poll_one_ex(a.cq, &pa, 5);
				CHECK_EQ(ret, 0);
				continue;
			}
		}
		CHECK_EQ(ret, ENOENT);
		ibv_end_poll(a.cq);
		CHECK_EQ(n, depth);
	}
	CHECK_EQ(post(&a, a2b, b.qp->qp_num, SEND, amr->lkey, abuf, 8, 0, NULL, 3001), 0);
	post_recv(b.qp, bbuf, LEN, bmr->lkey, 14);
	EXPECT_STATUS(poll_comp(a.cq), IBV_WC_SUCCESS, 0);
	CHECK_EQ(poll_comp(b.cq).wr_id, 14);

	/* not in RTS: posting fails with EINVAL */
	struct ibv_qp_attr m = { .qp_state = IBV_QPS_ERR };
	post_recv(b.qp, bbuf, LEN, bmr->lkey, 15);
	CHECK_EQ(ibv_modify_qp(b.qp, &m, IBV_QP_STATE), 0);
	/* modify to ERR flushes posted receives: FLUSHED (1) → WR_FLUSH_ERR */
	{
		struct comp c = poll_comp(b.cq);
		CHECK_EQ(c.wr_id, 15);
		EXPECT_STATUS(c, IBV_WC_WR_FLUSH_ERR, 1);
	}
	struct ibv_sge rs = { (uintptr_t)bbuf, 8, bmr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 16, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK_EQ(ibv_post_recv(b.qp, &rw, &rbad), EINVAL);
	CHECK_EQ(ibv_modify_qp(a.qp, &m, IBV_QP_STATE), 0);
	CHECK_EQ(post(&a, a2b, b.qp->qp_num, SEND, amr->lkey, abuf, 8, 0, NULL, 17), EINVAL);

	CHECK_EQ(ibv_destroy_ah(a2b), 0);
	CHECK_EQ(ibv_destroy_ah(b2a), 0);
	CHECK_EQ(ibv_dereg_mr(amr), 0);
	CHECK_EQ(ibv_dereg_mr(bmr), 0);
	CHECK_EQ(ibv_dereg_mr(b_ro), 0);
	ep_close(&a);
	ep_close(&b);
	done();
	return 0;
}
