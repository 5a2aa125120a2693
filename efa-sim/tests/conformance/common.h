/* Shared helpers for the efa-sim C conformance tests. Built by gcc against the
 * system rdma-core headers, linked -libverbs -lefa, run on the software device. */
#ifndef EFA_SIM_CONFORMANCE_COMMON_H
#define EFA_SIM_CONFORMANCE_COMMON_H
#include <errno.h>
#include <infiniband/efadv.h>
#include <infiniband/verbs.h>
#include <dlfcn.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Newer (v65) efadv definitions the system v44 headers lack. */
struct efadv_qp_init_attr_v65 {
	uint64_t comp_mask;
	uint32_t driver_qp_type;
	uint16_t flags;
	uint8_t sl;
	uint8_t reserved;
	uint64_t wr_flags;
};
#define SIM_CAPS_RDMA_WRITE (1 << 3)
#define SIM_CAPS_UNSOLICITED_WRITE_RECV (1 << 4)
/* Private-but-exported helpers (rdma-core's driver.h, not installed). */
const char *ibv_get_sysfs_path(void);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);
#define SIM_EFADV_QP_FLAGS_UNSOLICITED_WRITE_RECV (1 << 0)
#define SIM_EFADV_QP_FLAGS_INLINE_WRITE (1 << 1)
#define SIM_EFADV_WR_EX_WITH_PROCESSING_HINTS (1 << 0)
#define SIM_EFADV_WC_EX_WITH_IS_UNSOLICITED (1 << 1)
struct efadv_cq_v65 {
	uint64_t comp_mask;
	int (*wc_read_sgid)(struct efadv_cq *efadv_cq, union ibv_gid *sgid);
	bool (*wc_is_unsolicited)(struct efadv_cq *efadv_cq);
};
struct efadv_qp_v65 {
	uint64_t comp_mask;
	void (*wr_set_processing_hints)(struct efadv_qp_v65 *qp, uint32_t hints);
};
struct efadv_mr_attr_v65 {
	uint64_t comp_mask;
	uint16_t ic_id_validity;
	uint16_t recv_ic_id;
	uint16_t rdma_read_ic_id;
	uint16_t rdma_recv_ic_id;
};
struct efadv_sq_depth_attr {
	uint64_t comp_mask;
	uint32_t flags;
	uint32_t max_send_sge;
	uint32_t max_rdma_sge;
	uint32_t max_inline_data;
};
struct efadv_rq_depth_attr {
	uint64_t comp_mask;
	uint32_t max_recv_sge;
};

static const char *g_test = "?";
static int g_checks;

#define FAIL(...)                                                                 \
	do {                                                                      \
		fprintf(stderr, "FAIL %s %s:%d: ", g_test, __FILE__, __LINE__);   \
		fprintf(stderr, __VA_ARGS__);                                     \
		fprintf(stderr, "\n");                                            \
		exit(1);                                                          \
	} while (0)

#define CHECK(cond, ...)                                                          \
	do {                                                                      \
		g_checks++;                                                       \
		if (!(cond)) {                                                    \
			fprintf(stderr, "FAIL %s %s:%d: check `%s` failed: ", g_test, \
				__FILE__, __LINE__, #cond);                       \
			fprintf(stderr, __VA_ARGS__);                             \
			fprintf(stderr, "\n");                                    \
			exit(1);                                                  \
		}                                                                 \
	} while (0)

#define CHECK_EQ(a, b)                                                            \
	do {                                                                      \
		long long _a = (long long)(a), _b = (long long)(b);               \
		g_checks++;                                                       \
		if (_a != _b)                                                     \
			FAIL("%s == %lld, expected %s == %lld", #a, _a, #b, _b);  \
	} while (0)

#define CHECK_PTR(p)                                                              \
	do {                                                                      \
		g_checks++;                                                       \
		if (!(p))                                                         \
			FAIL("%s returned NULL, errno %d (%s)", #p, errno,        \
			     strerror(errno));                                    \
	} while (0)

/* Expects a NULL return with errno == e. */
#define CHECK_NULL_ERRNO(expr, e)                                                 \
	do {                                                                      \
		errno = 0;                                                        \
		void *_p = (void *)(expr);                                        \
		g_checks++;                                                       \
		if (_p)                                                           \
			FAIL("%s succeeded, expected NULL errno %s", #expr, #e);  \
		if (errno != (e))                                                 \
			FAIL("%s: errno %d (%s), expected %s", #expr, errno,      \
			     strerror(errno), #e);                                \
	} while (0)

/* Functions newer than the system libefa (v44, EFA_1.0..1.2) cannot be linked against
 * it; consumers resolve them at run time, as we do here. */
static void *sim_sym(const char *name)
{
	void *p = dlsym(RTLD_DEFAULT, name);
	if (!p)
		FAIL("dlsym(%s): %s", name, dlerror());
	return p;
}
typedef struct efadv_qp_v65 *(*efadv_qp_from_ibv_qp_ex_fn)(struct ibv_qp_ex *);
typedef int (*efadv_query_mr_fn)(struct ibv_mr *, struct efadv_mr_attr_v65 *, uint32_t);
typedef int (*efadv_get_max_sq_depth_fn)(struct ibv_context *, struct efadv_sq_depth_attr *, uint32_t);
typedef int (*efadv_get_max_rq_depth_fn)(struct ibv_context *, struct efadv_rq_depth_attr *, uint32_t);
typedef int (*efadv_query_cq_fn)(struct ibv_cq *, void *, uint32_t);
typedef int (*efadv_query_qp_wqs_fn)(struct ibv_qp *, void *, void *, uint32_t);
#define efadv_qp_from_ibv_qp_ex ((efadv_qp_from_ibv_qp_ex_fn)sim_sym("efadv_qp_from_ibv_qp_ex"))
#define efadv_query_mr ((efadv_query_mr_fn)sim_sym("efadv_query_mr"))
#define efadv_get_max_sq_depth ((efadv_get_max_sq_depth_fn)sim_sym("efadv_get_max_sq_depth"))
#define efadv_get_max_rq_depth ((efadv_get_max_rq_depth_fn)sim_sym("efadv_get_max_rq_depth"))
#define efadv_query_cq ((efadv_query_cq_fn)sim_sym("efadv_query_cq"))
#define efadv_query_qp_wqs ((efadv_query_qp_wqs_fn)sim_sym("efadv_query_qp_wqs"))

static void done(void)
{
	printf("PASS %s (%d checks)\n", g_test, g_checks);
}

static struct ibv_context *open_dev(int index)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n <= index)
		FAIL("need device %d, have %d", index, n);
	struct ibv_context *ctx = ibv_open_device(list[index]);
	CHECK_PTR(ctx);
	ibv_free_device_list(list);
	return ctx;
}

/* Polls one completion from an extended CQ within a few seconds. */
static int poll_one_ex(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *attr, int seconds)
{
	time_t end = time(NULL) + seconds;
	while (time(NULL) <= end) {
		int ret = ibv_start_poll(cq, attr);
		if (ret == 0)
			return 0;
		if (ret != ENOENT)
			return ret;
		usleep(100);
	}
	return ETIMEDOUT;
}

/* Legacy poll of exactly one completion within a few seconds. */
static void poll_one_wc(struct ibv_cq *cq, struct ibv_wc *wc, int seconds)
{
	time_t end = time(NULL) + seconds;
	while (time(NULL) <= end) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n < 0)
			FAIL("ibv_poll_cq returned %d", n);
		if (n == 1)
			return;
		usleep(100);
	}
	FAIL("no completion within %d s", seconds);
}

static void to_rts(struct ibv_qp *qp, uint32_t qkey, int srd)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	a.qkey = qkey;
	CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	a.rnr_retry = 7;
	CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | (srd ? IBV_QP_RNR_RETRY : 0)), 0);
	CHECK_EQ(qp->state, IBV_QPS_RTS);
}

/* An SRD endpoint: context, PD, one extended CQ, one QP (ex) with all send ops. */
struct ep {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq_ex *cq;
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx;
	union ibv_gid gid;
};

static uint64_t all_srd_ops(void)
{
	return IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
	       IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
}

static void ep_open(struct ep *e, int dev, uint64_t efa_wc_flags, uint16_t qp_flags)
{
	memset(e, 0, sizeof(*e));
	e->ctx = open_dev(dev);
	e->pd = ibv_alloc_pd(e->ctx);
	CHECK_PTR(e->pd);
	struct ibv_cq_init_attr_ex cattr = {
		.cqe = 256,
		.wc_flags = IBV_WC_STANDARD_FLAGS,
	};
	struct efadv_cq_init_attr eattr = { .wc_flags = efa_wc_flags };
	e->cq = efadv_create_cq(e->ctx, &cattr, &eattr, sizeof(eattr));
	CHECK_PTR(e->cq);
	struct ibv_qp_init_attr_ex qattr = {
		.send_cq = ibv_cq_ex_to_cq(e->cq),
		.recv_cq = ibv_cq_ex_to_cq(e->cq),
		.cap = { .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = 32 },
		.qp_type = IBV_QPT_DRIVER,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = e->pd,
		.send_ops_flags = all_srd_ops(),
	};
	struct efadv_qp_init_attr_v65 qeattr = { .driver_qp_type = EFADV_QP_DRIVER_TYPE_SRD, .flags = qp_flags };
	e->qp = efadv_create_qp_ex(e->ctx, &qattr, (struct efadv_qp_init_attr *)&qeattr, sizeof(qeattr));
	CHECK_PTR(e->qp);
	e->qpx = ibv_qp_to_qp_ex(e->qp);
	CHECK_PTR(e->qpx);
	CHECK_EQ(ibv_query_gid(e->ctx, 1, 0, &e->gid), 0);
	to_rts(e->qp, 0x11111111, 1);
}

static void ep_close(struct ep *e)
{
	CHECK_EQ(ibv_destroy_qp(e->qp), 0);
	CHECK_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(e->cq)), 0);
	CHECK_EQ(ibv_dealloc_pd(e->pd), 0);
	CHECK_EQ(ibv_close_device(e->ctx), 0);
}

static struct ibv_ah *ah_to(struct ibv_pd *pd, const union ibv_gid *gid)
{
	struct ibv_ah_attr a;
	memset(&a, 0, sizeof(a));
	a.is_global = 1;
	a.port_num = 1;
	a.grh.dgid = *gid;
	struct ibv_ah *ah = ibv_create_ah(pd, &a);
	CHECK_PTR(ah);
	return ah;
}

static struct ibv_mr *reg(struct ibv_pd *pd, void *buf, size_t len, int access)
{
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, len, access);
	CHECK_PTR(mr);
	return mr;
}

#endif
