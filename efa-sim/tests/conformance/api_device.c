/* Device list, context layout, queries, strings, unsupported verbs → EOPNOTSUPP,
 * efadv queries and their inlen rules. */
#include "common.h"

/* Call the exported legacy ibv_query_port symbol (the header turns ibv_query_port into
 * a macro that goes through verbs_context->query_port instead). */
#undef ibv_query_port

static void check_device_list(void)
{
	int n = -1;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK_PTR(list);
	CHECK_EQ(n, 2);
	CHECK(list[2] == NULL, "list not NULL-terminated");
	for (int i = 0; i < n; i++) {
		char name[16];
		snprintf(name, sizeof(name), "efa_%d", i);
		CHECK(strcmp(ibv_get_device_name(list[i]), name) == 0, "name %s", ibv_get_device_name(list[i]));
		CHECK(strcmp(list[i]->name, name) == 0, "ibv_device.name");
		CHECK_EQ(ibv_get_device_index(list[i]), i);
		CHECK_EQ(list[i]->node_type, IBV_NODE_UNSPECIFIED);
		CHECK_EQ(list[i]->transport_type, IBV_TRANSPORT_UNSPECIFIED);
		char path[256];
		snprintf(path, sizeof(path), "%s/class/infiniband/efa_%d", ibv_get_sysfs_path(), i);
		CHECK(strcmp(list[i]->ibdev_path, path) == 0, "ibdev_path %s", list[i]->ibdev_path);
	}
	ibv_free_device_list(list);
}

static void check_context(struct ibv_context *ctx)
{
	CHECK(ctx->abi_compat == (void *)UINTPTR_MAX, "abi_compat must be UINTPTR_MAX");
	struct verbs_context *vctx = verbs_get_ctx(ctx);
	CHECK_PTR(vctx);
	CHECK(vctx->sz >= sizeof(struct verbs_context), "sz %zu < v44 size %zu", vctx->sz, sizeof(struct verbs_context));
	CHECK_EQ(vctx->sz, 696); /* newest (v65) layout */
	CHECK(verbs_get_ctx_op(ctx, query_port) != NULL, "query_port op");
	CHECK(verbs_get_ctx_op(ctx, create_cq_ex) != NULL, "create_cq_ex op");
	CHECK(verbs_get_ctx_op(ctx, create_qp_ex) != NULL, "create_qp_ex op");
	CHECK(verbs_get_ctx_op(ctx, query_device_ex) != NULL, "query_device_ex op");
	CHECK(verbs_get_ctx_op(ctx, open_xrcd) != NULL, "no op slot may be NULL");
	CHECK(ctx->ops.poll_cq && ctx->ops.post_send && ctx->ops.post_recv && ctx->ops.req_notify_cq, "ops");
	CHECK(ctx->ops.post_srq_recv != NULL, "post_srq_recv slot filled with a stub");
	struct pollfd pfd = { .fd = ctx->async_fd, .events = POLLIN };
	CHECK_EQ(poll(&pfd, 1, 0), 0); /* pollable, no async events */
	CHECK(ctx->num_comp_vectors >= 1, "num_comp_vectors");
}

static void check_queries(struct ibv_context *ctx)
{
	struct ibv_device_attr da;
	memset(&da, 0xab, sizeof(da));
	CHECK_EQ(ibv_query_device(ctx, &da), 0);
	CHECK_EQ(da.vendor_id, 0x1d0f);
	CHECK_EQ(da.vendor_part_id, 0xefa2);
	CHECK(strncmp(da.fw_ver, "efa-sim", 7) == 0, "fw_ver %s", da.fw_ver);
	CHECK_EQ(da.phys_port_cnt, 1);
	CHECK_EQ(da.max_pkeys, 1);
	CHECK_EQ(da.atomic_cap, IBV_ATOMIC_NONE);
	CHECK_EQ(da.max_srq, 0);
	CHECK_EQ(da.max_sge, 2);
	CHECK_EQ(da.max_sge_rd, 1);

	struct ibv_device_attr_ex dax;
	CHECK_EQ(ibv_query_device_ex(ctx, NULL, &dax), 0);
	CHECK_EQ(dax.orig_attr.vendor_id, 0x1d0f);
	CHECK_EQ(dax.orig_attr.max_qp, da.max_qp);
	struct ibv_query_device_ex_input in = { .comp_mask = 1 };
	CHECK_EQ(ibv_query_device_ex(ctx, &in, &dax), EINVAL);

	struct ibv_port_attr pa;
	memset(&pa, 0xab, sizeof(pa));
	CHECK_EQ(ibv_query_port(ctx, 1, (struct _compat_ibv_port_attr *)&pa), 0);
	CHECK_EQ(pa.state, IBV_PORT_ACTIVE);
	CHECK_EQ(pa.max_mtu, IBV_MTU_4096);
	CHECK_EQ(pa.active_mtu, IBV_MTU_4096);
	CHECK_EQ(pa.lmc, 1);
	CHECK_EQ(pa.link_layer, IBV_LINK_LAYER_UNSPECIFIED);
	CHECK_EQ(pa.gid_tbl_len, 1);
	CHECK_EQ(pa.phys_state, 5);
	/* The legacy exported symbol writes only the 48-byte _compat_ibv_port_attr. */
	CHECK_EQ(pa.port_cap_flags2, 0xabab);
	CHECK_EQ(ibv_query_port(ctx, 2, (struct _compat_ibv_port_attr *)&pa), EINVAL);

	/* The header's inline path (verbs_context->query_port, length-aware). */
	struct verbs_context *vctx = verbs_get_ctx(ctx);
	struct {
		struct ibv_port_attr a;
		unsigned char canary[16];
	} big;
	memset(&big, 0xcd, sizeof(big));
	CHECK_EQ(vctx->query_port(ctx, 1, &big.a, sizeof(big.a)), 0);
	CHECK_EQ(big.a.port_cap_flags2, 0);
	CHECK_EQ(big.a.max_msg_sz > 4096, 1);
	for (size_t i = 0; i < sizeof(big.canary); i++)
		CHECK_EQ(big.canary[i], 0xcd);

	union ibv_gid gid;
	CHECK_EQ(ibv_query_gid(ctx, 1, 0, &gid), 0);
	CHECK_EQ(gid.raw[0], 0xfe);
	CHECK_EQ(gid.raw[1], 0x80);
	CHECK_EQ(ibv_query_gid(ctx, 1, 1, &gid), -1);
	CHECK_EQ(ibv_query_gid(ctx, 2, 0, &gid), -1);
	struct ibv_gid_entry ent;
	CHECK_EQ(ibv_query_gid_ex(ctx, 1, 0, &ent, 0), 0);
	CHECK(memcmp(&ent.gid, &gid, 16) == 0, "gid_ex differs");
	CHECK_EQ(ent.port_num, 1);
	struct ibv_gid_entry tbl[4];
	CHECK_EQ(ibv_query_gid_table(ctx, tbl, 4, 0), 1);
	CHECK(memcmp(&tbl[0].gid, &gid, 16) == 0, "gid table differs");

	__be16 pkey = 0;
	CHECK_EQ(ibv_query_pkey(ctx, 1, 0, &pkey), 0);
	CHECK_EQ(pkey, 0xffff);
	CHECK_EQ(ibv_query_pkey(ctx, 1, 1, &pkey), -1);
	CHECK_EQ(ibv_get_pkey_index(ctx, 1, htobe16(0xffff)), 0);
}

static void check_strings(void)
{
	CHECK(strcmp(ibv_wc_status_str(IBV_WC_SUCCESS), "success") == 0, "wc success");
	CHECK(strcmp(ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR), "remote access error") == 0, "wc rem access");
	CHECK(strcmp(ibv_wc_status_str(IBV_WC_RNR_RETRY_EXC_ERR), "RNR retry counter exceeded") == 0, "wc rnr");
	CHECK(strcmp(ibv_port_state_str(IBV_PORT_ACTIVE), "active") == 0, "port active");
	CHECK(strcmp(ibv_node_type_str(IBV_NODE_UNSPECIFIED), "unspecified") == 0, "node unspecified");
	CHECK(strcmp(ibv_event_type_str(IBV_EVENT_PORT_ACTIVE), "port active") == 0, "event");
	CHECK_EQ(ibv_rate_to_mult(IBV_RATE_10_GBPS), 4);
	CHECK_EQ(mult_to_ibv_rate(4), IBV_RATE_10_GBPS);
	CHECK_EQ(ibv_rate_to_mbps(IBV_RATE_100_GBPS), 103125);
	CHECK_EQ(mbps_to_ibv_rate(103125), IBV_RATE_100_GBPS);
	CHECK_EQ(ibv_fork_init(), 0);
	CHECK_EQ(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
}

static void check_unsupported(struct ibv_context *ctx)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK_PTR(pd);
	struct ibv_srq_init_attr sattr = { .attr = { .max_wr = 1, .max_sge = 1 } };
	CHECK_NULL_ERRNO(ibv_create_srq(pd, &sattr), EOPNOTSUPP);
	CHECK_NULL_ERRNO(ibv_alloc_mw(pd, IBV_MW_TYPE_1), EOPNOTSUPP);
	struct ibv_wq_init_attr wattr = { .wq_type = IBV_WQT_RQ };
	CHECK_NULL_ERRNO(ibv_create_wq(ctx, &wattr), EOPNOTSUPP);
	struct ibv_alloc_dm_attr dmattr = { .length = 64 };
	CHECK_NULL_ERRNO(ibv_alloc_dm(ctx, &dmattr), EOPNOTSUPP);
	struct ibv_xrcd_init_attr xattr = { 0 };
	CHECK_NULL_ERRNO(ibv_open_xrcd(ctx, &xattr), EOPNOTSUPP);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK_PTR(cq);
	CHECK_EQ(ibv_resize_cq(cq, 32), EOPNOTSUPP);
	struct ibv_modify_cq_attr mattr = { .attr_mask = IBV_CQ_ATTR_MODERATE };
	CHECK_EQ(ibv_modify_cq(cq, &mattr), EOPNOTSUPP);
	CHECK_EQ(ibv_req_notify_cq(cq, 1), EOPNOTSUPP); /* solicited_only */
	struct ibv_values_ex vals = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK };
	CHECK_EQ(ibv_query_rt_values_ex(ctx, &vals), EOPNOTSUPP);
	char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK_PTR(mr);
	errno = 0;
	CHECK_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, 0), IBV_REREG_MR_ERR_INPUT);
	CHECK_EQ(errno, EOPNOTSUPP);
	union ibv_gid mg = { 0 };
	CHECK_EQ(ibv_query_ece(NULL, NULL), EOPNOTSUPP);
	(void)mg;
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	CHECK_EQ(ibv_dealloc_pd(pd), 0);
}

static void check_efadv(struct ibv_context *ctx)
{
	struct efadv_device_attr ea;
	memset(&ea, 0xee, sizeof(ea));
	CHECK_EQ(efadv_query_device(ctx, &ea, sizeof(ea)), 0);
	CHECK_EQ(ea.comp_mask, 0);
	CHECK_EQ(ea.max_sq_sge, 2);
	CHECK_EQ(ea.inline_buf_size, 32);
	CHECK(ea.device_caps & EFADV_DEVICE_ATTR_CAPS_RDMA_READ, "RDMA_READ cap");
	CHECK(ea.device_caps & SIM_CAPS_RDMA_WRITE, "RDMA_WRITE cap");
	CHECK(ea.max_rdma_size >= 65536, "max_rdma_size");
	/* Too short: must cover inline_buf_size_ex (offset 22). */
	CHECK_EQ(efadv_query_device(ctx, &ea, 20), EINVAL);
	/* 24 bytes: no device_caps/max_rdma_size; memset to zero beyond what is filled. */
	unsigned char raw[40];
	memset(raw, 0x77, sizeof(raw));
	CHECK_EQ(efadv_query_device(ctx, (struct efadv_device_attr *)raw, 24), 0);
	CHECK_EQ(raw[24], 0x77); /* nothing written past inlen */
	/* 28 bytes: device_caps without RDMA bits, no max_rdma_size */
	memset(raw, 0x77, sizeof(raw));
	CHECK_EQ(efadv_query_device(ctx, (struct efadv_device_attr *)raw, 28), 0);
	uint32_t caps;
	memcpy(&caps, raw + 24, 4);
	CHECK_EQ(caps & (EFADV_DEVICE_ATTR_CAPS_RDMA_READ | SIM_CAPS_RDMA_WRITE), 0);
	CHECK_EQ(raw[28], 0x77);
	/* Larger struct than ours: zero-filled. */
	memset(raw, 0x77, sizeof(raw));
	CHECK_EQ(efadv_query_device(ctx, (struct efadv_device_attr *)raw, 40), 0);
	for (int i = 32; i < 40; i++)
		CHECK_EQ(raw[i], 0);

	struct efadv_sq_depth_attr sq = { .max_send_sge = 1, .max_inline_data = 0 };
	int d64 = efadv_get_max_sq_depth(ctx, &sq, sizeof(sq));
	CHECK(d64 > 0 && (d64 & (d64 - 1)) == 0, "sq depth %d not a power of two", d64);
	sq.max_inline_data = 33;
	CHECK_EQ(efadv_get_max_sq_depth(ctx, &sq, sizeof(sq)), -EINVAL); /* > inline_buf_size_ex 32 */
	sq.max_inline_data = 0;
	sq.flags = 1; /* INLINE_WRITE → 128-byte WQEs, half the depth */
	CHECK_EQ(efadv_get_max_sq_depth(ctx, &sq, sizeof(sq)), d64 / 2);
	sq.flags = 0;
	sq.max_send_sge = 3;
	CHECK_EQ(efadv_get_max_sq_depth(ctx, &sq, sizeof(sq)), -EINVAL);
	sq.max_send_sge = 1;
	sq.comp_mask = 1;
	CHECK_EQ(efadv_get_max_sq_depth(ctx, &sq, sizeof(sq)), -EINVAL);
	sq.comp_mask = 0;
	CHECK_EQ(efadv_get_max_sq_depth(ctx, &sq, 16), -EINVAL);
	struct efadv_rq_depth_attr rq = { .max_recv_sge = 1 };
	int r1 = efadv_get_max_rq_depth(ctx, &rq, sizeof(rq));
	CHECK(r1 > 0, "rq depth");
	rq.max_recv_sge = 2;
	CHECK_EQ(efadv_get_max_rq_depth(ctx, &rq, sizeof(rq)), r1 / 2);
	rq.max_recv_sge = 3;
	CHECK_EQ(efadv_get_max_rq_depth(ctx, &rq, sizeof(rq)), -EINVAL);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK_PTR(mr);
	struct efadv_mr_attr_v65 ma;
	memset(&ma, 0x55, sizeof(ma));
	CHECK_EQ(efadv_query_mr(mr, &ma, sizeof(ma)), 0);
	CHECK_EQ(ma.ic_id_validity, 0);
	CHECK_EQ(ma.comp_mask, 0);
	CHECK_EQ(efadv_query_mr(mr, &ma, 12), EINVAL);
	/* The CQ ring (efadv_cq_attr of rdma-core 59+: comp_mask@0 buffer@8 entry_size@16
	 * num_entries@20 doorbell@24): 32-byte entries, the granted depth; inlen must cover
	 * num_entries, and the doorbell is written only when covered. */
	struct ibv_cq *cq = ibv_create_cq(ctx, 5, NULL, NULL, 0);
	CHECK_PTR(cq);
	struct { uint64_t comp_mask; void *buffer; uint32_t entry_size, num_entries; void *doorbell; } ca;
	memset(&ca, 0x55, sizeof(ca));
	CHECK_EQ(efadv_query_cq(cq, &ca, 20), EINVAL);
	CHECK_EQ(efadv_query_cq(cq, &ca, 24), 0);
	CHECK_EQ(ca.comp_mask, 0);
	CHECK(ca.buffer != NULL, "ring buffer");
	CHECK_EQ(ca.entry_size, 32);
	CHECK_EQ(ca.num_entries, (uint32_t)cq->cqe);
	CHECK_EQ(ca.num_entries, 8);
	CHECK(ca.doorbell == (void *)0x5555555555555555ULL, "doorbell untouched for inlen 24");
	CHECK_EQ(efadv_query_cq(cq, &ca, sizeof(ca)), 0);
	CHECK(ca.doorbell != NULL && ((uintptr_t)ca.doorbell & 3) == 0, "doorbell");
	/* Nothing was ever completed: every slot's phase bit is still 0. */
	for (uint32_t i = 0; i < ca.num_entries; i++)
		CHECK_EQ(((volatile uint8_t *)ca.buffer)[i * 32 + 3] & 1, 0);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	CHECK_EQ(ibv_dealloc_pd(pd), 0);
}

static void check_sysfs(void)
{
	const char *p = ibv_get_sysfs_path();
	CHECK_PTR(p);
	char want[256];
	snprintf(want, sizeof(want), "%s", getenv("SYSFS_PATH") ? getenv("SYSFS_PATH") : "/sys");
	for (size_t n = strlen(want); n > 1 && want[n - 1] == '/'; n--)
		want[n - 1] = 0; /* libibverbs strips trailing slashes */
	CHECK(strcmp(p, want) == 0, "sysfs path %s, expected %s", p, want);
	char tmpl[] = "/tmp/efa-sim-sysfs-XXXXXX";
	CHECK_PTR(mkdtemp(tmpl));
	char path[128];
	snprintf(path, sizeof(path), "%s/abi_version", tmpl);
	FILE *f = fopen(path, "w");
	CHECK_PTR(f);
	fputs("6\n", f);
	fclose(f);
	char buf[16];
	memset(buf, 'x', sizeof(buf));
	CHECK_EQ(ibv_read_sysfs_file(tmpl, "abi_version", buf, sizeof(buf)), 1);
	CHECK_EQ(buf[0], '6');
	CHECK_EQ(buf[1], 0);
	CHECK_EQ(ibv_read_sysfs_file(tmpl, "missing", buf, sizeof(buf)), -1);
	CHECK_EQ(errno, ENOENT);
	unlink(path);
	rmdir(tmpl);
}

int main(void)
{
	g_test = "api_device";
	check_device_list();
	struct ibv_context *ctx = open_dev(0);
	check_context(ctx);
	check_queries(ctx);
	check_strings();
	check_unsupported(ctx);
	check_efadv(ctx);
	check_sysfs();
	CHECK_EQ(ibv_close_device(ctx), 0);
	done();
	return 0;
}
