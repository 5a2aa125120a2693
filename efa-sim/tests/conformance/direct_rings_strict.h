/* direct_rings.c's strict-mode section (DIRECT_RINGS_STRICT=1), included after its
 * helpers: what a NIC's LLQ does not forgive (issue 35). */
/* Waits for `n` send completions in any order (strict mode gives up posting order) and
 * checks that exactly req_ids first..first+n-1 came, each with status `status_of(i)`. */
static void expect_send_cqes(uint16_t first, int n, int bad_from, struct ibv_cq *peer_cq)
{
	int seen[32] = { 0 };
	for (int k = 0; k < n; k++) {
		struct cqe c;
		if (!cq_next(&c, 5))
			FAIL("%d of %d completions", k, n);
		CHECK_EQ((c.flags >> 1) & 3, 1);
		int i = c.req_id - first;
		CHECK(i >= 0 && i < n && !seen[i]);
		seen[i] = 1;
		CHECK_EQ(c.status, i >= bad_from ? 2 : 0);
	}
	for (int k = 0; k < (bad_from < n ? bad_from : n); k++) {
		struct ibv_wc wc;
		peer_poll(peer_cq, &wc);
		CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	}
}

/* Strict mode (DIRECT_RINGS_STRICT=1 with EFA_SIM_PROFILE=strict, issue 35): the device
 * reads the LLQ as a NIC does. A consumed slot is poisoned (zeros, the stale phase); a
 * slot rewritten in part is a bad WQE; a WQE whose phase is wrong at its doorbell is a bad
 * WQE at once, not one the device waits for; a doorbell the device sees as such (the
 * consumer calls efa_sim_direct_sq_doorbell) may announce max_batch WQEs, no more; a
 * doorbell is a 32-bit store. */
static void strict_rules(struct ibv_qp *qa, struct ibv_qp *qb, struct ibv_cq *peer_cq,
			 uint16_t bqpn, uint16_t ahn, char *abuf, char *bbuf, struct ibv_mr *ma,
			 struct ibv_mr *mb)
{
	int (*sq_doorbell)(struct ibv_qp *) = sym("efa_sim_direct_sq_doorbell");
	/* 1. Good SENDs fill the ring once, four per doorbell; each consumed slot is left
	 *    zeroed with the phase of the lap it was consumed in. */
	for (int i = 0; i < 16; i++)
		peer_recv(qb, 600 + i, bbuf + 64 * i, 64, mb->lkey);
	for (int i = 0; i < 16; i += 4) {
		for (int k = i; k < i + 4; k++) {
			struct tx_wqe w = send_wqe((uint16_t)(0x600 + k), bqpn, ahn, abuf, 8, ma->lkey);
			tx_write(&w, 0);
		}
		ring(sq.doorbell, sq_pc);
		expect_send_cqes((uint16_t)(0x600 + i), 4, 4, peer_cq);
	}
	CHECK_EQ(sq_pc & (sq.num_entries - 1), 0);
	for (uint32_t slot = 0; slot < sq.num_entries; slot++) {
		const uint8_t *p = sq.buffer + slot * sq.entry_size;
		for (uint32_t b = 0; b < sq.entry_size; b++)
			CHECK_EQ(p[b], b == offsetof(struct tx_meta, ctrl2) ? (uint8_t)(sq_phase ^ 1) : 0);
	}
	/* 2. A slot rewritten in part (request id and control bits, relying on the rest of the
	 *    WQE that was there): a bad WQE, status 2, nothing delivered. */
	uint8_t *slot = sq.buffer + (sq_pc & (sq.num_entries - 1)) * sq.entry_size;
	struct tx_meta *m = (struct tx_meta *)slot;
	m->req_id = 0x700;
	m->ctrl2 = (uint8_t)(FIRST_LAST | COMP_REQ | sq_phase);
	sq_pc++;
	ring(sq.doorbell, sq_pc);
	expect_send_cqes(0x700, 1, 0, peer_cq);
	/* 3. A WQE whose phase is stale at its doorbell: status 2 at once. */
	struct tx_wqe w = send_wqe(0x701, bqpn, ahn, abuf, 8, ma->lkey);
	tx_write(&w, 1);
	ring(sq.doorbell, sq_pc);
	expect_send_cqes(0x701, 1, 0, peer_cq);
	/* 4. max_batch + 1 WQEs behind one doorbell, which the consumer says it stored: the
	 *    first max_batch go, the last is refused. */
	uint32_t n = sq.max_batch + 1;
	CHECK(n <= 16 && n <= sq.num_entries);
	for (uint32_t i = 0; i < n; i++)
		peer_recv(qb, 800 + i, bbuf + 64 * i, 64, mb->lkey);
	for (uint32_t i = 0; i < n; i++) {
		w = send_wqe((uint16_t)(0x800 + i), bqpn, ahn, abuf, 8, ma->lkey);
		tx_write(&w, 0);
	}
	ring(sq.doorbell, sq_pc);
	CHECK_EQ(sq_doorbell(qa), 0);
	expect_send_cqes(0x800, (int)n, (int)sq.max_batch, peer_cq);
	/* The peer's last receive was not used: one more good SEND takes it. */
	w = send_wqe(0x900, bqpn, ahn, abuf, 8, ma->lkey);
	tx_write(&w, 0);
	ring(sq.doorbell, sq_pc);
	expect_send_cqes(0x900, 1, 1, peer_cq);
	/* 5. A doorbell written by a 64-bit store (the register is 32 bits wide): its WQEs
	 *    are refused. */
	w = send_wqe(0x901, bqpn, ahn, abuf, 8, ma->lkey);
	tx_write(&w, 0);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	*(volatile uint64_t *)(void *)sq.doorbell = sq_pc;
	expect_send_cqes(0x901, 1, 0, peer_cq);
	/*    and the next doorbell, of the right width, goes as usual. */
	peer_recv(qb, 902, bbuf, 64, mb->lkey);
	w = send_wqe(0x902, bqpn, ahn, abuf, 8, ma->lkey);
	tx_write(&w, 0);
	ring(sq.doorbell, sq_pc);
	expect_send_cqes(0x902, 1, 1, peer_cq);
}

