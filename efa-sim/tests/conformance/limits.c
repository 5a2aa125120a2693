/* Device limits through the C ABI, run with
 * EFA_SIM_PROFILE=max_sq_wr=16,max_rq_wr=24,max_cqe=24,min_sq_wr=1,max_pd=2: one beyond a
 * limit (or rounded up past it) the create fails with NULL and the errno libefa or the
 * kernel returns; at it, it succeeds and reports the granted sizes. */
#include "common.h"

static struct ibv_qp *srd_qp(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq,
			     struct ibv_qp_cap *cap)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = *cap,
		.qp_type = IBV_QPT_DRIVER,
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = pd,
	};
	struct efadv_qp_init_attr e = { .driver_qp_type = EFADV_QP_DRIVER_TYPE_SRD };
	struct ibv_qp *qp = efadv_create_qp_ex(ctx, &a, &e, sizeof(e));
	if (qp)
		*cap = a.cap;
	return qp;
}

int main(void)
{
	g_test = "limits";
	struct ibv_context *ctx = open_dev(0);
	struct ibv_device_attr da;
	CHECK_EQ(ibv_query_device(ctx, &da), 0);
	CHECK_EQ(da.max_qp_wr, 16);
	CHECK_EQ(da.max_cqe, 24);

	/* CQ: libefa rounds cqe up to a power of two, the kernel compares with max_cqe. */
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK_PTR(cq);
	CHECK_EQ(cq->cqe, 16);
	CHECK_NULL_ERRNO(ibv_create_cq(ctx, 17, NULL, NULL, 0), EINVAL);
	CHECK_NULL_ERRNO(ibv_create_cq(ctx, 25, NULL, NULL, 0), EINVAL);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK_PTR(pd);
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	CHECK_PTR(pd2);
	CHECK_NULL_ERRNO(ibv_alloc_pd(ctx), ENOMEM);
	CHECK_EQ(ibv_dealloc_pd(pd2), 0);

	/* SQ: 16 WRs fit max_sq_wr; 17 become 32 (kernel efa_qp_validate_cap: EINVAL). */
	struct ibv_qp_cap c = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 };
	struct ibv_qp *qp = srd_qp(ctx, pd, cq, &c);
	CHECK_PTR(qp);
	CHECK_EQ(c.max_send_wr, 16);
	CHECK_EQ(c.max_recv_wr, 16);
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	struct ibv_qp_cap over = { .max_send_wr = 17, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 };
	CHECK_NULL_ERRNO(srd_qp(ctx, pd, cq, &over), EINVAL);
	/* RQ: 17 WRs of one SGE pass libefa (≤ 24 descriptors) but become 32. */
	over = (struct ibv_qp_cap){ .max_send_wr = 1, .max_recv_wr = 17, .max_send_sge = 1, .max_recv_sge = 1 };
	CHECK_NULL_ERRNO(srd_qp(ctx, pd, cq, &over), EINVAL);
	/* 25 fail libefa's own check. */
	over.max_recv_wr = 25;
	CHECK_NULL_ERRNO(srd_qp(ctx, pd, cq, &over), EINVAL);

	CHECK_EQ(ibv_destroy_cq(cq), 0);
	CHECK_EQ(ibv_dealloc_pd(pd), 0);
	CHECK_EQ(ibv_close_device(ctx), 0);
	done();
	return 0;
}
