/* Two processes on the software device: the child receives on efa_1, the parent sends
 * SEND and RDMA WRITE from efa_0; addresses are exchanged over a pipe. */
#include "common.h"
#include <sys/wait.h>

struct addr {
	union ibv_gid gid;
	uint32_t qpn;
	uint32_t rkey;
	uint64_t buf;
};

static int child(int wfd, int rfd)
{
	g_test = "two_process(child)";
	struct ep b;
	ep_open(&b, 1, 0, 0);
	static char buf[8192];
	struct ibv_mr *mr = reg(b.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_sge sge = { (uintptr_t)buf, 4096, mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 42, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK_EQ(ibv_post_recv(b.qp, &wr, &bad), 0);
	struct addr me = { .gid = b.gid, .qpn = b.qp->qp_num, .rkey = mr->rkey, .buf = (uintptr_t)buf + 4096 };
	CHECK_EQ(write(wfd, &me, sizeof(me)), (long)sizeof(me));
	/* the RDMA writer needs our AH for its GID: read the parent's GID, create it */
	union ibv_gid peer;
	CHECK_EQ(read(rfd, &peer, sizeof(peer)), (long)sizeof(peer));
	struct ibv_ah *ah = ah_to(b.pd, &peer);
	char ok = 1;
	CHECK_EQ(write(wfd, &ok, 1), 1);
	struct ibv_poll_cq_attr pa = { 0 };
	CHECK_EQ(poll_one_ex(b.cq, &pa, 10), 0);
	CHECK_EQ(b.cq->status, IBV_WC_SUCCESS);
	CHECK_EQ(b.cq->wr_id, 42);
	CHECK_EQ(ibv_wc_read_byte_len(b.cq), 1000);
	ibv_end_poll(b.cq);
	for (int i = 0; i < 1000; i++)
		CHECK_EQ((unsigned char)buf[i], (unsigned char)(i * 3));
	/* wait until the parent says its RDMA write completed */
	CHECK_EQ(read(rfd, &ok, 1), 1);
	for (int i = 0; i < 2048; i++)
		CHECK_EQ((unsigned char)buf[4096 + i], (unsigned char)(i ^ 0x33));
	CHECK_EQ(ibv_destroy_ah(ah), 0);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	ep_close(&b);
	done();
	return 0;
}

int main(void)
{
	g_test = "two_process";
	int c2p[2], p2c[2];
	CHECK_EQ(pipe(c2p), 0);
	CHECK_EQ(pipe(p2c), 0);
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0)
		return child(c2p[1], p2c[0]);
	struct ep a;
	ep_open(&a, 0, 0, 0);
	struct addr peer;
	CHECK_EQ(read(c2p[0], &peer, sizeof(peer)), (long)sizeof(peer));
	CHECK_EQ(write(p2c[1], &a.gid, sizeof(a.gid)), (long)sizeof(a.gid));
	char ok;
	CHECK_EQ(read(c2p[0], &ok, 1), 1);
	static char buf[4096];
	for (int i = 0; i < 4096; i++)
		buf[i] = (char)(i * 3);
	struct ibv_mr *mr = reg(a.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_ah *ah = ah_to(a.pd, &peer.gid);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 1;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(a.qpx);
	ibv_wr_set_ud_addr(a.qpx, ah, peer.qpn, 0x11111111);
	ibv_wr_set_sge(a.qpx, mr->lkey, (uintptr_t)buf, 1000);
	CHECK_EQ(ibv_wr_complete(a.qpx), 0);
	struct ibv_poll_cq_attr pa = { 0 };
	CHECK_EQ(poll_one_ex(a.cq, &pa, 10), 0);
	CHECK_EQ(a.cq->status, IBV_WC_SUCCESS);
	ibv_end_poll(a.cq);
	for (int i = 0; i < 2048; i++)
		buf[i] = (char)(i ^ 0x33);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 2;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, peer.rkey, peer.buf);
	ibv_wr_set_ud_addr(a.qpx, ah, peer.qpn, 0x11111111);
	ibv_wr_set_sge(a.qpx, mr->lkey, (uintptr_t)buf, 2048);
	CHECK_EQ(ibv_wr_complete(a.qpx), 0);
	CHECK_EQ(poll_one_ex(a.cq, &pa, 10), 0);
	if (a.cq->status != IBV_WC_SUCCESS)
		FAIL("RDMA write status %d vendor_err %u", a.cq->status, ibv_wc_read_vendor_err(a.cq));
	ibv_end_poll(a.cq);
	CHECK_EQ(write(p2c[1], &ok, 1), 1);
	int status = 0;
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (status 0x%x)", status);
	CHECK_EQ(ibv_destroy_ah(ah), 0);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	ep_close(&a);
	done();
	return 0;
}
