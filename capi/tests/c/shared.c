/*
 * A shared receive ring from C: the receiver's two queues take buffers from one ring of 128;
 * its limit event, seen through the device's event descriptor, says when to refill; 500
 * frames arrive whole, in order, with none missed; a flow rule reaches a queue of the ring.
 * Exits 0 when every check holds, 1 at the first that does not.
 */
#define _POSIX_C_SOURCE 200809L
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cxdirect.h"

#define RING 128
#define LIMIT 32
#define CHUNK 50
#define FRAMES 500

static cxd_txq *txq;
static cxd_rxq *rxq[2];
static cxd_mempool *pool_a;
static uint32_t next_send, next_recv;

/* Sends frames next_send.. (EtherType `type`, the sequence number at byte 14), `n` of them. */
static void send_frames(int n, uint16_t type) {
    for (int i = 0; i < n; i++) {
        uint8_t frame[64] = "\xff\xff\xff\xff\xff\xff\x02\x00\x00\x00\x00\x01";
        frame[12] = (uint8_t)(type >> 8);
        frame[13] = (uint8_t)type;
        uint32_t seq = next_send++;
        memcpy(frame + 14, &seq, sizeof seq);
        cxd_mbuf *m;
        EXPECT(cxd_mbuf_alloc(pool_a, &m), CXD_ERROR_OK);
        EXPECT(cxd_mbuf_set_data(m, frame, sizeof frame), CXD_ERROR_OK);
        EXPECT(cxd_tx_burst(txq, &m, 1), 1);
    }
}

/* Receives `n` frames from either queue, checking they come in sending order; counts them
 * per queue into `per_queue`. */
static void receive_frames(int n, int per_queue[2]) {
    for (long tries = 0; n > 0; tries++) {
        CHECK(tries < 1000000);
        for (int q = 0; q < 2; q++) {
            cxd_mbuf *got[32];
            int k = cxd_rx_burst(rxq[q], got, 32);
            CHECK(k >= 0);
            for (int i = 0; i < k; i++) {
                uint32_t seq;
                EXPECT(cxd_mbuf_read(got[i], 14, &seq, sizeof seq), (int)sizeof seq);
                CHECK(seq == next_recv);
                next_recv++;
                per_queue[q]++;
                EXPECT(cxd_mbuf_free(got[i]), CXD_ERROR_OK);
            }
            n -= k;
        }
    }
}

int main(void) {
    cxd_device *dev_a, *dev_b;
    EXPECT(cxd_open_emulated_pair(&dev_a, &dev_b), CXD_ERROR_OK);
    struct cxd_port_config cfg;
    EXPECT(cxd_port_config_default(&cfg), CXD_ERROR_OK);
    CHECK(cfg.shared_ring_size == 0);
    cfg.ring_size = 256;
    cfg.pool_buffers = 2048;
    cxd_port *port_a, *port_b;
    EXPECT(cxd_port_start(dev_a, &cfg, &port_a), CXD_ERROR_OK);
    cfg.rx_queues = 2;
    cfg.shared_ring_size = RING;
    cfg.shared_limit = LIMIT;
    EXPECT(cxd_port_start(dev_b, &cfg, &port_b), CXD_ERROR_OK);
    EXPECT(cxd_port_txq(port_a, 0, &txq), CXD_ERROR_OK);
    EXPECT(cxd_port_rxq(port_b, 0, &rxq[0]), CXD_ERROR_OK);
    EXPECT(cxd_port_rxq(port_b, 1, &rxq[1]), CXD_ERROR_OK);
    EXPECT(cxd_port_mempool(port_a, &pool_a), CXD_ERROR_OK);

    /* A port without a shared ring has none to refill. */
    EXPECT(cxd_port_shared_refill(port_a), CXD_ERROR_CONFIG);
    CHECK(strstr(cxd_last_error(), "shared_ring_size") != NULL);
    EXPECT(cxd_port_shared_limit_reached(port_a, NULL), CXD_ERROR_CONFIG);
    EXPECT(cxd_port_shared_refill(NULL), CXD_ERROR_NULL);
    EXPECT(cxd_port_shared_arm_limit((cxd_port *)txq, 1), CXD_ERROR_INVALID_HANDLE);

    /* Started full (one slot stays empty), armed, quiet. */
    EXPECT(cxd_port_shared_outstanding(port_b), RING - 1);
    int efd = cxd_port_event_fd(port_b);
    CHECK(efd >= 0);
    struct pollfd pfd = {.fd = efd, .events = POLLIN};
    EXPECT(cxd_port_shared_limit_reached(port_b, NULL), 0);
    CHECK(poll(&pfd, 1, 0) == 0);
    EXPECT(cxd_port_shared_arm_limit(port_b, RING), CXD_ERROR_CONFIG);

    /* 100 frames leave 27 posted, below the limit: one event, seen on the descriptor. */
    int per_queue[2] = {0, 0};
    send_frames(100, 0x88b5);
    receive_frames(100, per_queue);
    CHECK(poll(&pfd, 1, 1000) == 1 && (pfd.revents & POLLIN));
    uint32_t posted = 12345;
    EXPECT(cxd_port_shared_limit_reached(port_b, &posted), 1);
    CHECK(posted < LIMIT);
    EXPECT(cxd_port_shared_limit_reached(port_b, &posted), 0);
    EXPECT(cxd_port_shared_refill(port_b), 100);
    EXPECT(cxd_port_shared_outstanding(port_b), RING - 1);
    EXPECT(cxd_port_shared_arm_limit(port_b, LIMIT), CXD_ERROR_OK);

    /* The rest in chunks, refilled at each event: nothing missed. */
    int events = 1;
    while (next_send < FRAMES) {
        send_frames(CHUNK, 0x88b5);
        receive_frames(CHUNK, per_queue);
        int reached = cxd_port_shared_limit_reached(port_b, &posted);
        CHECK(reached >= 0);
        if (reached) {
            events++;
            CHECK(posted < LIMIT);
            CHECK(cxd_port_shared_refill(port_b) > 0);
            EXPECT(cxd_port_shared_arm_limit(port_b, LIMIT), CXD_ERROR_OK);
        }
    }
    CHECK(next_recv == FRAMES && events >= 4);
    struct cxd_port_stats stats;
    EXPECT(cxd_port_stats_get(port_b, &stats), CXD_ERROR_OK);
    CHECK(stats.ipackets == FRAMES && stats.imissed == 0 && stats.ierrors == 0);

    /* A flow rule reaches the ring's second queue. */
    struct cxd_flow_match rule;
    memset(&rule, 0, sizeof rule);
    rule.kind = CXD_FLOW_ETHERTYPE;
    rule.ethertype = 0x88b6;
    cxd_flow *flow;
    EXPECT(cxd_flow_create(port_b, &rule, 1, &flow), CXD_ERROR_OK);
    int steered[2] = {0, 0};
    send_frames(8, 0x88b6);
    receive_frames(8, steered);
    CHECK(steered[0] == 0 && steered[1] == 8);

    EXPECT(cxd_port_close(port_b), CXD_ERROR_OK);
    EXPECT(cxd_port_shared_refill(port_b), CXD_ERROR_CLOSED);
    EXPECT(cxd_port_close(port_a), CXD_ERROR_OK);
    EXPECT(cxd_device_close(dev_a), CXD_ERROR_OK);
    EXPECT(cxd_device_close(dev_b), CXD_ERROR_OK);
    printf("shared.c: %d frames through a shared ring of %d, %d limit events, refilled\n",
           FRAMES, RING, events);
    return 0;
}
