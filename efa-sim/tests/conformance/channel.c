/* Completion channels: pollable fd, ibv_req_notify_cq(0) arms once, ibv_get_cq_event /
 * ibv_ack_cq_events, EBUSY while CQs use the channel; RNR retry exhaustion on SRD. */
#include "common.h"
#include <fcntl.h>

static void send_one(struct ep *a, struct ibv_ah *ah, uint32_t qpn, struct ibv_mr *mr, void *buf, uint64_t id)
{
	ibv_wr_start(a->qpx);
	a->qpx->wr_id = id;
	a->qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(a->qpx);
	ibv_wr_set_ud_addr(a->qpx, ah, qpn, 0x11111111);
	ibv_wr_set_sge(a->qpx, mr->lkey, (uintptr_t)buf, 32);
	CHECK_EQ(ibv_wr_complete(a->qpx), 0);
}

int main(void)
{
	g_test = "channel";
	struct ep a, b;
	ep_open(&a, 0, 0, 0);
	ep_open(&b, 1, 0, 0);
	static char abuf[4096], bbuf[4096];
	struct ibv_mr *amr = reg(a.pd, abuf, sizeof(abuf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *bmr = reg(b.pd, bbuf, sizeof(bbuf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_ah *a2b = ah_to(a.pd, &b.gid);

	/* a receive QP on b whose CQ has a completion channel */
	struct ibv_comp_channel *ch = ibv_create_comp_channel(b.ctx);
	CHECK_PTR(ch);
	CHECK(ch->fd >= 0 && ch->context == b.ctx, "channel fields");
	struct ibv_cq *cq = ibv_create_cq(b.ctx, 16, (void *)0xc0ffee, ch, 0);
	CHECK_PTR(cq);
	CHECK(cq->channel == ch, "cq->channel");
	CHECK_EQ(ibv_destroy_comp_channel(ch), EBUSY);
	struct ibv_qp_init_attr_ex qx = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_DRIVER, .pd = b.pd,
					  .comp_mask = IBV_QP_INIT_ATTR_PD,
					  .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct efadv_qp_init_attr_v65 ea = { .driver_qp_type = EFADV_QP_DRIVER_TYPE_SRD };
	struct ibv_qp *r = efadv_create_qp_ex(b.ctx, &qx, (struct efadv_qp_init_attr *)&ea, sizeof(ea));
	CHECK_PTR(r);
	to_rts(r, 0x11111111, 1);
	struct ibv_sge sge = { (uintptr_t)bbuf, sizeof(bbuf), bmr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *rbad;

	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	CHECK_EQ(poll(&pfd, 1, 0), 0);
	CHECK_EQ(ibv_req_notify_cq(cq, 1), EOPNOTSUPP); /* solicited-only is not supported */
	CHECK_EQ(ibv_req_notify_cq(cq, 0), 0);

	for (int round = 0; round < 3; round++) {
		CHECK_EQ(ibv_post_recv(r, &rw, &rbad), 0);
		send_one(&a, a2b, r->qp_num, amr, abuf, 100 + round);
		struct ibv_poll_cq_attr pa = { 0 };
		CHECK_EQ(poll_one_ex(a.cq, &pa, 5), 0);
		CHECK_EQ(a.cq->status, IBV_WC_SUCCESS);
		ibv_end_poll(a.cq);
		/* the armed CQ signals the channel fd */
		CHECK_EQ(poll(&pfd, 1, 5000), 1);
		struct ibv_cq *ev_cq = NULL;
		void *ev_ctx = NULL;
		CHECK_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
		CHECK(ev_cq == cq, "event names the CQ");
		CHECK(ev_ctx == (void *)0xc0ffee, "event carries cq_context");
		ibv_ack_cq_events(cq, 1);
		CHECK_EQ(cq->comp_events_completed, (uint32_t)round + 1);
		struct ibv_wc wc;
		poll_one_wc(cq, &wc, 5);
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
		CHECK_EQ(wc.wr_id, 1);
		/* one event per arm: nothing more until re-armed */
		CHECK_EQ(poll(&pfd, 1, 0), 0);
		CHECK_EQ(ibv_req_notify_cq(cq, 0), 0);
	}
	/* non-blocking channel fd: no event → -1 */
	int fl = fcntl(ch->fd, F_GETFL);
	CHECK_EQ(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK), 0);
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	CHECK_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), -1);
	/* the async fd is pollable and quiet (EFA raises no async events) */
	struct pollfd apfd = { .fd = b.ctx->async_fd, .events = POLLIN };
	CHECK_EQ(poll(&apfd, 1, 0), 0);

	/* RNR on SRD: rnr_retry 1 and no receive posted → RNR_RETRY_EXC_ERR, vendor_err 10 */
	struct ibv_qp *rn = efadv_create_qp_ex(b.ctx, &qx, (struct efadv_qp_init_attr *)&ea, sizeof(ea));
	CHECK_PTR(rn);
	struct ibv_qp_attr m = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111 };
	CHECK_EQ(ibv_modify_qp(rn, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), 0);
	m.qp_state = IBV_QPS_RTR;
	CHECK_EQ(ibv_modify_qp(rn, &m, IBV_QP_STATE), 0);
	/* the sender's retry count is what matters: re-create a's QP with rnr_retry 1 */
	struct ibv_qp_init_attr_ex sx = { .send_cq = ibv_cq_ex_to_cq(a.cq), .recv_cq = ibv_cq_ex_to_cq(a.cq),
					  .qp_type = IBV_QPT_DRIVER, .pd = a.pd,
					  .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					  .send_ops_flags = IBV_QP_EX_WITH_SEND,
					  .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *s = efadv_create_qp_ex(a.ctx, &sx, (struct efadv_qp_init_attr *)&ea, sizeof(ea));
	CHECK_PTR(s);
	m.qp_state = IBV_QPS_INIT;
	CHECK_EQ(ibv_modify_qp(s, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), 0);
	m.qp_state = IBV_QPS_RTR;
	CHECK_EQ(ibv_modify_qp(s, &m, IBV_QP_STATE), 0);
	m.qp_state = IBV_QPS_RTS;
	m.rnr_retry = 1;
	CHECK_EQ(ibv_modify_qp(s, &m, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RNR_RETRY), 0);
	struct ep se = a;
	se.qpx = ibv_qp_to_qp_ex(s);
	send_one(&se, a2b, rn->qp_num, amr, abuf, 55);
	struct ibv_poll_cq_attr pa = { 0 };
	CHECK_EQ(poll_one_ex(a.cq, &pa, 30), 0);
	CHECK_EQ(a.cq->wr_id, 55);
	CHECK_EQ(a.cq->status, IBV_WC_RNR_RETRY_EXC_ERR);
	CHECK_EQ(ibv_wc_read_vendor_err(a.cq), 10);
	ibv_end_poll(a.cq);

	CHECK_EQ(ibv_destroy_qp(s), 0);
	CHECK_EQ(ibv_destroy_qp(rn), 0);
	CHECK_EQ(ibv_destroy_qp(r), 0);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	CHECK_EQ(ibv_destroy_comp_channel(ch), 0);
	CHECK_EQ(ibv_destroy_ah(a2b), 0);
	CHECK_EQ(ibv_dereg_mr(amr), 0);
	CHECK_EQ(ibv_dereg_mr(bmr), 0);
	ep_close(&a);
	ep_close(&b);
	done();
	return 0;
}
