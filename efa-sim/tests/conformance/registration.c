/* Memory registration is refused as the kernel refuses it (RDMA core first, then the EFA
 * driver), through every registration entry point: remote write or atomic without local
 * write (EINVAL), access bits the core does not know (EINVAL), on-demand paging (EOPNOTSUPP:
 * EFA has none), access the EFA driver does not support (EOPNOTSUPP), remote access the
 * device lacks the capability for (EOPNOTSUPP; device 1 runs without RDMA caps), a zero
 * length (EINVAL), and ranges that wrap around the address space (EINVAL). Optional-range
 * bits are dropped. ibv_reg_dmabuf_mr has the uverbs method's own rules: access bits it
 * does not take are EINVAL, so are an offset and iova in different places of their pages,
 * ranges past the dma-buf's end and fds that are no dma-buf (a regular file, an unsealed
 * memfd, a pipe: the kernel's dma_buf_get refuses them; a sealed efa-sim memfd stands in for
 * a dma-buf); closed fds are EBADF. Run with EFA_SIM_PROFILE=efa_1.caps=-rdma_read-rdma_write. */
#define _GNU_SOURCE
#include "common.h"
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#define LW IBV_ACCESS_LOCAL_WRITE

static struct ibv_mr *reg_with(int how, struct ibv_pd *pd, void *buf, size_t len, int fd, int access)
{
	switch (how) {
	case 0:
		return ibv_reg_mr(pd, buf, len, access);
	case 1:
		return ibv_reg_mr_iova2(pd, buf, len, (uintptr_t)buf, access);
	default:
		return ibv_reg_dmabuf_mr(pd, 0, len, 0x10000, fd, access);
	}
}

int main(void)
{
	g_test = "registration";
	struct ibv_context *full = open_dev(0), *bare = open_dev(1);
	struct ibv_pd *pd = ibv_alloc_pd(full), *bare_pd = ibv_alloc_pd(bare);
	CHECK_PTR(pd);
	CHECK_PTR(bare_pd);
	static char buf[8192];
	int fd = memfd_create("efa-sim-registration", MFD_ALLOW_SEALING);
	CHECK(fd >= 0, "memfd");
	CHECK_EQ(ftruncate(fd, 8192), 0);
	CHECK_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL), 0);

	for (int how = 0; how < 3; how++) {
		/* RDMA core: remote write / remote atomic need local write. */
		CHECK_NULL_ERRNO(reg_with(how, pd, buf, 64, fd, IBV_ACCESS_REMOTE_WRITE), EINVAL);
		CHECK_NULL_ERRNO(reg_with(how, pd, buf, 64, fd, IBV_ACCESS_REMOTE_ATOMIC), EINVAL);
		CHECK_NULL_ERRNO(reg_with(how, pd, buf, 64, fd, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE),
				 EINVAL);
		/* Bits the core does not know. */
		CHECK_NULL_ERRNO(reg_with(how, pd, buf, 64, fd, LW | (1 << 15)), EINVAL);
		/* No on-demand paging on EFA; MW bind, zero-based, huge pages are not supported by
		 * the EFA driver. The dma-buf method takes none of these bits at all (its access
		 * attribute allows local/remote write, remote read/atomic, relaxed ordering): EINVAL. */
		int driver_refuses = how == 2 ? EINVAL : EOPNOTSUPP;
		CHECK_NULL_ERRNO(reg_with(how, pd, buf, 64, fd, LW | IBV_ACCESS_ON_DEMAND), driver_refuses);
		CHECK_NULL_ERRNO(reg_with(how, pd, buf, 64, fd, LW | IBV_ACCESS_MW_BIND), driver_refuses);
		CHECK_NULL_ERRNO(reg_with(how, pd, buf, 64, fd, LW | IBV_ACCESS_ZERO_BASED), driver_refuses);
		CHECK_NULL_ERRNO(reg_with(how, pd, buf, 64, fd, LW | IBV_ACCESS_HUGETLB), driver_refuses);
		/* The EFA driver has no atomics. */
		CHECK_NULL_ERRNO(reg_with(how, pd, buf, 64, fd, LW | IBV_ACCESS_REMOTE_ATOMIC), EOPNOTSUPP);
		/* Remote access the device lacks the capability for. */
		CHECK_NULL_ERRNO(reg_with(how, bare_pd, buf, 64, fd, IBV_ACCESS_REMOTE_READ), EOPNOTSUPP);
		CHECK_NULL_ERRNO(reg_with(how, bare_pd, buf, 64, fd, LW | IBV_ACCESS_REMOTE_WRITE), EOPNOTSUPP);
		/* Zero length. */
		CHECK_NULL_ERRNO(reg_with(how, pd, buf, 0, fd, LW), EINVAL);
		/* What the full device accepts, optional-range bits dropped. */
		struct ibv_mr *ok = reg_with(how, pd, buf, 64, fd,
					     LW | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
					     IBV_ACCESS_RELAXED_ORDERING);
		CHECK_PTR(ok);
		CHECK_EQ(ibv_dereg_mr(ok), 0);
		struct ibv_mr *local = reg_with(how, bare_pd, buf, 64, fd, LW);
		CHECK_PTR(local);
		CHECK_EQ(ibv_dereg_mr(local), 0);
	}
	/* dma-buf only: an offset and iova in different places of their pages (the uverbs
	 * method's first check), past the end of the dma-buf, a closed fd (EBADF, NCCL's probe
	 * for dma-buf support relies on it), an fd that is no dma-buf (a pipe). */
	CHECK_NULL_ERRNO(ibv_reg_dmabuf_mr(pd, 8, 64, 0x10000, fd, LW), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_dmabuf_mr(pd, 4096, 4097, 0x10000, fd, LW), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0), EBADF);
	int p[2];
	CHECK_EQ(pipe(p), 0);
	CHECK_NULL_ERRNO(ibv_reg_dmabuf_mr(pd, 0, 64, 0, p[0], LW), EINVAL);
	close(p[0]);
	close(p[1]);
	CHECK_NULL_ERRNO(ibv_reg_dmabuf_mr(pd, 0, 64, 0, p[0], LW), EBADF);
	/* A regular file and a memfd without seals are no dma-bufs either: mapped, they could be
	 * truncated under the device's writes (SIGBUS). */
	FILE *tmp = tmpfile();
	CHECK(tmp != NULL, "tmpfile");
	CHECK_EQ(ftruncate(fileno(tmp), 8192), 0);
	CHECK_NULL_ERRNO(ibv_reg_dmabuf_mr(pd, 0, 64, 0, fileno(tmp), LW), EINVAL);
	fclose(tmp);
	int unsealed = memfd_create("efa-sim-unsealed", 0);
	CHECK(unsealed >= 0, "memfd");
	CHECK_EQ(ftruncate(unsealed, 8192), 0);
	CHECK_NULL_ERRNO(ibv_reg_dmabuf_mr(pd, 0, 64, 0, unsealed, LW), EINVAL);
	close(unsealed);
	/* rdma-core reports a dma-buf MR's addr as its offset. */
	struct ibv_mr *at = ibv_reg_dmabuf_mr(pd, 4096, 64, 0x11000, fd, LW);
	CHECK_PTR(at);
	CHECK(at->addr == (void *)4096 && at->length == 64, "dma-buf mr addr/length");
	CHECK_EQ(ibv_dereg_mr(at), 0);
	/* Ranges that wrap: the end past the top of the address space, or its page rounding. */
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, (void *)(UINTPTR_MAX - 100), 4096, LW), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_mr(pd, (void *)(UINTPTR_MAX - 4200), 4096, LW), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_mr_iova2(pd, buf, 64, UINT64_MAX - 10, LW), EINVAL);
	CHECK_NULL_ERRNO(ibv_reg_dmabuf_mr(pd, UINT64_MAX - 10, 64, 0, fd, LW), EINVAL);
	close(fd);

	CHECK_EQ(ibv_dealloc_pd(pd), 0);
	CHECK_EQ(ibv_dealloc_pd(bare_pd), 0);
	CHECK_EQ(ibv_close_device(full), 0);
	CHECK_EQ(ibv_close_device(bare), 0);
	done();
	return 0;
}
