/* Zero-length SGEs may carry a NULL address (libfabric DGRAM does); NULL with a length,
 * or inline lengths that overflow, are rejected with EINVAL instead of crashing. */
#include "common.h"
int main(void)
{
	g_test = "null_sge";
	struct ep a, b;
	ep_open(&a, 0, 0, 0);
	ep_open(&b, 1, 0, 0);
	static char buf[64];
	struct ibv_mr *mr = reg(b.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_ah *ah = ah_to(a.pd, &b.gid);
	struct ibv_sge rs = { (uintptr_t)buf, 64, mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK_EQ(ibv_post_recv(b.qp, &rw, &rbad), 0);
	struct ibv_sge ss[2] = { { 0, 0, 0 }, { 0, 0, 0 } };
	struct ibv_send_wr sw = { .wr_id = 2, .sg_list = ss, .num_sge = 2, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE }, *sbad;
	sw.wr.ud.ah = ah; sw.wr.ud.remote_qpn = b.qp->qp_num; sw.wr.ud.remote_qkey = 0x11111111;
	CHECK_EQ(ibv_post_send(a.qp, &sw, &sbad), 0);
	struct ibv_wc wc;
	poll_one_wc(ibv_cq_ex_to_cq(a.cq), &wc, 5);
	CHECK_EQ(wc.status, 0);
	ss[0].length = 4; /* NULL with a length */
	CHECK_EQ(ibv_post_send(a.qp, &sw, &sbad), EINVAL);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 3; a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(a.qpx);
	ibv_wr_set_ud_addr(a.qpx, ah, b.qp->qp_num, 0x11111111);
	struct ibv_data_buf db[2] = { { NULL, 0 }, { NULL, SIZE_MAX } };
	ibv_wr_set_inline_data_list(a.qpx, 2, db);
	CHECK_EQ(ibv_wr_complete(a.qpx), EINVAL);
	done();
	return 0;
}
