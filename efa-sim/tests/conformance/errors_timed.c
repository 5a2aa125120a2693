/* Errors that take time or need a profile (run with EFA_SIM_PROFILE=max_rdma_size=4096):
 * a Q_Key mismatch is dropped at the receiver (its receive stays posted) and the sender
 * gets RESP_TIMEOUT_ERR with vendor_err 13 (the peer answered before); a peer that never
 * answers gives vendor_err 15; a peer process killed with a WR outstanding gives 13 within
 * a bounded time; RDMA above max_rdma_size is LOC_LEN_ERR (6) and writes nothing. */
#include "common.h"
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#define LEN 16384
#define QKEY 0x11111111

struct comp {
	int status;
	uint32_t vendor_err;
	uint64_t wr_id;
};

static struct comp poll_comp(struct ibv_cq_ex *cq, int seconds)
{
	struct ibv_poll_cq_attr pa = { 0 };
	int ret = poll_one_ex(cq, &pa, seconds);
	if (ret)
		FAIL("no completion: %d (%s)", ret, strerror(ret));
	struct comp c = { cq->status, ibv_wc_read_vendor_err(cq), cq->wr_id };
	ibv_end_poll(cq);
	return c;
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static int post(struct ep *e, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey, int write, uint32_t lkey, void *laddr,
		uint32_t len, uint32_t rkey, void *raddr, uint64_t id)
{
	ibv_wr_start(e->qpx);
	e->qpx->wr_id = id;
	e->qpx->wr_flags = IBV_SEND_SIGNALED;
	if (write)
		ibv_wr_rdma_write(e->qpx, rkey, (uintptr_t)raddr);
	else
		ibv_wr_send(e->qpx);
	ibv_wr_set_ud_addr(e->qpx, ah, qpn, qkey);
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

struct peer {
	union ibv_gid gid;
	uint32_t qpn;
};

/* The peer that gets killed: one receive posted, then waits to die. */
static void victim(int wfd)
{
	g_test = "errors_timed(child)";
	struct ep v;
	ep_open(&v, 1, 0, 0);
	static char buf[64];
	struct ibv_mr *mr = reg(v.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	post_recv(v.qp, buf, sizeof(buf), mr->lkey, 1);
	struct peer me = { .gid = v.gid, .qpn = v.qp->qp_num };
	CHECK_EQ(write(wfd, &me, sizeof(me)), (long)sizeof(me));
	for (;;)
		pause();
}

int main(void)
{
	g_test = "errors_timed";
	/* Fork before this process opens any device (the child claims its own slot). */
	int p[2];
	CHECK_EQ(pipe(p), 0);
	pid_t parent = getpid();
	pid_t kid = fork();
	CHECK(kid >= 0, "fork");
	if (kid == 0) {
		/* Dies with the parent: a parent that fails a check before its kill must not
		 * leave the victim paused for ever (holding the test runner's output pipes). */
		CHECK_EQ(prctl(PR_SET_PDEATHSIG, SIGKILL), 0);
		if (getppid() != parent)
			_exit(1); /* the parent died before prctl */
		close(p[0]);
		victim(p[1]);
	}
	close(p[1]);

	struct ep a, b;
	ep_open(&a, 0, 0, 0);
	ep_open(&b, 1, 0, 0);
	char *abuf = calloc(1, LEN), *bbuf = calloc(1, LEN);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_mr *amr = reg(a.pd, abuf, LEN, acc), *bmr = reg(b.pd, bbuf, LEN, acc);
	struct ibv_ah *a2b = ah_to(a.pd, &b.gid), *b2a = ah_to(b.pd, &a.gid);

	/* The profile under test. */
	struct efadv_device_attr ea;
	memset(&ea, 0, sizeof(ea));
	CHECK_EQ(efadv_query_device(a.ctx, &ea, sizeof(ea)), 0);
	CHECK_EQ(ea.max_rdma_size, 4096);

	/* RDMA write above max_rdma_size: LOCAL_ERROR_BAD_LENGTH (6), nothing written. */
	memset(abuf, 0xab, LEN);
	CHECK_EQ(post(&a, a2b, b.qp->qp_num, QKEY, 1, amr->lkey, abuf, 4097, bmr->rkey, bbuf, 1), 0);
	EXPECT_STATUS(poll_comp(a.cq, 5), IBV_WC_LOC_LEN_ERR, 6);
	CHECK_EQ(post(&a, a2b, b.qp->qp_num, QKEY, 1, amr->lkey, abuf, 4096, bmr->rkey, bbuf + 4096, 2), 0);
	EXPECT_STATUS(poll_comp(a.cq, 5), IBV_WC_SUCCESS, 0);
	for (int i = 0; i < LEN; i++)
		CHECK_EQ((unsigned char)bbuf[i], (i >= 4096 && i < 8192) ? 0xab : 0);

	/* Q_Key mismatch: dropped and counted at b; a's SEND times out with 13 (b answered before). */
	post_recv(b.qp, bbuf, 64, bmr->lkey, 10);
	double t = now();
	CHECK_EQ(post(&a, a2b, b.qp->qp_num, QKEY ^ 1, 0, amr->lkey, abuf, 64, 0, NULL, 3), 0);
	EXPECT_STATUS(poll_comp(a.cq, 10), IBV_WC_RESP_TIMEOUT_ERR, 13);
	CHECK(now() - t < 5.0, "timeout took %.2f s", now() - t);
	/* b's receive was not consumed: the next SEND with the right Q_Key lands in it. */
	CHECK_EQ(post(&a, a2b, b.qp->qp_num, QKEY, 0, amr->lkey, abuf, 64, 0, NULL, 4), 0);
	EXPECT_STATUS(poll_comp(a.cq, 5), IBV_WC_SUCCESS, 0);
	EXPECT_STATUS(poll_comp(b.cq, 5), IBV_WC_SUCCESS, 0);

	/* A peer nobody ever answered for (127.0.0.99): UNREACHABLE_REMOTE (15). */
	union ibv_gid ghost = a.gid;
	ghost.raw[11] = 99;
	struct ibv_ah *a2ghost = ah_to(a.pd, &ghost);
	t = now();
	CHECK_EQ(post(&a, a2ghost, b.qp->qp_num, QKEY, 0, amr->lkey, abuf, 64, 0, NULL, 5), 0);
	EXPECT_STATUS(poll_comp(a.cq, 10), IBV_WC_RESP_TIMEOUT_ERR, 15);
	CHECK(now() - t < 5.0, "timeout took %.2f s", now() - t);

	/* A peer process killed while a SEND to it waits for a receive (RNR, retried forever):
	 * UNRESPONSIVE_REMOTE (13) within a bounded time after the kill. */
	struct peer v;
	CHECK_EQ(read(p[0], &v, sizeof(v)), (long)sizeof(v));
	struct ibv_ah *a2v = ah_to(a.pd, &v.gid);
	CHECK_EQ(post(&a, a2v, v.qpn, QKEY, 0, amr->lkey, abuf, 64, 0, NULL, 6), 0);
	EXPECT_STATUS(poll_comp(a.cq, 5), IBV_WC_SUCCESS, 0);
	CHECK_EQ(post(&a, a2v, v.qpn, QKEY, 0, amr->lkey, abuf, 64, 0, NULL, 7), 0);
	usleep(50000);
	struct ibv_poll_cq_attr pa = { 0 };
	CHECK_EQ(ibv_start_poll(a.cq, &pa), ENOENT); /* still outstanding */
	CHECK_EQ(kill(kid, SIGKILL), 0);
	int st;
	CHECK_EQ(waitpid(kid, &st, 0), kid);
	t = now();
	struct comp c = poll_comp(a.cq, 10);
	CHECK_EQ(c.wr_id, 7);
	EXPECT_STATUS(c, IBV_WC_RESP_TIMEOUT_ERR, 13);
	CHECK(now() - t < 5.0, "error took %.2f s after the kill", now() - t);

	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child status 0x%x", st);

	CHECK_EQ(ibv_destroy_ah(a2v), 0);
	CHECK_EQ(ibv_destroy_ah(a2ghost), 0);
	CHECK_EQ(ibv_destroy_ah(a2b), 0);
	CHECK_EQ(ibv_destroy_ah(b2a), 0);
	CHECK_EQ(ibv_dereg_mr(amr), 0);
	CHECK_EQ(ibv_dereg_mr(bmr), 0);
	ep_close(&a);
	ep_close(&b);
	done();
	return 0;
}
