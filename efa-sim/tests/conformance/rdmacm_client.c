/* A librdmacm consumer (built with gcc -lrdmacm -libverbs against the system headers)
 * run on the software device. Debian's librdmacm.so.1 is linked BIND_NOW against
 * libibverbs.so.1, so merely starting proves every verbs symbol it imports exists.
 *
 * EFA has no RDMA-CM (no IB CM, no iWARP): on a real EFA machine rdma_get_devices
 * lists the verbs devices, while connection setup fails. This program makes the
 * usual calls of an RDMA-CM client and prints one line per call:
 *   <call> ok [detail]        or        <call> fail errno=<n> (<text>)
 * and "PASS rdmacm_client" at the end; the Rust test decides what must have failed.
 * It exits non-zero only when a call breaks its contract (e.g. fails without errno). */
#include <errno.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int broken;

static void report_fail(const char *call)
{
	int e = errno;
	printf("%s fail errno=%d (%s)\n", call, e, strerror(e));
	if (e == 0) {
		printf("CONTRACT %s failed without setting errno\n", call);
		broken = 1;
	}
}

int main(void)
{
	int n = -1;
	errno = 0;
	struct ibv_context **devs = rdma_get_devices(&n);
	if (devs) {
		printf("rdma_get_devices ok n=%d", n);
		for (int i = 0; i < n; i++) {
			if (!devs[i] || !devs[i]->device) {
				printf("\nCONTRACT rdma_get_devices entry %d is NULL\n", i);
				broken = 1;
				break;
			}
			printf(" %s", ibv_get_device_name(devs[i]->device));
		}
		printf("\n");
		if (devs[n]) {
			printf("CONTRACT rdma_get_devices list not NULL-terminated\n");
			broken = 1;
		}
		rdma_free_devices(devs);
	} else {
		report_fail("rdma_get_devices");
	}

	errno = 0;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (ch) {
		printf("rdma_create_event_channel ok fd=%d\n", ch->fd);
	} else {
		report_fail("rdma_create_event_channel");
	}

	struct rdma_cm_id *id = NULL;
	if (ch) {
		errno = 0;
		if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0) {
			printf("rdma_create_id ok\n");
		} else {
			report_fail("rdma_create_id");
			id = NULL;
		}
	}
	if (id) {
		struct sockaddr_in sin = {.sin_family = AF_INET,
					  .sin_addr.s_addr = htonl(0x7f000001)};
		errno = 0;
		if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, 1000) == 0)
			printf("rdma_resolve_addr ok\n");
		else
			report_fail("rdma_resolve_addr");
		rdma_destroy_id(id);
	}
	if (ch)
		rdma_destroy_event_channel(ch);

	/* The rping-style path: resolve, then create an endpoint synchronously. */
	struct rdma_addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	errno = 0;
	int rc = rdma_getaddrinfo("127.0.0.1", "7471", &hints, &res);
	if (rc == 0 && res) {
		printf("rdma_getaddrinfo ok\n");
		struct rdma_cm_id *ep = NULL;
		struct ibv_qp_init_attr attr;
		memset(&attr, 0, sizeof(attr));
		attr.cap.max_send_wr = attr.cap.max_recv_wr = 1;
		attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
		attr.sq_sig_all = 1;
		errno = 0;
		if (rdma_create_ep(&ep, res, NULL, &attr) == 0) {
			printf("rdma_create_ep ok\n");
			rdma_destroy_ep(ep);
		} else {
			report_fail("rdma_create_ep");
		}
		rdma_freeaddrinfo(res);
	} else {
		/* rdma_getaddrinfo returns -1 + errno, or a getaddrinfo EAI_* code. */
		if (rc == -1)
			report_fail("rdma_getaddrinfo");
		else
			printf("rdma_getaddrinfo fail rc=%d (%s)\n", rc, gai_strerror(rc));
	}

	if (broken)
		return 1;
	printf("PASS rdmacm_client\n");
	return 0;
}
