/* The private-but-exported helpers librdmacm imports: ibv_copy_{qp_attr,ah_attr,path_rec}
 * _from_kern / ibv_copy_path_rec_to_kern against the kernel ABI structs of the system
 * headers; plus reg_dmabuf_mr, processing hints and ibv_query_qp_data_in_order. */
#define _GNU_SOURCE
#include "common.h"
#include <infiniband/sa.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>
#include <fcntl.h>
#include <sys/mman.h>

/* Declared in rdma-core's driver.h / marshall.h, which are not installed. */
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src);
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src);

static void check_marshall(void)
{
	struct ib_uverbs_qp_attr k;
	memset(&k, 0, sizeof(k));
	k.qp_state = IBV_QPS_RTS;
	k.cur_qp_state = IBV_QPS_RTR;
	k.path_mtu = IBV_MTU_4096;
	k.qkey = 0x11111111;
	k.rq_psn = 7;
	k.sq_psn = 9;
	k.dest_qp_num = 0x1234;
	k.qp_access_flags = 6;
	k.ah_attr.grh.dgid[0] = 0xfe;
	k.ah_attr.grh.dgid[15] = 0x42;
	k.ah_attr.grh.flow_label = 77;
	k.ah_attr.grh.hop_limit = 64;
	k.ah_attr.dlid = 0x99;
	k.ah_attr.is_global = 1;
	k.ah_attr.port_num = 1;
	k.alt_ah_attr.sl = 3;
	k.max_send_wr = 128;
	k.max_recv_wr = 256;
	k.max_inline_data = 32;
	k.pkey_index = 2;
	k.sq_draining = 1;
	k.min_rnr_timer = 12;
	k.port_num = 1;
	k.retry_cnt = 5;
	k.rnr_retry = 7;
	k.alt_timeout = 14;
	struct ibv_qp_attr a;
	memset(&a, 0xee, sizeof(a));
	ibv_copy_qp_attr_from_kern(&a, &k);
	CHECK_EQ(a.qp_state, IBV_QPS_RTS);
	CHECK_EQ(a.cur_qp_state, IBV_QPS_RTR);
	CHECK_EQ(a.path_mtu, IBV_MTU_4096);
	CHECK_EQ(a.qkey, 0x11111111);
	CHECK_EQ(a.rq_psn, 7);
	CHECK_EQ(a.sq_psn, 9);
	CHECK_EQ(a.dest_qp_num, 0x1234);
	CHECK_EQ(a.qp_access_flags, 6);
	CHECK_EQ(a.ah_attr.grh.dgid.raw[0], 0xfe);
	CHECK_EQ(a.ah_attr.grh.dgid.raw[15], 0x42);
	CHECK_EQ(a.ah_attr.grh.flow_label, 77);
	CHECK_EQ(a.ah_attr.grh.hop_limit, 64);
	CHECK_EQ(a.ah_attr.dlid, 0x99);
	CHECK_EQ(a.ah_attr.is_global, 1);
	CHECK_EQ(a.ah_attr.port_num, 1);
	CHECK_EQ(a.alt_ah_attr.sl, 3);
	CHECK_EQ(a.cap.max_send_wr, 128);
	CHECK_EQ(a.cap.max_recv_wr, 256);
	CHECK_EQ(a.cap.max_inline_data, 32);
	CHECK_EQ(a.pkey_index, 2);
	CHECK_EQ(a.sq_draining, 1);
	CHECK_EQ(a.min_rnr_timer, 12);
	CHECK_EQ(a.retry_cnt, 5);
	CHECK_EQ(a.rnr_retry, 7);
	CHECK_EQ(a.alt_timeout, 14);

	struct ibv_ah_attr ah;
	memset(&ah, 0, sizeof(ah));
	ibv_copy_ah_attr_from_kern(&ah, &k.ah_attr);
	CHECK_EQ(ah.dlid, 0x99);
	CHECK_EQ(ah.grh.dgid.raw[15], 0x42);

	struct ib_user_path_rec kp;
	memset(&kp, 0, sizeof(kp));
	kp.dgid[3] = 1;
	kp.sgid[4] = 2;
	kp.dlid = htobe16(5);
	kp.slid = htobe16(6);
	kp.raw_traffic = 1;
	kp.flow_label = htobe32(8);
	kp.reversible = 1;
	kp.mtu = IBV_MTU_2048;
	kp.pkey = htobe16(0xffff);
	kp.hop_limit = 9;
	kp.traffic_class = 10;
	kp.numb_path = 11;
	kp.sl = 12;
	kp.rate = 13;
	kp.packet_life_time = 14;
	kp.preference = 15;
	struct ibv_sa_path_rec sp;
	memset(&sp, 0, sizeof(sp));
	ibv_copy_path_rec_from_kern(&sp, &kp);
	CHECK_EQ(sp.dgid.raw[3], 1);
	CHECK_EQ(sp.sgid.raw[4], 2);
	CHECK_EQ(sp.dlid, htobe16(5));
	CHECK_EQ(sp.slid, htobe16(6));
	CHECK_EQ(sp.raw_traffic, 1);
	CHECK_EQ(sp.flow_label, htobe32(8));
	CHECK_EQ(sp.reversible, 1);
	CHECK_EQ(sp.mtu, IBV_MTU_2048);
	CHECK_EQ(sp.pkey, htobe16(0xffff));
	CHECK_EQ(sp.hop_limit, 9);
	CHECK_EQ(sp.traffic_class, 10);
	CHECK_EQ(sp.numb_path, 11);
	CHECK_EQ(sp.sl, 12);
	CHECK_EQ(sp.rate, 13);
	CHECK_EQ(sp.packet_life_time, 14);
	CHECK_EQ(sp.preference, 15);
	struct ib_user_path_rec back;
	memset(&back, 0x55, sizeof(back));
	ibv_copy_path_rec_to_kern(&back, &sp);
	CHECK(memcmp(&back, &kp, sizeof(kp)) == 0, "path record round trip");
}

int main(void)
{
	g_test = "marshall";
	check_marshall();

	struct ep a;
	ep_open(&a, 0, 0, 0);
	/* dma-buf registration (a sealed efa-sim memfd stands in for a dma-buf) */
	int fd = memfd_create("efa-sim-dmabuf", MFD_ALLOW_SEALING);
	CHECK(fd >= 0, "memfd");
	CHECK_EQ(ftruncate(fd, 8192), 0);
	CHECK_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL), 0);
	struct ibv_mr *dm = ibv_reg_dmabuf_mr(a.pd, 0, 8192, 0x10000, fd, IBV_ACCESS_LOCAL_WRITE);
	CHECK_PTR(dm);
	CHECK_EQ(dm->length, 8192);
	CHECK(dm->lkey < (1u << 24), "lkey 24 bits");
	/* The kernel's order: remote atomic without local write is EINVAL (RDMA core), with it
	 * EOPNOTSUPP (the EFA driver has no atomics); zero length is EINVAL. */
	CHECK_NULL_ERRNO(ibv_reg_dmabuf_mr(a.pd, 0, 8192, 0, fd, IBV_ACCESS_REMOTE_ATOMIC), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_dmabuf_mr(a.pd, 0, 8192, 0, fd,
					   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC),
			 EOPNOTSUPP);
	CHECK_NULL_ERRNO(ibv_reg_dmabuf_mr(a.pd, 0, 0, 0, fd, IBV_ACCESS_LOCAL_WRITE), EINVAL);
	CHECK_EQ(ibv_dereg_mr(dm), 0);
	close(fd);

	/* processing hints have no observable effect but must be callable when requested */
	struct ibv_qp_init_attr_ex qx = { .send_cq = ibv_cq_ex_to_cq(a.cq), .recv_cq = ibv_cq_ex_to_cq(a.cq),
					  .qp_type = IBV_QPT_DRIVER, .pd = a.pd,
					  .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					  .send_ops_flags = IBV_QP_EX_WITH_SEND,
					  .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct efadv_qp_init_attr_v65 ea = { .driver_qp_type = EFADV_QP_DRIVER_TYPE_SRD,
					     .wr_flags = SIM_EFADV_WR_EX_WITH_PROCESSING_HINTS };
	struct ibv_qp *h = efadv_create_qp_ex(a.ctx, &qx, (struct efadv_qp_init_attr *)&ea, sizeof(ea));
	CHECK_PTR(h);
	struct efadv_qp_v65 *eq = efadv_qp_from_ibv_qp_ex(ibv_qp_to_qp_ex(h));
	CHECK_PTR(eq->wr_set_processing_hints);
	to_rts(h, 0x11111111, 1);
	static char buf[64];
	struct ibv_mr *mr = reg(a.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_ah *self = ah_to(a.pd, &a.gid);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(h);
	ibv_wr_start(x);
	x->wr_id = 5;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	eq->wr_set_processing_hints(eq, 1);
	ibv_wr_set_ud_addr(x, self, a.qp->qp_num, 0x11111111);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)buf, 8);
	CHECK_EQ(ibv_wr_complete(x), 0);
	/* loopback to our own QP (no receive posted: RNR retried forever, so just destroy) */
	CHECK_EQ(ibv_query_qp_data_in_order(h, IBV_WR_SEND, 0), 0);
	CHECK_EQ(ibv_destroy_qp(h), 0);
	CHECK_EQ(ibv_destroy_ah(self), 0);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	ep_close(&a);
	done();
	return 0;
}
