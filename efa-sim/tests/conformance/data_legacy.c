/* Legacy verbs on UD and SRD: ibv_post_send (SEND/SEND_IMM only, first bad WR → *bad_wr),
 * ibv_post_recv, ibv_poll_cq with the ibv_wc fill rules, posting errors (state, signaled,
 * flags, SQ/RQ full, SGE counts). */
#include "common.h"

#define GRH 40

static struct ibv_qp *make_ud(struct ibv_pd *pd, struct ibv_cq *cq, uint32_t depth, int sig_all)
{
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD, .sq_sig_all = sig_all,
				       .cap = { .max_send_wr = depth, .max_recv_wr = depth, .max_send_sge = 2,
						.max_recv_sge = 1, .max_inline_data = 32 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	CHECK_PTR(qp);
	return qp;
}

static int post_send1(struct ibv_qp *qp, struct ibv_ah *ah, uint32_t qpn, struct ibv_sge *sge, int nsge, uint64_t id,
		      int opcode, int flags, struct ibv_send_wr **bad)
{
	struct ibv_send_wr wr;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.sg_list = sge;
	wr.num_sge = nsge;
	wr.opcode = opcode;
	wr.send_flags = flags;
	wr.imm_data = htobe32(0x01020304);
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = 0x11111111;
	*bad = NULL;
	return ibv_post_send(qp, &wr, bad);
}

int main(void)
{
	g_test = "data_legacy";
	struct ibv_context *c0 = open_dev(0), *c1 = open_dev(1);
	struct ibv_pd *p0 = ibv_alloc_pd(c0), *p1 = ibv_alloc_pd(c1);
	struct ibv_cq *q0 = ibv_create_cq(c0, 64, NULL, NULL, 0), *q1 = ibv_create_cq(c1, 64, NULL, NULL, 0);
	CHECK_PTR(q0);
	CHECK_PTR(q1);
	struct ibv_qp *a = make_ud(p0, q0, 8, 0), *b = make_ud(p1, q1, 8, 0);
	static char sbuf[8192], rbuf[8192];
	struct ibv_mr *smr = reg(p0, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *rmr = reg(p1, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
	union ibv_gid g1;
	CHECK_EQ(ibv_query_gid(c1, 1, 0, &g1), 0);
	struct ibv_ah *ah = ah_to(p0, &g1);
	struct ibv_send_wr *bad;
	struct ibv_sge sge = { .addr = (uintptr_t)sbuf, .length = 256, .lkey = smr->lkey };

	/* posting in RESET: send and recv → EINVAL */
	CHECK_EQ(post_send1(a, ah, b->qp_num, &sge, 1, 1, IBV_WR_SEND, IBV_SEND_SIGNALED, &bad), EINVAL);
	struct ibv_sge rsge = { .addr = (uintptr_t)rbuf, .length = 4096, .lkey = rmr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 500, .sg_list = &rsge, .num_sge = 1 }, *rbad = NULL;
	CHECK_EQ(ibv_post_recv(b, &rwr, &rbad), EINVAL);
	CHECK(rbad == &rwr, "bad recv wr");
	to_rts(a, 0x11111111, 0);
	to_rts(b, 0x11111111, 0);

	/* too many receive SGEs */
	struct ibv_sge two[2] = { rsge, rsge };
	struct ibv_recv_wr r2 = { .wr_id = 501, .sg_list = two, .num_sge = 2 };
	CHECK_EQ(ibv_post_recv(b, &r2, &rbad), EINVAL);

	/* SEND: 40-byte GRH area precedes the payload at the UD receiver */
	for (int i = 0; i < 256; i++)
		sbuf[i] = (char)(i ^ 0x5a);
	CHECK_EQ(ibv_post_recv(b, &rwr, &rbad), 0);
	CHECK_EQ(post_send1(a, ah, b->qp_num, &sge, 1, 7, IBV_WR_SEND, IBV_SEND_SIGNALED, &bad), 0);
	struct ibv_wc wc;
	memset(&wc, 0xee, sizeof(wc));
	poll_one_wc(q0, &wc, 5);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 7);
	CHECK_EQ(wc.opcode, IBV_WC_SEND);
	CHECK_EQ(wc.qp_num, a->qp_num);
	CHECK_EQ(wc.vendor_err, 0);
	CHECK_EQ(wc.wc_flags, 0);
	CHECK_EQ(wc.byte_len, 0xeeeeeeee); /* send completions leave byte_len untouched */
	memset(&wc, 0xee, sizeof(wc));
	poll_one_wc(q1, &wc, 5);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 500);
	CHECK_EQ(wc.opcode, IBV_WC_RECV);
	CHECK_EQ(wc.byte_len, 256 + GRH);
	CHECK_EQ(wc.src_qp, a->qp_num);
	CHECK_EQ(wc.qp_num, b->qp_num);
	CHECK_EQ(wc.slid, 0xffff); /* receiver has no AH for the sender */
	CHECK_EQ(wc.sl, 0);
	CHECK_EQ(wc.wc_flags, 0);
	CHECK_EQ(wc.pkey_index, 0xeeee); /* never written by EFA */
	CHECK(memcmp(rbuf + GRH, sbuf, 256) == 0, "UD payload after the GRH area");

	/* SEND_WITH_IMM, two SGEs, inline */
	CHECK_EQ(ibv_post_recv(b, &rwr, &rbad), 0);
	struct ibv_sge s2[2] = { { (uintptr_t)sbuf, 10, smr->lkey }, { (uintptr_t)sbuf + 100, 6, smr->lkey } };
	CHECK_EQ(post_send1(a, ah, b->qp_num, s2, 2, 8, IBV_WR_SEND_WITH_IMM, IBV_SEND_SIGNALED | IBV_SEND_INLINE, &bad),
		 0);
	poll_one_wc(q0, &wc, 5);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 8);
	memset(&wc, 0, sizeof(wc));
	poll_one_wc(q1, &wc, 5);
	CHECK_EQ(wc.byte_len, 16 + GRH);
	CHECK_EQ(wc.wc_flags, IBV_WC_WITH_IMM);
	CHECK_EQ(wc.imm_data, htobe32(0x01020304));
	CHECK(memcmp(rbuf + GRH, sbuf, 10) == 0 && memcmp(rbuf + GRH + 10, sbuf + 100, 6) == 0, "gathered payload");

	/* legacy post_send rejects RDMA opcodes, unsignaled WRs, unsupported flags, too many SGEs,
	 * too much inline; the first bad WR is reported and earlier ones are posted */
	CHECK_EQ(post_send1(a, ah, b->qp_num, &sge, 1, 9, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, &bad), EINVAL);
	CHECK_EQ(post_send1(a, ah, b->qp_num, &sge, 1, 9, IBV_WR_SEND, 0, &bad), EINVAL);
	CHECK_EQ(post_send1(a, ah, b->qp_num, &sge, 1, 9, IBV_WR_SEND, IBV_SEND_SIGNALED | IBV_SEND_FENCE, &bad), EINVAL);
	CHECK_EQ(post_send1(a, ah, b->qp_num, &sge, 1, 9, IBV_WR_SEND, IBV_SEND_SIGNALED | IBV_SEND_SOLICITED, &bad),
		 EINVAL);
	struct ibv_sge three[3] = { sge, sge, sge };
	CHECK_EQ(post_send1(a, ah, b->qp_num, three, 3, 9, IBV_WR_SEND, IBV_SEND_SIGNALED, &bad), EINVAL);
	struct ibv_sge big = { (uintptr_t)sbuf, 33, smr->lkey };
	CHECK_EQ(post_send1(a, ah, b->qp_num, &big, 1, 9, IBV_WR_SEND, IBV_SEND_SIGNALED | IBV_SEND_INLINE, &bad),
		 EINVAL);
	CHECK(bad != NULL, "bad_wr set");
	{
		struct ibv_send_wr w[3];
		memset(w, 0, sizeof(w));
		for (int i = 0; i < 3; i++) {
			w[i].wr_id = 20 + i;
			w[i].sg_list = &sge;
			w[i].num_sge = 1;
			w[i].opcode = IBV_WR_SEND;
			w[i].send_flags = IBV_SEND_SIGNALED;
			w[i].wr.ud.ah = ah;
			w[i].wr.ud.remote_qpn = b->qp_num;
			w[i].wr.ud.remote_qkey = 0x11111111;
			w[i].next = i < 2 ? &w[i + 1] : NULL;
		}
		w[1].opcode = IBV_WR_RDMA_READ;
		CHECK_EQ(ibv_post_send(a, &w[0], &bad), EINVAL);
		CHECK(bad == &w[1], "bad_wr must point at the second WR");
		poll_one_wc(q0, &wc, 5);
		CHECK_EQ(wc.wr_id, 20); /* the first was posted */
		CHECK_EQ(ibv_poll_cq(q0, 1, &wc), 0);
	}

	/* A long WR list (posted in groups inside the library) completes every WR once. */
	{
		enum { N = 40 };
		struct ibv_qp *l = make_ud(p0, q0, 64, 0);
		to_rts(l, 0x11111111, 0);
		struct ibv_send_wr w[N];
		memset(w, 0, sizeof(w));
		for (int i = 0; i < N; i++) {
			w[i].wr_id = 300 + i;
			w[i].sg_list = &sge;
			w[i].num_sge = 1;
			w[i].opcode = IBV_WR_SEND;
			w[i].send_flags = IBV_SEND_SIGNALED;
			w[i].wr.ud.ah = ah;
			w[i].wr.ud.remote_qpn = b->qp_num;
			w[i].wr.ud.remote_qkey = 0x11111111;
			w[i].next = i < N - 1 ? &w[i + 1] : NULL;
		}
		bad = NULL;
		CHECK_EQ(ibv_post_send(l, &w[0], &bad), 0);
		CHECK(bad == NULL, "bad_wr untouched on success");
		int seen[N] = { 0 };
		for (int i = 0; i < N; i++) {
			poll_one_wc(q0, &wc, 5);
			CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			CHECK(wc.wr_id >= 300 && wc.wr_id < 300 + N, "wr_id %llu", (unsigned long long)wc.wr_id);
			CHECK_EQ(seen[wc.wr_id - 300]++, 0);
		}
		CHECK_EQ(ibv_poll_cq(q0, 1, &wc), 0);
		/* a bad WR after the first group: the 20 before it are posted, bad_wr names it */
		w[20].opcode = IBV_WR_RDMA_READ;
		CHECK_EQ(ibv_post_send(l, &w[0], &bad), EINVAL);
		CHECK(bad == &w[20], "bad_wr must point at WR 20");
		memset(seen, 0, sizeof(seen));
		for (int i = 0; i < 20; i++) {
			poll_one_wc(q0, &wc, 5);
			CHECK(wc.wr_id >= 300 && wc.wr_id < 320, "wr_id %llu", (unsigned long long)wc.wr_id);
			CHECK_EQ(seen[wc.wr_id - 300]++, 0);
		}
		usleep(20000);
		CHECK_EQ(ibv_poll_cq(q0, 1, &wc), 0);
		CHECK_EQ(ibv_destroy_qp(l), 0);
	}

	/* SQ full: exactly max_send_wr outstanding (until polled), then ENOMEM */
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	CHECK_EQ(ibv_query_qp(a, &qattr, IBV_QP_CAP, &qinit), 0);
	uint32_t depth = qattr.cap.max_send_wr;
	for (uint32_t i = 0; i < depth; i++)
		CHECK_EQ(post_send1(a, ah, b->qp_num, &sge, 1, 100 + i, IBV_WR_SEND, IBV_SEND_SIGNALED, &bad), 0);
	CHECK_EQ(post_send1(a, ah, b->qp_num, &sge, 1, 999, IBV_WR_SEND, IBV_SEND_SIGNALED, &bad), ENOMEM);
	/* drain: UD has no RNR, sends complete successfully even without receives */
	struct ibv_wc wcs[16];
	uint32_t got = 0;
	time_t end = time(NULL) + 5;
	while (got < depth && time(NULL) <= end) {
		int n = ibv_poll_cq(q0, 16, wcs);
		CHECK(n >= 0, "poll %d", n);
		for (int i = 0; i < n; i++)
			CHECK_EQ(wcs[i].status, IBV_WC_SUCCESS);
		got += n;
	}
	CHECK_EQ(got, depth);
	CHECK_EQ(post_send1(a, ah, b->qp_num, &sge, 1, 1000, IBV_WR_SEND, IBV_SEND_SIGNALED, &bad), 0);
	poll_one_wc(q0, &wc, 5);
	CHECK_EQ(wc.wr_id, 1000);

	/* RQ full */
	CHECK_EQ(ibv_query_qp(b, &qattr, IBV_QP_CAP, &qinit), 0);
	uint32_t rdepth = qattr.cap.max_recv_wr;
	for (uint32_t i = 0; i < rdepth; i++)
		CHECK_EQ(ibv_post_recv(b, &rwr, &rbad), 0);
	CHECK_EQ(ibv_post_recv(b, &rwr, &rbad), ENOMEM);

	/* sq_sig_all QP accepts unsignaled WRs */
	struct ibv_qp *s = make_ud(p0, q0, 4, 1);
	to_rts(s, 0x11111111, 0);
	CHECK_EQ(post_send1(s, ah, b->qp_num, &sge, 1, 77, IBV_WR_SEND, 0, &bad), 0);
	poll_one_wc(q0, &wc, 5);
	CHECK_EQ(wc.wr_id, 77);

	CHECK_EQ(ibv_destroy_qp(s), 0);
	CHECK_EQ(ibv_destroy_qp(a), 0);
	CHECK_EQ(ibv_destroy_qp(b), 0);
	CHECK_EQ(ibv_destroy_ah(ah), 0);
	CHECK_EQ(ibv_dereg_mr(smr), 0);
	CHECK_EQ(ibv_dereg_mr(rmr), 0);
	CHECK_EQ(ibv_destroy_cq(q0), 0);
	CHECK_EQ(ibv_destroy_cq(q1), 0);
	CHECK_EQ(ibv_dealloc_pd(p0), 0);
	CHECK_EQ(ibv_dealloc_pd(p1), 0);
	CHECK_EQ(ibv_close_device(c0), 0);
	CHECK_EQ(ibv_close_device(c1), 0);
	done();
	return 0;
}
