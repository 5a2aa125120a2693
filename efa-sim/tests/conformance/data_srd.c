/* SRD data path through the ibv_wr_* API and the ibv_cq_ex poll protocol:
 * SEND, SEND_IMM, RDMA WRITE, RDMA WRITE_IMM, RDMA READ, inline SEND, zero-size SEND,
 * between efa_0 and efa_1; checks bytes, opcodes, statuses, slid/src_qp, imm. */
#include "common.h"

#define LEN 4096

static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, void *buf, uint32_t len, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad = NULL;
	CHECK_EQ(ibv_post_recv(qp, &wr, &bad), 0);
}

static void expect(struct ibv_cq_ex *cq, uint64_t wr_id, enum ibv_wc_opcode op, uint32_t byte_len)
{
	struct ibv_poll_cq_attr pa = { 0 };
	int ret = poll_one_ex(cq, &pa, 5);
	CHECK_EQ(ret, 0);
	if (cq->status != IBV_WC_SUCCESS)
		FAIL("wr_id %llu status %d (%s) vendor_err %u", (unsigned long long)cq->wr_id, cq->status,
		     ibv_wc_status_str(cq->status), ibv_wc_read_vendor_err(cq));
	CHECK_EQ(cq->wr_id, wr_id);
	CHECK_EQ(ibv_wc_read_opcode(cq), op);
	if (op & IBV_WC_RECV)
		CHECK_EQ(ibv_wc_read_byte_len(cq), byte_len);
	ibv_end_poll(cq);
}

int main(void)
{
	g_test = "data_srd";
	struct ep a, b;
	ep_open(&a, 0, 0, 0);
	ep_open(&b, 1, 0, 0);
	char *abuf = calloc(1, LEN), *bbuf = calloc(1, LEN);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_mr *amr = reg(a.pd, abuf, LEN, acc), *bmr = reg(b.pd, bbuf, LEN, acc);
	struct ibv_ah *a2b = ah_to(a.pd, &b.gid), *b2a = ah_to(b.pd, &a.gid);
	struct efadv_ah_attr ahattr;
	CHECK_EQ(efadv_query_ah(b2a, &ahattr, sizeof(ahattr)), 0);
	uint16_t b_ahn_of_a = ahattr.ahn;

	/* SEND a -> b */
	for (int i = 0; i < 100; i++)
		abuf[i] = (char)(i + 1);
	post_recv(b.qp, bmr, bbuf, LEN, 77);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 1;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(a.qpx);
	ibv_wr_set_ud_addr(a.qpx, a2b, b.qp->qp_num, 0x11111111);
	ibv_wr_set_sge(a.qpx, amr->lkey, (uintptr_t)abuf, 100);
	CHECK_EQ(ibv_wr_complete(a.qpx), 0);
	expect(a.cq, 1, IBV_WC_SEND, 0);
	{
		struct ibv_poll_cq_attr pa = { 0 };
		CHECK_EQ(poll_one_ex(b.cq, &pa, 5), 0);
		CHECK_EQ(b.cq->status, IBV_WC_SUCCESS);
		CHECK_EQ(b.cq->wr_id, 77);
		CHECK_EQ(ibv_wc_read_opcode(b.cq), IBV_WC_RECV);
		CHECK_EQ(ibv_wc_read_byte_len(b.cq), 100);
		CHECK_EQ(ibv_wc_read_src_qp(b.cq), a.qp->qp_num);
		CHECK_EQ(ibv_wc_read_qp_num(b.cq), b.qp->qp_num);
		CHECK_EQ(ibv_wc_read_slid(b.cq), b_ahn_of_a);
		CHECK_EQ(ibv_wc_read_wc_flags(b.cq), 0);
		ibv_end_poll(b.cq);
	}
	CHECK(memcmp(abuf, bbuf, 100) == 0, "payload differs");

	/* SEND_IMM, inline */
	post_recv(b.qp, bmr, bbuf, LEN, 78);
	const char msg[] = "inline hello";
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 2;
	a.qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_send_imm(a.qpx, htobe32(0xdeadbeef));
	ibv_wr_set_ud_addr(a.qpx, a2b, b.qp->qp_num, 0x11111111);
	ibv_wr_set_inline_data(a.qpx, (void *)msg, sizeof(msg));
	CHECK_EQ(ibv_wr_complete(a.qpx), 0);
	expect(a.cq, 2, IBV_WC_SEND, 0);
	{
		struct ibv_poll_cq_attr pa = { 0 };
		CHECK_EQ(poll_one_ex(b.cq, &pa, 5), 0);
		CHECK_EQ(b.cq->status, IBV_WC_SUCCESS);
		CHECK_EQ(ibv_wc_read_byte_len(b.cq), sizeof(msg));
		CHECK_EQ(ibv_wc_read_wc_flags(b.cq) & IBV_WC_WITH_IMM, IBV_WC_WITH_IMM);
		CHECK_EQ(ibv_wc_read_imm_data(b.cq), htobe32(0xdeadbeef));
		ibv_end_poll(b.cq);
	}
	CHECK(memcmp(msg, bbuf, sizeof(msg)) == 0, "inline payload differs");

	/* RDMA WRITE a -> b (responder needs an AH to a: b2a exists) */
	for (int i = 0; i < LEN; i++)
		abuf[i] = (char)(i * 7);
	memset(bbuf, 0, LEN);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 3;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, bmr->rkey, (uintptr_t)bbuf);
	ibv_wr_set_ud_addr(a.qpx, a2b, b.qp->qp_num, 0x11111111);
	ibv_wr_set_sge(a.qpx, amr->lkey, (uintptr_t)abuf, LEN);
	CHECK_EQ(ibv_wr_complete(a.qpx), 0);
	expect(a.cq, 3, IBV_WC_RDMA_WRITE, 0);
	CHECK(memcmp(abuf, bbuf, LEN) == 0, "RDMA write payload differs");

	/* RDMA WRITE with imm: consumes a receive at b */
	post_recv(b.qp, bmr, bbuf, LEN, 79);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 4;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write_imm(a.qpx, bmr->rkey, (uintptr_t)bbuf + 1000, htobe32(42));
	ibv_wr_set_ud_addr(a.qpx, a2b, b.qp->qp_num, 0x11111111);
	ibv_wr_set_sge(a.qpx, amr->lkey, (uintptr_t)abuf, 512);
	CHECK_EQ(ibv_wr_complete(a.qpx), 0);
	expect(a.cq, 4, IBV_WC_RDMA_WRITE, 0);
	{
		struct ibv_poll_cq_attr pa = { 0 };
		CHECK_EQ(poll_one_ex(b.cq, &pa, 5), 0);
		CHECK_EQ(b.cq->status, IBV_WC_SUCCESS);
		CHECK_EQ(b.cq->wr_id, 79);
		CHECK_EQ(ibv_wc_read_opcode(b.cq), IBV_WC_RECV_RDMA_WITH_IMM);
		CHECK_EQ(ibv_wc_read_byte_len(b.cq), 512);
		CHECK_EQ(ibv_wc_read_imm_data(b.cq), htobe32(42));
		ibv_end_poll(b.cq);
	}
	CHECK(memcmp(abuf, bbuf + 1000, 512) == 0, "RDMA write-imm payload differs");

	/* RDMA READ b -> a (reported as IBV_WC_SEND, rdma-core fidelity) */
	for (int i = 0; i < LEN; i++)
		bbuf[i] = (char)(255 - i);
	memset(abuf, 0, LEN);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 5;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(a.qpx, bmr->rkey, (uintptr_t)bbuf);
	ibv_wr_set_ud_addr(a.qpx, a2b, b.qp->qp_num, 0x11111111);
	ibv_wr_set_sge(a.qpx, amr->lkey, (uintptr_t)abuf, LEN);
	CHECK_EQ(ibv_wr_complete(a.qpx), 0);
	expect(a.cq, 5, getenv("EFA_SIM_READ_OPCODE") ? IBV_WC_RDMA_READ : IBV_WC_SEND, 0);
	CHECK(memcmp(abuf, bbuf, LEN) == 0, "RDMA read payload differs");

	/* zero-size SEND */
	post_recv(b.qp, bmr, bbuf, LEN, 80);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 6;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(a.qpx);
	ibv_wr_set_ud_addr(a.qpx, a2b, b.qp->qp_num, 0x11111111);
	ibv_wr_set_sge_list(a.qpx, 0, NULL);
	CHECK_EQ(ibv_wr_complete(a.qpx), 0);
	expect(a.cq, 6, IBV_WC_SEND, 0);
	expect(b.cq, 80, IBV_WC_RECV, 0);

	CHECK_EQ(ibv_destroy_ah(a2b), 0);
	CHECK_EQ(ibv_destroy_ah(b2a), 0);
	CHECK_EQ(ibv_dereg_mr(amr), 0);
	CHECK_EQ(ibv_dereg_mr(bmr), 0);
	ep_close(&a);
	ep_close(&b);
	done();
	return 0;
}
