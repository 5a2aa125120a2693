/* The data path allocates nothing on the caller's thread: after warm-up, posting
 * (ibv_wr_* and legacy ibv_post_send/ibv_post_recv) and polling (ibv_cq_ex and ibv_poll_cq) make no malloc-family
 * call from this thread. Counted by interposing malloc/calloc/realloc/memalign here. */
#include "common.h"
#include <malloc.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static __thread int counting;
static __thread long allocations;

void *malloc(size_t n)
{
	if (counting)
		allocations++;
	return __libc_malloc(n);
}
void *calloc(size_t a, size_t b)
{
	if (counting)
		allocations++;
	return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n)
{
	if (counting)
		allocations++;
	return __libc_realloc(p, n);
}
int posix_memalign(void **out, size_t align, size_t n)
{
	if (counting)
		allocations++;
	*out = __libc_memalign(align, n);
	return *out ? 0 : ENOMEM;
}
void *aligned_alloc(size_t align, size_t n)
{
	if (counting)
		allocations++;
	return __libc_memalign(align, n);
}
void *memalign(size_t align, size_t n)
{
	if (counting)
		allocations++;
	return __libc_memalign(align, n);
}

static void round_trip(struct ep *a, struct ep *b, struct ibv_ah *ah, struct ibv_mr *amr, struct ibv_mr *bmr,
		       char *abuf, char *bbuf, int legacy_poll, uint64_t id)
{
	struct ibv_sge rs = { (uintptr_t)bbuf, 256, bmr->lkey };
	struct ibv_recv_wr rw = { .wr_id = id, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK_EQ(ibv_post_recv(b->qp, &rw, &rbad), 0);
	if (id % 3 == 0) {
		/* legacy ibv_post_send */
		struct ibv_sge ss = { (uintptr_t)abuf, 64, amr->lkey };
		struct ibv_send_wr sw = { .wr_id = id, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED },
				   *sbad;
		sw.wr.ud.ah = ah;
		sw.wr.ud.remote_qpn = b->qp->qp_num;
		sw.wr.ud.remote_qkey = 0x11111111;
		CHECK_EQ(ibv_post_send(a->qp, &sw, &sbad), 0);
	} else {
		ibv_wr_start(a->qpx);
		a->qpx->wr_id = id;
		a->qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(a->qpx);
		ibv_wr_set_ud_addr(a->qpx, ah, b->qp->qp_num, 0x11111111);
		ibv_wr_set_sge(a->qpx, amr->lkey, (uintptr_t)abuf, 64);
		CHECK_EQ(ibv_wr_complete(a->qpx), 0);
	}
	struct ibv_poll_cq_attr pa = { 0 };
	if (legacy_poll) {
		struct ibv_wc wc;
		poll_one_wc(ibv_cq_ex_to_cq(a->cq), &wc, 5);
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		poll_one_wc(ibv_cq_ex_to_cq(b->cq), &wc, 5);
		CHECK_EQ(wc.wr_id, id);
	} else {
		CHECK_EQ(poll_one_ex(a->cq, &pa, 5), 0);
		CHECK_EQ(a->cq->status, IBV_WC_SUCCESS);
		ibv_end_poll(a->cq);
		CHECK_EQ(poll_one_ex(b->cq, &pa, 5), 0);
		CHECK_EQ(b->cq->wr_id, id);
		CHECK_EQ(ibv_wc_read_byte_len(b->cq), 64);
		ibv_end_poll(b->cq);
	}
}

int main(void)
{
	g_test = "no_alloc";
	struct ep a, b;
	ep_open(&a, 0, 0, 0);
	ep_open(&b, 1, 0, 0);
	static char abuf[4096], bbuf[4096];
	struct ibv_mr *amr = reg(a.pd, abuf, sizeof(abuf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *bmr = reg(b.pd, bbuf, sizeof(bbuf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_ah *ah = ah_to(a.pd, &b.gid);
	/* warm-up: first-use allocations (staging list, thread-locals, ...) happen here */
	for (int i = 0; i < 64; i++)
		round_trip(&a, &b, ah, amr, bmr, abuf, bbuf, i & 1, i);
	/* the counter sees the library's allocations (object creation allocates) */
	counting = 1;
	struct ibv_pd *probe = ibv_alloc_pd(a.ctx);
	counting = 0;
	CHECK_PTR(probe);
	CHECK(allocations > 0, "interposed malloc did not see the library's allocation");
	CHECK_EQ(ibv_dealloc_pd(probe), 0);
	allocations = 0;
	counting = 1;
	for (int i = 0; i < 1000; i++)
		round_trip(&a, &b, ah, amr, bmr, abuf, bbuf, i & 1, 1000 + i);
	counting = 0;
	if (allocations != 0)
		FAIL("%ld allocations on the posting/polling thread in 1000 round trips", allocations);
	g_checks++;
	CHECK_EQ(ibv_destroy_ah(ah), 0);
	CHECK_EQ(ibv_dereg_mr(amr), 0);
	CHECK_EQ(ibv_dereg_mr(bmr), 0);
	ep_close(&a);
	ep_close(&b);
	done();
	return 0;
}
