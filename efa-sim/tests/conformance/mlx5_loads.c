/* A program linked against a provider library (Debian's libmlx5.so.1, which imports
 * rdma-core's IBVERBS_PRIVATE_34 node of libibverbs) besides libibverbs. Run on efa-sim with
 * LD_BIND_NOW=1 it must load (every private symbol resolves, the provider's constructor
 * registers its driver harmlessly), list only the software devices, and see that mlx5
 * supports none of them. */
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <stdio.h>

int main(void)
{
	int n = -1;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list) {
		printf("FAIL no device list\n");
		return 1;
	}
	printf("devices %d", n);
	for (int i = 0; i < n; i++)
		printf(" %s:mlx5=%d", ibv_get_device_name(list[i]), mlx5dv_is_supported(list[i]));
	printf("\n");
	ibv_free_device_list(list);
	printf("PASS mlx5_loads\n");
	return 0;
}
