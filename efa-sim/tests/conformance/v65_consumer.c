/* A consumer compiled against the rdma-core 65 headers (newest layouts): verbs_context
 * of 696 bytes with its newest op slots, 56-byte ibv_port_attr through the inline
 * ibv_query_port, 360-byte ibv_qp_ex, efadv structs with their v65 fields. Functions the
 * system libraries (v44) lack are resolved with dlsym, as such a consumer would. */
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <infiniband/efadv.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_checks;
#define FAIL(...)                                                                       \
	do {                                                                            \
		fprintf(stderr, "FAIL v65_consumer %s:%d: ", __FILE__, __LINE__);       \
		fprintf(stderr, __VA_ARGS__);                                           \
		fprintf(stderr, "\n");                                                  \
		exit(1);                                                                \
	} while (0)
#define CHECK_EQ(a, b)                                                                  \
	do {                                                                            \
		long long _a = (long long)(a), _b = (long long)(b);                     \
		g_checks++;                                                             \
		if (_a != _b)                                                           \
			FAIL("%s == %lld, expected %s == %lld", #a, _a, #b, _b);        \
	} while (0)
#define CHECK(c)                                                                        \
	do {                                                                            \
		g_checks++;                                                             \
		if (!(c))                                                               \
			FAIL("check `%s` failed (errno %d)", #c, errno);               \
	} while (0)

static void *sym(const char *n)
{
	void *p = dlsym(RTLD_DEFAULT, n);
	if (!p)
		FAIL("dlsym(%s)", n);
	return p;
}

_Static_assert(sizeof(struct verbs_context) == 696, "v65 headers");
_Static_assert(sizeof(struct ibv_qp_ex) == 360, "v65 headers");
_Static_assert(sizeof(struct ibv_port_attr) == 56, "v65 headers");
_Static_assert(sizeof(struct efadv_cq) == 24, "v65 headers");

int main(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n == 2);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx);
	ibv_free_device_list(list);

	struct verbs_context *vctx = verbs_get_ctx(ctx);
	CHECK(vctx);
	CHECK_EQ(vctx->sz, sizeof(struct verbs_context));
	/* the newest slots are inside sz and filled (stubs), the real ops are there */
	CHECK(verbs_get_ctx_op(ctx, free_buf) != NULL);
	CHECK(verbs_get_ctx_op(ctx, alloc_buf) != NULL);
	CHECK(verbs_get_ctx_op(ctx, alloc_dmah) != NULL);
	CHECK(verbs_get_ctx_op(ctx, query_port) != NULL);
	errno = 0;
	CHECK(vctx->alloc_dmah(ctx, NULL) == NULL);
	CHECK_EQ(errno, EOPNOTSUPP);

	struct {
		struct ibv_port_attr a;
		unsigned char canary[8];
	} p;
	memset(&p, 0xcd, sizeof(p));
	CHECK_EQ(ibv_query_port(ctx, 1, &p.a), 0);
	CHECK_EQ(p.a.state, IBV_PORT_ACTIVE);
	CHECK_EQ(p.a.active_speed_ex, 0);
	CHECK_EQ(p.a.port_cap_flags2, 0);
	for (int i = 0; i < 8; i++)
		CHECK_EQ(p.canary[i], 0xcd);

	struct efadv_device_attr ea;
	memset(&ea, 0xee, sizeof(ea));
	CHECK_EQ(efadv_query_device(ctx, &ea, sizeof(ea)), 0);
	CHECK_EQ(ea.inline_buf_size_ex, 32);
	CHECK(ea.device_caps & EFADV_DEVICE_ATTR_CAPS_UNSOLICITED_WRITE_RECV);
	CHECK_EQ(ea.device_caps & EFADV_DEVICE_ATTR_CAPS_COMP_CNTR, 0);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd);
	struct ibv_cq_init_attr_ex ca = { .cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS };
	struct efadv_cq_init_attr ec = { .wc_flags = EFADV_WC_EX_WITH_IS_UNSOLICITED };
	struct ibv_cq_ex *cq = efadv_create_cq(ctx, &ca, &ec, sizeof(ec));
	CHECK(cq);
	struct efadv_cq *ecq = efadv_cq_from_ibv_cq_ex(cq);
	CHECK(ecq->wc_is_unsolicited != NULL);
	CHECK(ecq->wc_read_sgid == NULL);

	struct ibv_qp_init_attr_ex qa = { .send_cq = ibv_cq_ex_to_cq(cq), .recv_cq = ibv_cq_ex_to_cq(cq),
					  .qp_type = IBV_QPT_DRIVER, .pd = pd,
					  .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					  .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND,
					  .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
						   .max_recv_sge = 1, .max_inline_data = 64 } };
	struct efadv_qp_init_attr qe = { .driver_qp_type = EFADV_QP_DRIVER_TYPE_SRD,
					 .flags = EFADV_QP_FLAGS_INLINE_WRITE | EFADV_QP_FLAGS_UNSOLICITED_WRITE_RECV,
					 .wr_flags = EFADV_WR_EX_WITH_PROCESSING_HINTS };
	/* 64 inline bytes exceed inline_buf_size_ex (32) of the default profile */
	errno = 0;
	CHECK(efadv_create_qp_ex(ctx, &qa, &qe, sizeof(qe)) == NULL);
	CHECK_EQ(errno, EINVAL);
	qa.cap.max_inline_data = 32;
	struct ibv_qp *qp = efadv_create_qp_ex(ctx, &qa, &qe, sizeof(qe));
	CHECK(qp);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
	CHECK(x && x->wr_rdma_write && x->wr_send && !x->wr_rdma_read);
	CHECK(x->wr_flush == NULL && x->wr_atomic_write == NULL);
	struct efadv_qp *(*qp_from)(struct ibv_qp_ex *) = sym("efadv_qp_from_ibv_qp_ex");
	struct efadv_qp *eq = qp_from(x);
	CHECK(eq && eq->wr_set_processing_hints);

	int (*sq_depth)(struct ibv_context *, struct efadv_sq_depth_attr *, uint32_t) = sym("efadv_get_max_sq_depth");
	struct efadv_sq_depth_attr sd = { .max_send_sge = 1, .max_inline_data = 32 };
	int d = sq_depth(ctx, &sd, sizeof(sd));
	CHECK(d > 0);
	int (*query_cq)(struct ibv_cq *, struct efadv_cq_attr *, uint32_t) = sym("efadv_query_cq");
	struct efadv_cq_attr cqa;
	memset(&cqa, 0xee, sizeof(cqa));
	CHECK_EQ(query_cq(ibv_cq_ex_to_cq(cq), &cqa, sizeof(cqa)), 0);
	CHECK_EQ(cqa.comp_mask, 0);
	CHECK_EQ(cqa.entry_size, 32);
	CHECK_EQ(cqa.num_entries, 16);
	CHECK(cqa.buffer && cqa.doorbell);

	/* The QP's rings: INLINE_WRITE makes 128-byte WQEs; max_batch is libefa's
	 * max_tx_batch (16) * 64 / 128 = 8 WQEs, but never a whole SQ (8 slots): 7. RQ entries
	 * are 16-byte
	 * descriptors, one doorbell may cover all of them. inlen must cover max_batch. */
	int (*query_wqs)(struct ibv_qp *, struct efadv_wq_attr *, struct efadv_wq_attr *, uint32_t) =
		sym("efadv_query_qp_wqs");
	struct efadv_wq_attr sq, rq;
	CHECK_EQ(query_wqs(qp, &sq, &rq, offsetof(struct efadv_wq_attr, max_batch)), EINVAL);
	memset(&sq, 0xee, sizeof(sq));
	memset(&rq, 0xee, sizeof(rq));
	CHECK_EQ(query_wqs(qp, &sq, &rq, sizeof(sq)), 0);
	CHECK_EQ(sq.comp_mask, 0);
	CHECK_EQ(sq.entry_size, 128);
	CHECK_EQ(sq.num_entries, qa.cap.max_send_wr);
	CHECK_EQ(sq.num_entries, 8);
	CHECK_EQ(sq.max_batch, 7);
	CHECK_EQ(sq.caps, 0);
	CHECK(sq.buffer && sq.doorbell && sq.buffer != rq.buffer && sq.doorbell != rq.doorbell);
	CHECK_EQ(rq.entry_size, 16);
	CHECK_EQ(rq.num_entries, 8);
	CHECK_EQ(rq.max_batch, rq.num_entries);
	CHECK_EQ(rq.caps, 0);

	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
	CHECK_EQ(ibv_dealloc_pd(pd), 0);
	CHECK_EQ(ibv_close_device(ctx), 0);
	printf("PASS v65_consumer (%d checks)\n", g_checks);
	return 0;
}
