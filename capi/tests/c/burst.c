/*
 * cxdirect from C: two emulated functions wired back to back; 1,000 numbered frames sent from
 * one and received, in order and intact, on the other; then the boundary's error cases, each
 * with its code. Exits 0 when every check holds, 1 at the first that does not.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cxdirect.h"

#define PACKETS 1000
#define BATCH 32

#define STR2(x) #x
#define STR(x) STR2(x)

/* Frame `seq`: broadcast, a local experimental EtherType, the sequence number, then bytes
 * that depend on it; 60 to 187 bytes long. */
static size_t make_frame(uint32_t seq, uint8_t *frame) {
    size_t len = 60 + (seq % 128);
    memset(frame, 0xff, 6);
    memcpy(frame + 6, "\x02\x00\x00\x00\x00\x01", 6);
    frame[12] = 0x88;
    frame[13] = 0xb5;
    frame[14] = (uint8_t)(seq >> 24);
    frame[15] = (uint8_t)(seq >> 16);
    frame[16] = (uint8_t)(seq >> 8);
    frame[17] = (uint8_t)seq;
    for (size_t i = 18; i < len; i++)
        frame[i] = (uint8_t)(seq * 7 + i);
    return len;
}

/* Checks a received frame against what `make_frame(expect)` made. */
static void check_frame(cxd_mbuf *m, uint32_t expect) {
    uint8_t want[256], got[256];
    size_t len = make_frame(expect, want);
    int n = cxd_mbuf_len(m);
    if (n != (int)len) {
        fprintf(stderr, "frame %u: %d bytes, expected %zu\n", expect, n, len);
        exit(1);
    }
    EXPECT(cxd_mbuf_read(m, 0, got, sizeof got), (int)len);
    uint32_t seq = (uint32_t)got[14] << 24 | (uint32_t)got[15] << 16 |
                   (uint32_t)got[16] << 8 | got[17];
    if (seq != expect || memcmp(got, want, len) != 0) {
        fprintf(stderr, "frame %u arrived as %u or with other bytes\n", expect, seq);
        exit(1);
    }
}

int main(void) {
    const char *built =
        STR(CXD_VERSION_MAJOR) "." STR(CXD_VERSION_MINOR) "." STR(CXD_VERSION_PATCH);
    CHECK(strcmp(cxd_version(), built) == 0);

    cxd_device *dev_a = NULL, *dev_b = NULL;
    EXPECT(cxd_open_emulated_pair(&dev_a, &dev_b), CXD_ERROR_OK);

    struct cxd_port_config cfg;
    EXPECT(cxd_port_config_default(&cfg), CXD_ERROR_OK);
    cfg.ring_size = 256;
    cfg.pool_buffers = 1024;

    /* A flag no CXD_PORT_* names is refused before the device is touched. */
    struct cxd_port_config bad = cfg;
    bad.flags |= 1u << 30;
    cxd_port *port_a = NULL, *port_b = NULL;
    EXPECT(cxd_port_start(dev_a, &bad, &port_a), CXD_ERROR_CONFIG);
    CHECK(strstr(cxd_last_error(), "flags") != NULL);

    EXPECT(cxd_port_start(dev_a, &cfg, &port_a), CXD_ERROR_OK);
    EXPECT(cxd_port_start(dev_b, &cfg, &port_b), CXD_ERROR_OK);
    EXPECT(cxd_port_start(dev_a, &cfg, &port_a), CXD_ERROR_BUSY);

    cxd_txq *txq = NULL;
    cxd_rxq *rxq = NULL;
    cxd_mempool *pool_a = NULL, *pool_b = NULL;
    EXPECT(cxd_port_txq(port_a, 0, &txq), CXD_ERROR_OK);
    EXPECT(cxd_port_rxq(port_b, 0, &rxq), CXD_ERROR_OK);
    EXPECT(cxd_port_txq(port_a, 1, &txq), CXD_ERROR_INVALID_ARGUMENT);
    EXPECT(cxd_port_mempool(port_a, &pool_a), CXD_ERROR_OK);
    EXPECT(cxd_port_mempool(port_b, &pool_b), CXD_ERROR_OK);

    struct cxd_mempool_info info;
    EXPECT(cxd_mempool_info_get(pool_a, &info), CXD_ERROR_OK);
    CHECK(info.capacity == 1024 && info.buf_size == cfg.buf_size);

    /* 1,000 frames from A to B, in bursts, checked in order on arrival. */
    uint32_t next_send = 0, next_recv = 0;
    cxd_mbuf *pending[BATCH];
    int npending = 0;
    int rounds = 0;
    while (next_recv < PACKETS) {
        CHECK(++rounds < 100000);
        while (npending < BATCH && next_send < PACKETS) {
            uint8_t frame[256];
            size_t len = make_frame(next_send, frame);
            cxd_mbuf *m;
            EXPECT(cxd_mbuf_alloc(pool_a, &m), CXD_ERROR_OK);
            EXPECT(cxd_mbuf_set_data(m, frame, len), CXD_ERROR_OK);
            pending[npending++] = m;
            next_send++;
        }
        if (npending > 0) {
            int sent = cxd_tx_burst(txq, pending, (uint16_t)npending);
            CHECK(sent >= 0);
            /* The unsent ones stay ours, in order, at the front. */
            memmove(pending, pending + sent, (size_t)(npending - sent) * sizeof pending[0]);
            npending -= sent;
        }
        cxd_mbuf *got[BATCH];
        int n = cxd_rx_burst(rxq, got, BATCH);
        CHECK(n >= 0);
        for (int i = 0; i < n; i++) {
            check_frame(got[i], next_recv++);
            EXPECT(cxd_mbuf_free(got[i]), CXD_ERROR_OK);
        }
    }
    CHECK(next_recv == PACKETS && npending == 0);

    struct cxd_port_stats stats_a, stats_b;
    EXPECT(cxd_port_stats_get(port_a, &stats_a), CXD_ERROR_OK);
    EXPECT(cxd_port_stats_get(port_b, &stats_b), CXD_ERROR_OK);
    CHECK(stats_a.opackets == PACKETS && stats_a.oerrors == 0);
    CHECK(stats_b.ipackets == PACKETS && stats_b.ierrors == 0);

    /* NULL handles and out-pointers. */
    EXPECT(cxd_mbuf_free(NULL), CXD_ERROR_NULL);
    EXPECT(cxd_tx_burst(NULL, pending, 1), CXD_ERROR_NULL);
    EXPECT(cxd_rx_burst(rxq, NULL, 4), CXD_ERROR_NULL);
    EXPECT(cxd_mbuf_alloc(pool_a, NULL), CXD_ERROR_NULL);
    EXPECT(cxd_port_config_default(NULL), CXD_ERROR_NULL);
    CHECK(strlen(cxd_last_error()) > 0);

    /* A handle of another kind. */
    EXPECT(cxd_port_stats_get((cxd_port *)txq, &stats_a), CXD_ERROR_INVALID_HANDLE);
    EXPECT(cxd_tx_burst((cxd_txq *)rxq, pending, 0), CXD_ERROR_INVALID_HANDLE);

    /* Double free, and use after free. */
    cxd_mbuf *m1, *m2;
    EXPECT(cxd_mbuf_alloc(pool_a, &m1), CXD_ERROR_OK);
    EXPECT(cxd_mbuf_free(m1), CXD_ERROR_OK);
    EXPECT(cxd_mbuf_free(m1), CXD_ERROR_DOUBLE_FREE);
    EXPECT(cxd_mbuf_len(m1), CXD_ERROR_DOUBLE_FREE);
    /* Still caught once the buffer is handed out again (the handle's generation moved on). */
    EXPECT(cxd_mbuf_alloc(pool_a, &m2), CXD_ERROR_OK);
    EXPECT(cxd_mbuf_free(m1), CXD_ERROR_DOUBLE_FREE);
    EXPECT(cxd_mbuf_len(m2), 0);

    /* A send with one bad mbuf sends nothing and leaves the good ones the caller's. */
    EXPECT(cxd_mbuf_alloc(pool_a, &m1), CXD_ERROR_OK);
    uint8_t frame[256];
    EXPECT(cxd_mbuf_set_data(m1, frame, make_frame(7, frame)), CXD_ERROR_OK);
    cxd_mbuf *pair[2] = {m1, m1};
    EXPECT(cxd_tx_burst(txq, pair, 2), CXD_ERROR_BUSY); /* the same mbuf twice */
    EXPECT(cxd_mbuf_free(m2), CXD_ERROR_OK);
    pair[1] = m2;
    EXPECT(cxd_tx_burst(txq, pair, 2), CXD_ERROR_DOUBLE_FREE);
    CHECK(strstr(cxd_last_error(), "pkts[1]") != NULL);
    EXPECT(cxd_mbuf_len(m1), (int)make_frame(7, frame));

    /* Sent mbufs are the queue's: freeing one after the send is a double free. */
    EXPECT(cxd_tx_burst(txq, &m1, 1), 1);
    EXPECT(cxd_mbuf_free(m1), CXD_ERROR_DOUBLE_FREE);
    cxd_mbuf *drain[BATCH];
    for (int tries = 0; tries < 1000; tries++) {
        int n = cxd_rx_burst(rxq, drain, BATCH);
        CHECK(n >= 0);
        for (int i = 0; i < n; i++)
            EXPECT(cxd_mbuf_free(drain[i]), CXD_ERROR_OK);
        if (n > 0)
            break;
    }

    /* A buffer returned to a pool it does not belong to. */
    EXPECT(cxd_mbuf_alloc(pool_a, &m1), CXD_ERROR_OK);
    EXPECT(cxd_mempool_put(pool_b, m1), CXD_ERROR_WRONG_POOL);
    EXPECT(cxd_mempool_put(pool_a, m1), CXD_ERROR_OK);

    /* Bursts larger than one call takes: nothing read or written. */
    cxd_mbuf *big[CXD_MAX_BURST + 1];
    for (int i = 0; i <= CXD_MAX_BURST; i++)
        big[i] = (cxd_mbuf *)0x1;
    EXPECT(cxd_rx_burst(rxq, big, CXD_MAX_BURST + 1), CXD_ERROR_BURST_TOO_LARGE);
    EXPECT(cxd_tx_burst(txq, big, CXD_MAX_BURST + 1), CXD_ERROR_BURST_TOO_LARGE);
    CHECK(big[0] == (cxd_mbuf *)0x1);

    /* Data that does not fit. */
    EXPECT(cxd_mbuf_alloc(pool_a, &m1), CXD_ERROR_OK);
    static uint8_t huge[70000];
    EXPECT(cxd_mbuf_set_data(m1, huge, sizeof huge), CXD_ERROR_TOO_LONG);
    EXPECT(cxd_mbuf_len(m1), 0);

    /* Offload requests round-trip; receive-only bits are refused. */
    struct cxd_mbuf_offload off = {0};
    off.flags = CXD_TX_IP_CSUM | CXD_TX_VLAN;
    off.vlan_tci = 42;
    EXPECT(cxd_mbuf_offload_set(m1, &off), CXD_ERROR_OK);
    struct cxd_mbuf_offload back;
    EXPECT(cxd_mbuf_offload_get(m1, &back), CXD_ERROR_OK);
    CHECK(back.flags == off.flags && back.vlan_tci == 42);
    off.flags = CXD_RX_RSS_HASH;
    EXPECT(cxd_mbuf_offload_set(m1, &off), CXD_ERROR_INVALID_ARGUMENT);

    /* A device whose port runs is not closed. */
    EXPECT(cxd_device_close(dev_a), CXD_ERROR_BUSY);

    /* Close; the handles then answer CLOSED, and an mbuf held across the close is still
     * freed. */
    EXPECT(cxd_port_close(port_a), CXD_ERROR_OK);
    EXPECT(cxd_port_close(port_a), CXD_ERROR_CLOSED);
    EXPECT(cxd_tx_burst(txq, pending, 0), CXD_ERROR_CLOSED);
    EXPECT(cxd_mbuf_alloc(pool_a, &m2), CXD_ERROR_CLOSED);
    EXPECT(cxd_mbuf_free(m1), CXD_ERROR_OK);
    EXPECT(cxd_port_start(dev_a, &cfg, &port_a), CXD_ERROR_BUSY);
    EXPECT(cxd_port_close(port_b), CXD_ERROR_OK);
    EXPECT(cxd_device_close(dev_a), CXD_ERROR_OK);
    EXPECT(cxd_device_close(dev_b), CXD_ERROR_OK);
    EXPECT(cxd_device_close(dev_b), CXD_ERROR_CLOSED);

    printf("burst.c: %d frames sent and verified; error cases checked\n", PACKETS);
    return 0;
}
