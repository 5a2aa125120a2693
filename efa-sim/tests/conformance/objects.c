/* Object creation rules: PD/TD/parent domain, MR access flags, CQ creation
 * (wc_flags, comp_mask, channel, efadv), AH numbering, QP creation checks and granted
 * caps, ibv_qp_to_qp_ex, the modify_qp state machine, ibv_query_qp. */
#include "common.h"

static void check_pd_mr(struct ibv_context *ctx)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK_PTR(pd);
	CHECK(pd->context == ctx, "pd->context");
	static char buf[8192];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
	CHECK_PTR(mr);
	CHECK(mr->addr == buf && mr->length == sizeof(buf) && mr->pd == pd, "mr fields");
	CHECK(mr->lkey < (1u << 24), "lkey must fit 24 bits: %u", mr->lkey);
	/* MR in use → PD busy */
	CHECK_EQ(ibv_dealloc_pd(pd), EBUSY);
	/* EFA rejects atomics/MW bind access with EOPNOTSUPP */
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, buf, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC), EOPNOTSUPP);
	/* relaxed ordering (optional range) is silently dropped */
	struct ibv_mr *ro = ibv_reg_mr(pd, buf, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
	CHECK_PTR(ro);
	struct ibv_mr *iova = ibv_reg_mr_iova(pd, buf, 64, 0x100000, IBV_ACCESS_LOCAL_WRITE);
	CHECK_PTR(iova);
	CHECK_EQ(ibv_dereg_mr(iova), 0);
	CHECK_EQ(ibv_dereg_mr(ro), 0);
	CHECK_EQ(ibv_dereg_mr(mr), 0);

	/* thread domain + parent domain */
	struct ibv_td_init_attr tda = { 0 };
	struct ibv_td *td = ibv_alloc_td(ctx, &tda);
	CHECK_PTR(td);
	tda.comp_mask = 1;
	CHECK_NULL_ERRNO(ibv_alloc_td(ctx, &tda), EINVAL);
	struct ibv_parent_domain_init_attr pda = { .pd = pd, .td = td };
	struct ibv_pd *parent = ibv_alloc_parent_domain(ctx, &pda);
	CHECK_PTR(parent);
	CHECK_EQ(ibv_dealloc_td(td), EBUSY);
	CHECK_EQ(ibv_dealloc_pd(pd), EBUSY);
	struct ibv_parent_domain_init_attr nested = { .pd = parent };
	CHECK_NULL_ERRNO(ibv_alloc_parent_domain(ctx, &nested), EINVAL);
	/* CQ with the PD bit needs a parent domain */
	struct ibv_cq_init_attr_ex ca = { .cqe = 8, .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD, .parent_domain = pd };
	CHECK_NULL_ERRNO(ibv_create_cq_ex(ctx, &ca), EINVAL);
	ca.parent_domain = parent;
	struct ibv_cq_ex *pcq = ibv_create_cq_ex(ctx, &ca);
	CHECK_PTR(pcq);
	CHECK_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(pcq)), 0);
	/* QP on the parent domain */
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
				       .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(parent, &qa);
	CHECK_PTR(qp);
	CHECK(qp->pd == parent, "qp->pd");
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	CHECK_EQ(ibv_dealloc_pd(parent), 0);
	CHECK_EQ(ibv_dealloc_td(td), 0);
	CHECK_EQ(ibv_dealloc_pd(pd), 0);
}

static void check_cq(struct ibv_context *ctx)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 100, (void *)0x1234, NULL, 0);
	CHECK_PTR(cq);
	CHECK(cq->cqe >= 100 && (cq->cqe & (cq->cqe - 1)) == 0, "cqe %d: power of two >= 100", cq->cqe);
	CHECK(cq->cq_context == (void *)0x1234 && cq->context == ctx, "cq fields");
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	CHECK_NULL_ERRNO(ibv_create_cq(ctx, 16, NULL, NULL, 5), EINVAL); /* comp_vector */

	struct ibv_cq_init_attr_ex ca = { .cqe = 16, .wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP };
	CHECK_NULL_ERRNO(ibv_create_cq_ex(ctx, &ca), EOPNOTSUPP);
	ca.wc_flags = IBV_WC_STANDARD_FLAGS;
	ca.comp_mask = 1 << 5;
	CHECK_NULL_ERRNO(ibv_create_cq_ex(ctx, &ca), EOPNOTSUPP);
	ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
	ca.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
	CHECK_NULL_ERRNO(ibv_create_cq_ex(ctx, &ca), EOPNOTSUPP);
	ca.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &ca);
	CHECK_PTR(cqx);
	CHECK(cqx->start_poll && cqx->next_poll && cqx->end_poll && cqx->read_opcode && cqx->read_vendor_err &&
		      cqx->read_wc_flags,
	      "always-present poll ops");
	CHECK(cqx->read_byte_len && cqx->read_src_qp && cqx->read_slid, "requested readers");
	CHECK(cqx->read_completion_ts == NULL && cqx->read_flow_tag == NULL, "unsupported readers stay NULL");
	struct ibv_poll_cq_attr pa = { 0 };
	CHECK_EQ(ibv_start_poll(cqx, &pa), ENOENT); /* empty; no end_poll needed */
	CHECK_EQ(ibv_start_poll(cqx, &pa), ENOENT); /* and the CQ was left unlocked */
	pa.comp_mask = 1;
	CHECK_EQ(ibv_start_poll(cqx, &pa), EINVAL);
	struct efadv_cq_v65 *ecq = (struct efadv_cq_v65 *)efadv_cq_from_ibv_cq_ex(cqx);
	CHECK_PTR(ecq);
	CHECK(ecq->wc_read_sgid == NULL && ecq->wc_is_unsolicited == NULL, "efadv readers only when requested");
	CHECK_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)), 0);

	/* only BYTE_LEN requested: other standard readers NULL */
	struct ibv_cq_init_attr_ex cb = { .cqe = 16, .wc_flags = IBV_WC_EX_WITH_BYTE_LEN };
	cqx = ibv_create_cq_ex(ctx, &cb);
	CHECK_PTR(cqx);
	CHECK(cqx->read_byte_len != NULL && cqx->read_imm_data == NULL && cqx->read_slid == NULL, "reader set");
	CHECK_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)), 0);

	/* efadv_create_cq: inlen rules and wc_flags */
	struct efadv_cq_init_attr ea = { .wc_flags = EFADV_WC_EX_WITH_SGID | SIM_EFADV_WC_EX_WITH_IS_UNSOLICITED };
	struct ibv_cq_init_attr_ex cc = { .cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS };
	cqx = efadv_create_cq(ctx, &cc, &ea, sizeof(ea));
	CHECK_PTR(cqx);
	ecq = (struct efadv_cq_v65 *)efadv_cq_from_ibv_cq_ex(cqx);
	CHECK(ecq->wc_read_sgid != NULL && ecq->wc_is_unsolicited != NULL, "efadv readers requested");
	CHECK_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)), 0);
	CHECK_NULL_ERRNO(efadv_create_cq(ctx, &cc, &ea, 8), EINVAL);
	ea.comp_mask = 1;
	CHECK_NULL_ERRNO(efadv_create_cq(ctx, &cc, &ea, sizeof(ea)), EINVAL);
	ea.comp_mask = 0;
	ea.wc_flags = 1 << 7;
	CHECK_NULL_ERRNO(efadv_create_cq(ctx, &cc, &ea, sizeof(ea)), EOPNOTSUPP);
	unsigned char big[80] = { 0 };
	memcpy(big, &ea, sizeof(ea));
	((struct efadv_cq_init_attr *)big)->wc_flags = 0;
	big[70] = 1; /* non-zero byte beyond the library's struct */
	CHECK_NULL_ERRNO(efadv_create_cq(ctx, &cc, (struct efadv_cq_init_attr *)big, sizeof(big)), EINVAL);
	big[70] = 0;
	cqx = efadv_create_cq(ctx, &cc, (struct efadv_cq_init_attr *)big, sizeof(big));
	CHECK_PTR(cqx);
	CHECK_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)), 0);
}

static void check_ah(struct ibv_context *ctx)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx), *pd2 = ibv_alloc_pd(ctx);
	union ibv_gid gid;
	CHECK_EQ(ibv_query_gid(ctx, 1, 0, &gid), 0);
	struct ibv_ah *a1 = ah_to(pd, &gid), *a2 = ah_to(pd, &gid), *a3 = ah_to(pd2, &gid);
	struct efadv_ah_attr x1, x2, x3;
	CHECK_EQ(efadv_query_ah(a1, &x1, sizeof(x1)), 0);
	CHECK_EQ(efadv_query_ah(a2, &x2, sizeof(x2)), 0);
	CHECK_EQ(efadv_query_ah(a3, &x3, sizeof(x3)), 0);
	CHECK_EQ(x1.ahn, x2.ahn); /* same (PD, GID) → same AH number */
	CHECK_EQ(x1.comp_mask, 0);
	CHECK_EQ(efadv_query_ah(a1, &x1, 8), EINVAL);
	CHECK_EQ(ibv_dealloc_pd(pd), EBUSY);
	CHECK_EQ(ibv_destroy_ah(a1), 0);
	CHECK_EQ(ibv_destroy_ah(a2), 0);
	CHECK_EQ(ibv_destroy_ah(a3), 0);
	CHECK_EQ(ibv_dealloc_pd(pd), 0);
	CHECK_EQ(ibv_dealloc_pd(pd2), 0);
}

static void modify_expect(struct ibv_qp *qp, enum ibv_qp_state st, int mask, int expected, uint32_t qkey)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = st;
	a.port_num = 1;
	a.qkey = qkey;
	a.rnr_retry = 3;
	int ret = ibv_modify_qp(qp, &a, mask);
	if (ret != expected)
		FAIL("modify to %d mask 0x%x: %d (%s), expected %d", st, mask, ret, strerror(ret), expected);
	g_checks++;
}

static void check_qp(struct ibv_context *ctx)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);

	/* UD through ibv_create_qp; caps granted and written back */
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
				       .cap = { .max_send_wr = 5, .max_recv_wr = 3, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *ud = ibv_create_qp(pd, &qa);
	CHECK_PTR(ud);
	CHECK(qa.cap.max_send_wr >= 5 && (qa.cap.max_send_wr & (qa.cap.max_send_wr - 1)) == 0, "send wr %u",
	      qa.cap.max_send_wr);
	CHECK(qa.cap.max_recv_wr >= 3, "recv wr %u", qa.cap.max_recv_wr);
	CHECK_EQ(ud->qp_type, IBV_QPT_UD);
	CHECK_EQ(ud->state, IBV_QPS_RESET);
	CHECK(ud->qp_num != 0, "qp_num");
	CHECK(ibv_qp_to_qp_ex(ud) == NULL, "no qp_ex without SEND_OPS_FLAGS");

	/* RC is not EFA */
	qa.qp_type = IBV_QPT_RC;
	CHECK_NULL_ERRNO(ibv_create_qp(pd, &qa), EOPNOTSUPP);
	qa.qp_type = IBV_QPT_UD;
	/* too many SGEs */
	qa.cap.max_send_sge = 3;
	CHECK_NULL_ERRNO(ibv_create_qp(pd, &qa), EINVAL);
	qa.cap.max_send_sge = 1;
	qa.cap.max_inline_data = 33;
	CHECK_NULL_ERRNO(ibv_create_qp(pd, &qa), EINVAL);
	qa.cap.max_inline_data = 0;

	/* UD with ibv_create_qp_ex: only SEND / SEND_WITH_IMM ops */
	struct ibv_qp_init_attr_ex qx = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD, .pd = pd,
					  .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					  .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
					  .send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE };
	CHECK_NULL_ERRNO(ibv_create_qp_ex(ctx, &qx), EOPNOTSUPP);
	qx.send_ops_flags = IBV_QP_EX_WITH_SEND;
	struct ibv_qp *udx = ibv_create_qp_ex(ctx, &qx);
	CHECK_PTR(udx);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(udx);
	CHECK(x == (struct ibv_qp_ex *)udx, "qp_ex is the same object");
	CHECK(x->wr_send && !x->wr_send_imm && !x->wr_rdma_write && !x->wr_rdma_read && !x->wr_atomic_fetch_add &&
		      !x->wr_bind_mw && !x->wr_send_inv,
	      "only the requested opcodes");
	CHECK(x->wr_start && x->wr_complete && x->wr_abort && x->wr_set_ud_addr && x->wr_set_sge &&
		      x->wr_set_sge_list && x->wr_set_inline_data && x->wr_set_inline_data_list,
	      "always-present ops");
	qx.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	CHECK_NULL_ERRNO(ibv_create_qp_ex(ctx, &qx), EOPNOTSUPP);
	qx.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	qx.recv_cq = NULL;
	CHECK_NULL_ERRNO(ibv_create_qp_ex(ctx, &qx), EINVAL);
	qx.recv_cq = cq;

	/* SRD via efadv_create_qp_ex */
	struct efadv_qp_init_attr_v65 ea = { .driver_qp_type = EFADV_QP_DRIVER_TYPE_SRD };
	qx.qp_type = IBV_QPT_DRIVER;
	qx.send_ops_flags = all_srd_ops();
	struct ibv_qp *srd = efadv_create_qp_ex(ctx, &qx, (struct efadv_qp_init_attr *)&ea, sizeof(ea));
	CHECK_PTR(srd);
	CHECK_EQ(srd->qp_type, IBV_QPT_DRIVER);
	x = ibv_qp_to_qp_ex(srd);
	CHECK(x && x->wr_rdma_read && x->wr_rdma_write && x->wr_rdma_write_imm && x->wr_send_imm, "SRD ops");
	struct efadv_qp_v65 *eq = efadv_qp_from_ibv_qp_ex(x);
	CHECK_PTR(eq);
	CHECK(eq->wr_set_processing_hints == NULL, "hints only when requested");
	ea.wr_flags = SIM_EFADV_WR_EX_WITH_PROCESSING_HINTS;
	struct ibv_qp *hinted = efadv_create_qp_ex(ctx, &qx, (struct efadv_qp_init_attr *)&ea, sizeof(ea));
	CHECK_PTR(hinted);
	eq = efadv_qp_from_ibv_qp_ex(ibv_qp_to_qp_ex(hinted));
	CHECK(eq->wr_set_processing_hints != NULL, "hints requested");
	CHECK_EQ(ibv_destroy_qp(hinted), 0);
	ea.wr_flags = 1 << 5;
	CHECK_NULL_ERRNO(efadv_create_qp_ex(ctx, &qx, (struct efadv_qp_init_attr *)&ea, sizeof(ea)), EOPNOTSUPP);
	ea.wr_flags = 0;
	ea.driver_qp_type = 1;
	CHECK_NULL_ERRNO(efadv_create_qp_ex(ctx, &qx, (struct efadv_qp_init_attr *)&ea, sizeof(ea)), EOPNOTSUPP);
	ea.driver_qp_type = EFADV_QP_DRIVER_TYPE_SRD;
	ea.comp_mask = 1;
	CHECK_NULL_ERRNO(efadv_create_qp_ex(ctx, &qx, (struct efadv_qp_init_attr *)&ea, sizeof(ea)), EINVAL);
	ea.comp_mask = 0;
	CHECK_NULL_ERRNO(efadv_create_qp_ex(ctx, &qx, (struct efadv_qp_init_attr *)&ea, 8), EINVAL);
	ea.flags = 1 << 9;
	CHECK_NULL_ERRNO(efadv_create_qp_ex(ctx, &qx, (struct efadv_qp_init_attr *)&ea, sizeof(ea)), EOPNOTSUPP);
	ea.flags = 0;
	qx.qp_type = IBV_QPT_UD;
	CHECK_NULL_ERRNO(efadv_create_qp_ex(ctx, &qx, (struct efadv_qp_init_attr *)&ea, sizeof(ea)), EINVAL);
	qx.qp_type = IBV_QPT_DRIVER;
	qx.send_ops_flags |= IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	CHECK_NULL_ERRNO(efadv_create_qp_ex(ctx, &qx, (struct efadv_qp_init_attr *)&ea, sizeof(ea)), EOPNOTSUPP);

	/* efadv_create_driver_qp: SRD without qp_ex */
	struct ibv_qp_init_attr da = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_DRIVER,
				       .cap = { .max_send_wr = 3, .max_recv_wr = 3, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *drv = efadv_create_driver_qp(pd, &da, EFADV_QP_DRIVER_TYPE_SRD);
	CHECK_PTR(drv);
	CHECK(ibv_qp_to_qp_ex(drv) == NULL, "driver QP has no qp_ex");
	CHECK(da.cap.max_send_wr >= 3, "caps written back");
	da.qp_type = IBV_QPT_UD;
	CHECK_NULL_ERRNO(efadv_create_driver_qp(pd, &da, EFADV_QP_DRIVER_TYPE_SRD), EINVAL);

	/* state machine (SRD) */
	modify_expect(srd, IBV_QPS_RTR, IBV_QP_STATE, EINVAL, 0);                   /* RESET→RTR */
	modify_expect(srd, IBV_QPS_INIT, IBV_QP_STATE, EINVAL, 0);                  /* missing required */
	modify_expect(srd, IBV_QPS_INIT, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY | IBV_QP_AV,
		      EOPNOTSUPP, 0x1234);
	modify_expect(srd, IBV_QPS_INIT, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, 0, 0x1234);
	CHECK_EQ(srd->state, IBV_QPS_INIT);
	modify_expect(srd, IBV_QPS_RTS, IBV_QP_STATE | IBV_QP_SQ_PSN, EINVAL, 0);    /* INIT→RTS */
	modify_expect(srd, IBV_QPS_RTR, IBV_QP_STATE, 0, 0);
	modify_expect(srd, IBV_QPS_RTS, IBV_QP_STATE, EINVAL, 0);                   /* SQ_PSN required */
	modify_expect(srd, IBV_QPS_RTS, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RNR_RETRY, 0, 0);
	CHECK_EQ(srd->state, IBV_QPS_RTS);
	modify_expect(srd, IBV_QPS_RTS, IBV_QP_STATE | IBV_QP_QKEY, 0, 0x5678);
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	CHECK_EQ(ibv_query_qp(srd, &qattr, IBV_QP_STATE | IBV_QP_QKEY | IBV_QP_CAP | IBV_QP_RNR_RETRY | IBV_QP_PORT,
			      &qinit),
		 0);
	CHECK_EQ(qattr.qp_state, IBV_QPS_RTS);
	CHECK_EQ(qattr.qkey, 0x5678);
	CHECK_EQ(qattr.rnr_retry, 3);
	CHECK_EQ(qattr.port_num, 1);
	CHECK_EQ(qattr.cap.max_send_wr, qx.cap.max_send_wr);
	CHECK_EQ(qinit.qp_type, IBV_QPT_DRIVER);
	CHECK(qinit.send_cq == cq, "init send_cq");
	CHECK_EQ(ibv_query_qp(srd, &qattr, IBV_QP_AV, &qinit), EOPNOTSUPP);
	modify_expect(srd, IBV_QPS_ERR, IBV_QP_STATE, 0, 0);
	modify_expect(srd, IBV_QPS_INIT, IBV_QP_STATE, EINVAL, 0);                  /* ERR→INIT */
	modify_expect(srd, IBV_QPS_RESET, IBV_QP_STATE, 0, 0);
	CHECK_EQ(srd->state, IBV_QPS_RESET);

	/* UD: RNR_RETRY is not allowed */
	modify_expect(ud, IBV_QPS_INIT, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, 0, 1);
	modify_expect(ud, IBV_QPS_RTR, IBV_QP_STATE, 0, 0);
	modify_expect(ud, IBV_QPS_RTS, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RNR_RETRY, EINVAL, 0);
	modify_expect(ud, IBV_QPS_RTS, IBV_QP_STATE | IBV_QP_SQ_PSN, 0, 0);

	/* CQ busy while QPs use it */
	CHECK_EQ(ibv_destroy_cq(cq), EBUSY);
	CHECK_EQ(ibv_destroy_qp(drv), 0);
	CHECK_EQ(ibv_destroy_qp(srd), 0);
	CHECK_EQ(ibv_destroy_qp(udx), 0);
	CHECK_EQ(ibv_destroy_qp(ud), 0);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	CHECK_EQ(ibv_dealloc_pd(pd), 0);
}

int main(void)
{
	g_test = "objects";
	struct ibv_context *ctx = open_dev(0);
	check_pd_mr(ctx);
	check_cq(ctx);
	check_ah(ctx);
	check_qp(ctx);
	CHECK_EQ(ibv_close_device(ctx), 0);
	done();
	return 0;
}
