/* Concurrency: four threads post RDMA writes (ibv_wr_* sessions, retrying on ENOMEM)
 * through their own QPs that share one send CQ, while a poller thread drains that CQ,
 * alternating ibv_poll_cq and the ibv_cq_ex protocol. Every WR must complete exactly once,
 * successfully. */
#include "common.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define THREADS 4
#define PER_THREAD 2000

static struct ibv_context *ctx_a, *ctx_b;
static struct ibv_pd *pd_a, *pd_b;
static struct ibv_cq_ex *scq;
static struct ibv_qp *dst;
static struct ibv_mr *amr, *bmr;
static struct ibv_ah *ah;
static char abuf[4096], bbuf[THREADS * 64];
static atomic_int seen[THREADS][PER_THREAD];
static atomic_long done_count;

static struct ibv_qp *make_qp(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr_ex qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_DRIVER, .pd = pd,
					  .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					  .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE,
					  .cap = { .max_send_wr = 32, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct efadv_qp_init_attr_v65 ea = { .driver_qp_type = EFADV_QP_DRIVER_TYPE_SRD };
	struct ibv_qp *qp = efadv_create_qp_ex(ctx, &qa, (struct efadv_qp_init_attr *)&ea, sizeof(ea));
	CHECK_PTR(qp);
	to_rts(qp, 0x11111111, 1);
	return qp;
}

static void *sender(void *arg)
{
	long t = (long)arg;
	struct ibv_qp *qp = make_qp(ctx_a, pd_a, ibv_cq_ex_to_cq(scq));
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
	for (int i = 0; i < PER_THREAD;) {
		ibv_wr_start(x);
		x->wr_id = ((uint64_t)t << 32) | (uint64_t)i;
		x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(x, bmr->rkey, (uintptr_t)bbuf + t * 64);
		ibv_wr_set_ud_addr(x, ah, dst->qp_num, 0x11111111);
		ibv_wr_set_sge(x, amr->lkey, (uintptr_t)abuf, 64);
		int ret = ibv_wr_complete(x);
		if (ret == ENOMEM) {
			sched_yield();
			continue;
		}
		if (ret)
			FAIL("thread %ld: wr_complete %d", t, ret);
		i++;
	}
	/* the QP may only go once its completions are polled (destroy purges the rest) */
	while (1) {
		int all = 1;
		for (int i = 0; i < PER_THREAD && all; i++)
			all = atomic_load(&seen[t][i]) != 0;
		if (all)
			break;
		sched_yield();
	}
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	return NULL;
}

static void record(uint64_t wr_id, int status)
{
	long t = (long)(wr_id >> 32);
	long i = (long)(wr_id & 0xffffffff);
	if (t < 0 || t >= THREADS || i < 0 || i >= PER_THREAD)
		FAIL("bogus wr_id 0x%llx", (unsigned long long)wr_id);
	if (status != IBV_WC_SUCCESS)
		FAIL("wr_id 0x%llx status %d", (unsigned long long)wr_id, status);
	if (atomic_fetch_add(&seen[t][i], 1) != 0)
		FAIL("wr_id 0x%llx completed twice", (unsigned long long)wr_id);
	atomic_fetch_add(&done_count, 1);
}

static void *poller(void *arg)
{
	(void)arg;
	time_t end = time(NULL) + 60;
	int round = 0;
	while (atomic_load(&done_count) < THREADS * PER_THREAD) {
		if (time(NULL) > end)
			FAIL("only %ld of %d completions", atomic_load(&done_count), THREADS * PER_THREAD);
		if (round++ & 1) {
			struct ibv_wc wc[8];
			int n = ibv_poll_cq(ibv_cq_ex_to_cq(scq), 8, wc);
			if (n < 0)
				FAIL("poll_cq %d", n);
			for (int i = 0; i < n; i++)
				record(wc[i].wr_id, wc[i].status);
		} else {
			struct ibv_poll_cq_attr pa = { 0 };
			int ret = ibv_start_poll(scq, &pa);
			if (ret == ENOENT)
				continue;
			if (ret)
				FAIL("start_poll %d", ret);
			do {
				record(scq->wr_id, scq->status);
				ret = ibv_next_poll(scq);
			} while (ret == 0);
			if (ret != ENOENT)
				FAIL("next_poll %d", ret);
			ibv_end_poll(scq);
		}
	}
	return NULL;
}

int main(void)
{
	g_test = "threads";
	ctx_a = open_dev(0);
	ctx_b = open_dev(1);
	pd_a = ibv_alloc_pd(ctx_a);
	pd_b = ibv_alloc_pd(ctx_b);
	struct ibv_cq_init_attr_ex ca = { .cqe = 256, .wc_flags = IBV_WC_STANDARD_FLAGS };
	scq = ibv_create_cq_ex(ctx_a, &ca);
	CHECK_PTR(scq);
	struct ibv_cq *rcq = ibv_create_cq(ctx_b, 16, NULL, NULL, 0);
	CHECK_PTR(rcq);
	dst = make_qp(ctx_b, pd_b, rcq);
	amr = reg(pd_a, abuf, sizeof(abuf), IBV_ACCESS_LOCAL_WRITE);
	bmr = reg(pd_b, bbuf, sizeof(bbuf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	union ibv_gid ga, gb;
	CHECK_EQ(ibv_query_gid(ctx_a, 1, 0, &ga), 0);
	CHECK_EQ(ibv_query_gid(ctx_b, 1, 0, &gb), 0);
	ah = ah_to(pd_a, &gb);
	struct ibv_ah *back = ah_to(pd_b, &ga); /* the responder must know the requester */
	memset(abuf, 0x5c, sizeof(abuf));

	pthread_t th[THREADS], p;
	CHECK_EQ(pthread_create(&p, NULL, poller, NULL), 0);
	for (long t = 0; t < THREADS; t++)
		CHECK_EQ(pthread_create(&th[t], NULL, sender, (void *)t), 0);
	for (int t = 0; t < THREADS; t++)
		CHECK_EQ(pthread_join(th[t], NULL), 0);
	CHECK_EQ(pthread_join(p, NULL), 0);
	CHECK_EQ(atomic_load(&done_count), THREADS * PER_THREAD);
	for (size_t i = 0; i < sizeof(bbuf); i++)
		CHECK_EQ((unsigned char)bbuf[i], 0x5c);

	CHECK_EQ(ibv_destroy_ah(ah), 0);
	CHECK_EQ(ibv_destroy_ah(back), 0);
	CHECK_EQ(ibv_destroy_qp(dst), 0);
	CHECK_EQ(ibv_dereg_mr(amr), 0);
	CHECK_EQ(ibv_dereg_mr(bmr), 0);
	CHECK_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(scq)), 0);
	CHECK_EQ(ibv_destroy_cq(rcq), 0);
	CHECK_EQ(ibv_dealloc_pd(pd_a), 0);
	CHECK_EQ(ibv_dealloc_pd(pd_b), 0);
	CHECK_EQ(ibv_close_device(ctx_a), 0);
	CHECK_EQ(ibv_close_device(ctx_b), 0);
	done();
	return 0;
}
