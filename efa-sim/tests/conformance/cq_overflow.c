/* CQ overflow with raw verbs (nothing checks that a CQ is deep enough for its QPs): a
 * 16-entry CQ under a 256-deep UD send queue. Posting 200 signaled sends without polling
 * overflows it: the first 16 completions stay pollable, the rest are lost, the CQ stays
 * broken (later completions are lost too), the lost WRs' send-queue slots are never
 * freed, no async event is raised and polls report no error (as libefa, which cannot
 * tell). The same traffic polled as it goes (never more outstanding than the CQ holds)
 * loses nothing. See the README, "CQ overflow", for what is confirmed and what assumed. */
#include "common.h"
#include <fcntl.h>

#define DEPTH 16
#define SENDS 200
#define SQ 256

static struct ibv_qp *make_ud(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq, uint32_t *sq_cap)
{
	struct ibv_qp_init_attr qa = { .send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_UD,
				       .cap = { .max_send_wr = SQ, .max_recv_wr = SQ, .max_send_sge = 1,
						.max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	CHECK_PTR(qp);
	if (sq_cap)
		*sq_cap = qa.cap.max_send_wr;
	to_rts(qp, 0x11111111, 0);
	return qp;
}

static int send1(struct ibv_qp *qp, struct ibv_ah *ah, uint32_t qpn, struct ibv_sge *sge, uint64_t id)
{
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.sg_list = sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = 0x11111111;
	return ibv_post_send(qp, &wr, &bad);
}

/* Posts `n` receives on `qp` (one shared buffer; only the count matters). */
static void recvs(struct ibv_qp *qp, struct ibv_mr *mr, char *buf, int n)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 4096, .lkey = mr->lkey };
	for (int i = 0; i < n; i++) {
		struct ibv_recv_wr wr = { .wr_id = 9000 + i, .sg_list = &sge, .num_sge = 1 }, *bad = NULL;
		CHECK_EQ(ibv_post_recv(qp, &wr, &bad), 0);
	}
}

/* Waits until `n` completions have been polled from `cq` (the receiver's). */
static void drain(struct ibv_cq *cq, int n)
{
	struct ibv_wc wc;
	for (int i = 0; i < n; i++) {
		poll_one_wc(cq, &wc, 10);
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	}
}

/* Polls `cq` for `ms` milliseconds; returns how many completions came (none may fail). */
static int quiet(struct ibv_cq *cq, int ms)
{
	struct ibv_wc wc[8];
	int got = 0;
	for (int i = 0; i < ms * 10; i++) {
		int n = ibv_poll_cq(cq, 8, wc);
		CHECK(n >= 0, "ibv_poll_cq returned %d", n);
		got += n;
		usleep(100);
	}
	return got;
}

int main(void)
{
	g_test = "cq_overflow";
	struct ibv_context *c0 = open_dev(0), *c1 = open_dev(1);
	struct ibv_pd *p0 = ibv_alloc_pd(c0), *p1 = ibv_alloc_pd(c1);
	static char sbuf[64], rbuf[4096];
	struct ibv_mr *smr = reg(p0, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *rmr = reg(p1, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sge = { .addr = (uintptr_t)sbuf, .length = 8, .lkey = smr->lkey };
	union ibv_gid g1;
	CHECK_EQ(ibv_query_gid(c1, 1, 0, &g1), 0);
	struct ibv_ah *ah = ah_to(p0, &g1);
	/* The receiver: its own deep CQ, receives posted for every send. */
	struct ibv_cq *rcq = ibv_create_cq(c1, 1024, NULL, NULL, 0);
	CHECK_PTR(rcq);
	struct ibv_qp *b = make_ud(p1, rcq, rcq, NULL);
	int fl = fcntl(c0->async_fd, F_GETFL);
	CHECK_EQ(fcntl(c0->async_fd, F_SETFL, fl | O_NONBLOCK), 0);

	/* Overflow: 200 signaled sends into a 16-entry CQ, nobody polling it. */
	struct ibv_cq *cq = ibv_create_cq(c0, DEPTH, NULL, NULL, 0);
	CHECK_PTR(cq);
	CHECK_EQ(cq->cqe, DEPTH); /* the granted depth is what the device holds */
	uint32_t sq_cap = 0;
	struct ibv_qp *a = make_ud(p0, cq, cq, &sq_cap);
	CHECK(sq_cap >= SENDS + 2, "send queue of %u", sq_cap);
	recvs(b, rmr, rbuf, SENDS + 1);
	for (int i = 0; i < SENDS; i++)
		CHECK_EQ(send1(a, ah, b->qp_num, &sge, i), 0);
	drain(rcq, SENDS); /* every send went out, so every send completion was produced */
	struct ibv_wc wc[64];
	memset(wc, 0xee, sizeof(wc));
	CHECK_EQ(ibv_poll_cq(cq, 64, wc), DEPTH);
	for (int i = 0; i < DEPTH; i++) {
		CHECK_EQ(wc[i].wr_id, (uint64_t)i); /* the oldest, in order, none overwritten */
		CHECK_EQ(wc[i].status, IBV_WC_SUCCESS);
		CHECK_EQ(wc[i].opcode, IBV_WC_SEND);
	}
	/* The other 184 are lost: polls find nothing and report no error. */
	CHECK_EQ(quiet(cq, 50), 0);
	CHECK_EQ(ibv_poll_cq(cq, 64, wc), 0);
	/* No async event (the EFA kernel driver dispatches none). */
	struct ibv_async_event ev;
	errno = 0;
	CHECK_EQ(ibv_get_async_event(c0, &ev), -1);
	CHECK_EQ(errno, EAGAIN);
	/* The CQ stays broken: a send into the now-empty ring still completes nowhere. */
	CHECK_EQ(send1(a, ah, b->qp_num, &sge, 1000), 0);
	drain(rcq, 1);
	CHECK_EQ(quiet(cq, 50), 0);
	/* Lost completions never free their send-queue slots: 185 of them stay taken (the
	 * sends go to a QPN nobody has: only the posting matters). */
	int posted = 0;
	int ret = 0;
	while (posted <= (int)sq_cap && (ret = send1(a, ah, b->qp_num + 77, &sge, 2000 + posted)) == 0)
		posted++;
	CHECK_EQ(ret, ENOMEM);
	CHECK_EQ(posted, (int)sq_cap - (SENDS - DEPTH) - 1);
	CHECK_EQ(ibv_destroy_qp(a), 0);
	CHECK_EQ(ibv_destroy_cq(cq), 0);

	/* Polled in time: the same 200 sends, never more outstanding than the CQ holds. */
	cq = ibv_create_cq(c0, DEPTH, NULL, NULL, 0);
	CHECK_PTR(cq);
	a = make_ud(p0, cq, cq, NULL);
	recvs(b, rmr, rbuf, SENDS);
	int sent = 0, done_n = 0;
	time_t end = time(NULL) + 20;
	while (done_n < SENDS) {
		CHECK(time(NULL) <= end, "only %d of %d completions", done_n, SENDS);
		while (sent < SENDS && sent - done_n < DEPTH) {
			CHECK_EQ(send1(a, ah, b->qp_num, &sge, sent), 0);
			sent++;
		}
		int n = ibv_poll_cq(cq, 4, wc);
		CHECK(n >= 0, "ibv_poll_cq returned %d", n);
		for (int i = 0; i < n; i++) {
			CHECK_EQ(wc[i].wr_id, (uint64_t)(done_n + i));
			CHECK_EQ(wc[i].status, IBV_WC_SUCCESS);
		}
		done_n += n;
	}
	drain(rcq, SENDS);
	CHECK_EQ(quiet(cq, 20), 0);
	errno = 0;
	CHECK_EQ(ibv_get_async_event(c0, &ev), -1);
	CHECK_EQ(errno, EAGAIN);
	done();
	return 0;
}
