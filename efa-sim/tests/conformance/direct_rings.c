/* A direct data-path consumer (as libfabric's EFA direct mode is), compiled against the
 * rdma-core 65 headers: it asks for the raw rings of its QP and CQ (efadv_query_qp_wqs,
 * efadv_query_cq), writes TX WQEs and RX descriptors by hand in EFA's formats, rings the
 * doorbells itself and reads CQEs by phase bit, never calling a post or poll verb. Its
 * peer, on the other device, uses the ordinary verbs path. Data is checked both ways:
 * SEND and SEND_IMM each way, RDMA write both ways, write with immediate into the direct
 * side, many WQEs per doorbell across ring wraps, an unsignaled WQE, a malformed one,
 * and a WQE whose phase bit is stale until it is rewritten. Functions the system
 * libraries (v44) lack are resolved with dlsym.
 *
 * DIRECT_RINGS_STRICT=1 (with EFA_SIM_PROFILE=strict) checks strict mode's rules for
 * consumer-written rings instead of sections 2-8 (strict_rules below).
 *
 * DIRECT_RINGS_SIGSEGV (issue 38): `before` / `after` installs a SIGSEGV handler of the
 * program's own (one that ends the program, as crash reporters do) before opening the
 * device / after the rings were handed out; the run must not notice. `crash` makes a
 * real segmentation fault after the last doorbell, which must kill the program. */
#include <signal.h>
#include <unistd.h>
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <infiniband/efadv.h>
#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_checks;
#define FAIL(...)                                                                       \
	do {                                                                            \
		fprintf(stderr, "FAIL direct_rings %s:%d: ", __FILE__, __LINE__);       \
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

/* The hardware formats (providers/efa/efa_io_defs.h is not installed). */
struct tx_meta {
	uint16_t req_id;
	uint8_t ctrl1; /* 3:0 op, 4 has_imm, 5 inline, 7 meta_desc */
	uint8_t ctrl2; /* 0 phase, 2 first, 3 last, 4 comp_req */
	uint16_t dest_qp_num;
	uint16_t length;
	uint32_t immediate_data;
	uint16_t ah;
	uint8_t ctrl3;
	uint8_t reserved;
	uint32_t qkey;
	uint8_t reserved2[6];
	uint16_t req_id_ex[3];
};
struct tx_buf {
	uint32_t length, lkey, addr_lo, addr_hi;
};
struct tx_wqe {
	struct tx_meta meta;
	struct tx_buf data[2]; /* SGEs, or RDMA remote (length, rkey, addr) + local buffer */
};
struct rx_desc {
	uint32_t addr_lo, addr_hi;
	uint16_t req_id, length;
	uint32_t lkey_ctrl; /* 23:0 lkey, 30 first, 31 last */
};
struct cqe {
	uint16_t req_id;
	uint8_t status;
	uint8_t flags; /* 0 phase, 2:1 queue (1 send, 2 recv), 3 has_imm, 6:4 op, 7 unsolicited */
	uint16_t qp_num;
	uint16_t length; /* receive completions from here on */
	uint16_t ah;
	uint16_t src_qp_num;
	uint32_t imm;
	uint16_t length_hi; /* write with immediate */
	uint8_t ext[14];
};
_Static_assert(sizeof(struct tx_meta) == 32, "meta descriptor");
_Static_assert(sizeof(struct tx_wqe) == 64, "64-byte WQE");
_Static_assert(sizeof(struct rx_desc) == 16, "RX descriptor");
_Static_assert(sizeof(struct cqe) == 32, "extended CQE");
_Static_assert(offsetof(struct cqe, imm) == 12, "CQE imm");
enum { OP_SEND = 0, OP_RDMA_WRITE = 2 };
#define META_DESC (1 << 7)
#define HAS_IMM (1 << 4)
#define FIRST_LAST ((1 << 2) | (1 << 3))
#define COMP_REQ (1 << 4)
#define QKEY 0x11111111u

/* A crash reporter's handler: anything that reaches it ends the program. */
static void on_segv(int sig)
{
	static const char msg[] = "direct_rings: the program's SIGSEGV handler ran\n";
	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(98);
	_exit(99);
}

static void install_segv_handler(const char *when)
{
	const char *mode = getenv("DIRECT_RINGS_SIGSEGV");
	if (!mode || strcmp(mode, when) != 0)
		return;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_segv;
	if (sigaction(SIGSEGV, &sa, NULL) != 0)
		FAIL("sigaction");
	printf("direct_rings: SIGSEGV handler installed %s\n", when);
}

static void *sym(const char *n)
{
	void *p = dlsym(RTLD_DEFAULT, n);
	if (!p)
		FAIL("dlsym(%s)", n);
	return p;
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void to_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };
	CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), 0);
	a.qp_state = IBV_QPS_RTR;
	CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
}

static struct ibv_qp *srd_qp(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq_ex *cq)
{
	struct ibv_qp_init_attr_ex qa = {
		.send_cq = ibv_cq_ex_to_cq(cq), .recv_cq = ibv_cq_ex_to_cq(cq),
		.qp_type = IBV_QPT_DRIVER, .pd = pd,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
				  IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
		.cap = { .max_send_wr = 16, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct efadv_qp_init_attr qe = { .driver_qp_type = EFADV_QP_DRIVER_TYPE_SRD };
	struct ibv_qp *qp = efadv_create_qp_ex(ctx, &qa, &qe, sizeof(qe));
	CHECK(qp);
	to_rts(qp);
	return qp;
}

/* The direct side's view of its queues. */
static struct efadv_wq_attr sq, rq;
static struct efadv_cq_attr cqa;
static uint16_t sq_pc, rq_pc, cq_cc;
static uint8_t sq_phase, cq_phase = 1;

static void ring(uint32_t *db, uint16_t pc)
{
	__atomic_thread_fence(__ATOMIC_RELEASE);
	*(volatile uint32_t *)db = pc;
}

static void rx_post(uint16_t req_id, void *buf, uint16_t len, uint32_t lkey)
{
	struct rx_desc d = { .addr_lo = (uint32_t)(uintptr_t)buf,
			     .addr_hi = (uint32_t)((uintptr_t)buf >> 32),
			     .req_id = req_id, .length = len,
			     .lkey_ctrl = (lkey & 0xffffff) | (1u << 30) | (1u << 31) };
	memcpy(rq.buffer + (rq_pc & (rq.num_entries - 1)) * rq.entry_size, &d, sizeof(d));
	rq_pc++;
	ring(rq.doorbell, rq_pc);
}

/* Writes one WQE into the next SQ slot (not rung yet). `phase_flip` writes a stale phase. */
static void tx_write(const struct tx_wqe *w, int phase_flip)
{
	struct tx_wqe x = *w;
	x.meta.ctrl2 |= (uint8_t)((sq_phase ^ phase_flip) & 1);
	memcpy(sq.buffer + (sq_pc & (sq.num_entries - 1)) * sq.entry_size, &x, sizeof(x));
	sq_pc++;
	if ((sq_pc & (sq.num_entries - 1)) == 0)
		sq_phase ^= 1;
}

static struct tx_wqe send_wqe(uint16_t req_id, uint16_t dest, uint16_t ah, void *buf, uint32_t len,
			      uint32_t lkey)
{
	struct tx_wqe w;
	memset(&w, 0, sizeof(w));
	w.meta.req_id = req_id;
	w.meta.ctrl1 = META_DESC | OP_SEND;
	w.meta.ctrl2 = FIRST_LAST | COMP_REQ;
	w.meta.dest_qp_num = dest;
	w.meta.length = 1;
	w.meta.ah = ah;
	w.meta.qkey = QKEY;
	w.data[0] = (struct tx_buf){ len, lkey, (uint32_t)(uintptr_t)buf, (uint32_t)((uintptr_t)buf >> 32) };
	return w;
}

/* The next CQE of the direct side's CQ, by phase bit (within `secs`), or 0 if none. */
static int cq_next(struct cqe *out, double secs)
{
	double end = now() + secs;
	for (;;) {
		volatile struct cqe *c = (volatile struct cqe *)(cqa.buffer + (cq_cc & (cqa.num_entries - 1)) * cqa.entry_size);
		if ((c->flags & 1) == cq_phase) {
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			memcpy(out, (const void *)c, sizeof(*out));
			cq_cc++;
			if ((cq_cc & (cqa.num_entries - 1)) == 0)
				cq_phase ^= 1;
			/* tell the device how far we got (consumer index) */
			ring(cqa.doorbell, cq_cc);
			return 1;
		}
		if (now() > end)
			return 0;
	}
}

static void expect_send_cqe(uint16_t req_id, uint8_t status)
{
	struct cqe c;
	if (!cq_next(&c, 5))
		FAIL("no completion for req_id %u", req_id);
	CHECK_EQ(c.req_id, req_id);
	CHECK_EQ(c.status, status);
	CHECK_EQ((c.flags >> 1) & 3, 1); /* send queue */
}

/* The verbs side: wait for one completion. */
static void peer_poll(struct ibv_cq *cq, struct ibv_wc *wc)
{
	double end = now() + 5;
	while (ibv_poll_cq(cq, 1, wc) == 0)
		if (now() > end)
			FAIL("peer: no completion");
}

static void peer_recv(struct ibv_qp *qp, uint64_t id, void *buf, uint32_t len, uint32_t lkey)
{
	struct ibv_sge s = { (uintptr_t)buf, len, lkey };
	struct ibv_recv_wr w = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad;
	CHECK_EQ(ibv_post_recv(qp, &w, &bad), 0);
}

#include "direct_rings_strict.h"

int main(void)
{
	int (*query_wqs)(struct ibv_qp *, struct efadv_wq_attr *, struct efadv_wq_attr *, uint32_t) =
		sym("efadv_query_qp_wqs");
	int (*query_cq)(struct ibv_cq *, struct efadv_cq_attr *, uint32_t) = sym("efadv_query_cq");
	install_segv_handler("before");
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n == 2);
	struct ibv_context *ca = ibv_open_device(list[0]), *cb = ibv_open_device(list[1]);
	CHECK(ca && cb);
	ibv_free_device_list(list);
	struct ibv_pd *pa = ibv_alloc_pd(ca), *pb = ibv_alloc_pd(cb);
	struct ibv_cq_init_attr_ex cia = { .cqe = 32, .wc_flags = IBV_WC_STANDARD_FLAGS };
	struct ibv_cq_ex *xa = ibv_create_cq_ex(ca, &cia), *xb = ibv_create_cq_ex(cb, &cia);
	CHECK(pa && pb && xa && xb);
	struct ibv_qp *qa = srd_qp(ca, pa, xa), *qb = srd_qp(cb, pb, xb);
	struct ibv_qp_ex *xqb = ibv_qp_to_qp_ex(qb);
	static char abuf[8192], bbuf[8192];
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_mr *ma = ibv_reg_mr(pa, abuf, sizeof(abuf), acc), *mb = ibv_reg_mr(pb, bbuf, sizeof(bbuf), acc);
	CHECK(ma && mb);
	union ibv_gid ga, gb;
	CHECK_EQ(ibv_query_gid(ca, 1, 0, &ga), 0);
	CHECK_EQ(ibv_query_gid(cb, 1, 0, &gb), 0);
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1, .grh.dgid = gb };
	struct ibv_ah *a2b = ibv_create_ah(pa, &aa);
	aa.grh.dgid = ga;
	struct ibv_ah *b2a = ibv_create_ah(pb, &aa); /* RDMA needs the responder to know us */
	CHECK(a2b && b2a);
	struct efadv_ah_attr ah_attr;
	CHECK_EQ(efadv_query_ah(a2b, &ah_attr, sizeof(ah_attr)), 0);
	uint16_t ahn = ah_attr.ahn;
	uint16_t bqpn = (uint16_t)qb->qp_num;

	/* The direct side's rings. */
	CHECK_EQ(query_wqs(qa, &sq, &rq, sizeof(sq)), 0);
	CHECK_EQ(query_cq(ibv_cq_ex_to_cq(xa), &cqa, sizeof(cqa)), 0);
	CHECK_EQ(sq.entry_size, 64);
	CHECK_EQ(sq.num_entries, 16);
	CHECK(sq.max_batch >= 1 && sq.max_batch < sq.num_entries);
	CHECK_EQ(rq.entry_size, 16);
	CHECK_EQ(cqa.entry_size, 32);
	CHECK_EQ(cqa.num_entries, 32);
	install_segv_handler("after");

	/* 1. Verbs SEND_IMM into a hand-posted RX descriptor. */
	rx_post(7, abuf, 64, ma->lkey);
	memcpy(bbuf, "to the direct side", 19);
	ibv_wr_start(xqb);
	xqb->wr_id = 100;
	xqb->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(xqb, htobe32(0xfeed));
	ibv_wr_set_ud_addr(xqb, b2a, qa->qp_num, QKEY);
	ibv_wr_set_sge(xqb, mb->lkey, (uintptr_t)bbuf, 19);
	CHECK_EQ(ibv_wr_complete(xqb), 0);
	struct ibv_wc wc;
	peer_poll(ibv_cq_ex_to_cq(xb), &wc);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.wr_id, 100);
	struct cqe c;
	CHECK(cq_next(&c, 5));
	CHECK_EQ((c.flags >> 1) & 3, 2); /* receive queue */
	CHECK_EQ(c.status, 0);
	CHECK_EQ(c.req_id, 7);
	CHECK_EQ(c.length, 19);
	CHECK(c.flags & (1 << 3)); /* has imm */
	CHECK_EQ(c.imm, 0xfeed);
	CHECK_EQ(c.src_qp_num, bqpn);
	CHECK_EQ(c.qp_num, qa->qp_num);
	CHECK(memcmp(abuf, "to the direct side", 19) == 0);

	if (getenv("DIRECT_RINGS_STRICT")) {
		strict_rules(qa, qb, ibv_cq_ex_to_cq(xb), bqpn, ahn, abuf, bbuf, ma, mb);
		printf("PASS direct_rings (strict rules, %d checks)\n", g_checks);
		return 0;
	}

	/* 2. A hand-written SEND to a verbs receive. */
	peer_recv(qb, 200, bbuf + 1024, 64, mb->lkey);
	memcpy(abuf + 1024, "from the direct side", 21);
	struct tx_wqe w = send_wqe(0x21, bqpn, ahn, abuf + 1024, 21, ma->lkey);
	tx_write(&w, 0);
	ring(sq.doorbell, sq_pc);
	expect_send_cqe(0x21, 0);
	peer_poll(ibv_cq_ex_to_cq(xb), &wc);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_RECV);
	CHECK_EQ(wc.wr_id, 200);
	CHECK_EQ(wc.byte_len, 21);
	CHECK(memcmp(bbuf + 1024, "from the direct side", 21) == 0);

	/* 3. A hand-written RDMA write into the verbs side's memory. */
	memset(abuf + 2048, 0xa5, 512);
	memset(w.data, 0, sizeof(w.data));
	w.meta.req_id = 0x22;
	w.meta.ctrl1 = META_DESC | OP_RDMA_WRITE;
	w.meta.ctrl2 = FIRST_LAST | COMP_REQ;
	uintptr_t remote = (uintptr_t)bbuf + 4096, local = (uintptr_t)abuf + 2048;
	w.data[0] = (struct tx_buf){ 512, mb->rkey, (uint32_t)remote, (uint32_t)(remote >> 32) };
	w.data[1] = (struct tx_buf){ 512, ma->lkey, (uint32_t)local, (uint32_t)(local >> 32) };
	tx_write(&w, 0);
	ring(sq.doorbell, sq_pc);
	CHECK(cq_next(&c, 5));
	CHECK_EQ(c.req_id, 0x22);
	CHECK_EQ(c.status, 0);
	CHECK_EQ((c.flags >> 4) & 7, OP_RDMA_WRITE);
	for (int i = 0; i < 512; i++)
		CHECK_EQ((unsigned char)bbuf[4096 + i], 0xa5);

	/* 4. Verbs RDMA write with immediate into the direct side: consumes an RX WQE. */
	rx_post(9, abuf, 0, ma->lkey);
	memset(bbuf + 6000, 0x3c, 700);
	ibv_wr_start(xqb);
	xqb->wr_id = 300;
	xqb->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write_imm(xqb, ma->rkey, (uintptr_t)abuf + 5000, htobe32(0xbeef));
	ibv_wr_set_ud_addr(xqb, b2a, qa->qp_num, QKEY);
	ibv_wr_set_sge(xqb, mb->lkey, (uintptr_t)bbuf + 6000, 700);
	CHECK_EQ(ibv_wr_complete(xqb), 0);
	peer_poll(ibv_cq_ex_to_cq(xb), &wc);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
	CHECK(cq_next(&c, 5));
	CHECK_EQ((c.flags >> 1) & 3, 2);
	CHECK_EQ((c.flags >> 4) & 7, OP_RDMA_WRITE);
	CHECK_EQ(c.req_id, 9);
	CHECK_EQ(c.imm, 0xbeef);
	CHECK_EQ(c.length | ((uint32_t)c.length_hi << 16), 700);
	for (int i = 0; i < 700; i++)
		CHECK_EQ((unsigned char)abuf[5000 + i], 0x3c);

	/* 5. Forty SENDs, four WQEs per doorbell: the SQ (16) and CQ (32) rings wrap, phase
	 *    bits flip; every message arrives with its data, every WQE completes once. */
	for (int i = 0; i < 40; i++)
		peer_recv(qb, 1000 + i, bbuf + 64 * (i % 16), 64, mb->lkey);
	int got = 0;
	for (int i = 0; i < 40; i += 4) {
		for (int k = i; k < i + 4; k++) {
			abuf[64 * (k % 16)] = (char)k;
			struct tx_wqe s = send_wqe((uint16_t)(0x100 + k), bqpn, ahn, abuf + 64 * (k % 16), 1, ma->lkey);
			tx_write(&s, 0);
		}
		ring(sq.doorbell, sq_pc);
		for (int k = i; k < i + 4; k++)
			expect_send_cqe((uint16_t)(0x100 + k), 0);
		for (int k = i; k < i + 4; k++) {
			peer_poll(ibv_cq_ex_to_cq(xb), &wc);
			CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			CHECK_EQ(wc.wr_id, 1000 + k);
			CHECK_EQ((unsigned char)bbuf[64 * (k % 16)], k);
			got++;
		}
	}
	CHECK_EQ(got, 40);

	/* 6. Unsignaled WQE (no COMP_REQ): delivered, no completion. A signaled one behind it
	 *    completes, so nothing is pending in between. */
	peer_recv(qb, 400, bbuf, 64, mb->lkey);
	peer_recv(qb, 401, bbuf + 64, 64, mb->lkey);
	w = send_wqe(0x30, bqpn, ahn, abuf, 8, ma->lkey);
	w.meta.ctrl2 = FIRST_LAST;
	tx_write(&w, 0);
	w = send_wqe(0x31, bqpn, ahn, abuf, 8, ma->lkey);
	tx_write(&w, 0);
	ring(sq.doorbell, sq_pc);
	expect_send_cqe(0x31, 0);
	peer_poll(ibv_cq_ex_to_cq(xb), &wc);
	CHECK_EQ(wc.wr_id, 400);
	peer_poll(ibv_cq_ex_to_cq(xb), &wc);
	CHECK_EQ(wc.wr_id, 401);

	/* 7. A malformed WQE (meta descriptor bit missing): status 2, nothing sent. */
	w = send_wqe(0x40, bqpn, ahn, abuf, 8, ma->lkey);
	w.meta.ctrl1 = OP_SEND;
	tx_write(&w, 0);
	ring(sq.doorbell, sq_pc);
	expect_send_cqe(0x40, 2); /* LOCAL_ERROR_QP_INTERNAL_ERROR */
	/*    and a WQE naming an AH that does not exist: status 4. */
	w = send_wqe(0x41, bqpn, 0x7777, abuf, 8, ma->lkey);
	tx_write(&w, 0);
	ring(sq.doorbell, sq_pc);
	expect_send_cqe(0x41, 4); /* LOCAL_ERROR_INVALID_AH */

	/* 8. A WQE whose phase bit is stale: the device waits; once the slot is rewritten with
	 *    the right phase (same doorbell), it goes. */
	peer_recv(qb, 500, bbuf, 64, mb->lkey);
	uint16_t slot_pc = sq_pc;
	uint8_t slot_phase = sq_phase;
	w = send_wqe(0x50, bqpn, ahn, abuf, 8, ma->lkey);
	tx_write(&w, 1);
	ring(sq.doorbell, sq_pc);
	CHECK_EQ(cq_next(&c, 0.05), 0);
	uint8_t *slot = sq.buffer + (slot_pc & (sq.num_entries - 1)) * sq.entry_size;
	__atomic_store_n(slot + offsetof(struct tx_meta, ctrl2), (uint8_t)(FIRST_LAST | COMP_REQ | slot_phase),
			 __ATOMIC_RELEASE);
	expect_send_cqe(0x50, 0);
	peer_poll(ibv_cq_ex_to_cq(xb), &wc);
	CHECK_EQ(wc.wr_id, 500);
	CHECK_EQ(cq_next(&c, 0.02), 0);

	if (getenv("DIRECT_RINGS_SIGSEGV") && strcmp(getenv("DIRECT_RINGS_SIGSEGV"), "crash") == 0) {
		fflush(stdout);
		fprintf(stderr, "direct_rings: storing through NULL\n");
		*(volatile int *)(uintptr_t)getenv("DIRECT_RINGS_NO_SUCH_VARIABLE") = 1;
		FAIL("survived a store through NULL");
	}

	CHECK_EQ(ibv_destroy_qp(qa), 0);
	CHECK_EQ(ibv_destroy_qp(qb), 0);
	CHECK_EQ(ibv_destroy_ah(a2b), 0);
	CHECK_EQ(ibv_destroy_ah(b2a), 0);
	CHECK_EQ(ibv_dereg_mr(ma), 0);
	CHECK_EQ(ibv_dereg_mr(mb), 0);
	CHECK_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(xa)), 0);
	CHECK_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(xb)), 0);
	CHECK_EQ(ibv_dealloc_pd(pa), 0);
	CHECK_EQ(ibv_dealloc_pd(pb), 0);
	CHECK_EQ(ibv_close_device(ca), 0);
	CHECK_EQ(ibv_close_device(cb), 0);
	printf("PASS direct_rings (%d checks)\n", g_checks);
	return 0;
}
