/*
 * Receive interrupts from C: a receive queue's descriptor, armed, wakes a thread blocked in
 * poll() when a frame another thread sends arrives, and stays quiet until then. Exits 0 when
 * every check holds, 1 at the first that does not.
 */
#define _POSIX_C_SOURCE 200809L
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "cxdirect.h"

#define ROUNDS 5

static cxd_txq *txq;
static cxd_mempool *pool_a;

/* The sender: waits 50 ms (the receiver is asleep in poll() by then), then sends one frame. */
static void *send_later(void *arg) {
    uint8_t frame[64] = "\xff\xff\xff\xff\xff\xff\x02\x00\x00\x00\x00\x01\x88\xb5";
    frame[14] = (uint8_t)(uintptr_t)arg;
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
    cxd_mbuf *m;
    EXPECT(cxd_mbuf_alloc(pool_a, &m), CXD_ERROR_OK);
    EXPECT(cxd_mbuf_set_data(m, frame, sizeof frame), CXD_ERROR_OK);
    EXPECT(cxd_tx_burst(txq, &m, 1), 1);
    return NULL;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

int main(void) {
    cxd_device *dev_a, *dev_b;
    EXPECT(cxd_open_emulated_pair(&dev_a, &dev_b), CXD_ERROR_OK);
    struct cxd_port_config cfg;
    EXPECT(cxd_port_config_default(&cfg), CXD_ERROR_OK);
    cfg.ring_size = 256;
    cfg.pool_buffers = 1024;
    cxd_port *port_a, *port_b;
    EXPECT(cxd_port_start(dev_a, &cfg, &port_a), CXD_ERROR_OK);
    cfg.flags |= CXD_PORT_RX_INTERRUPTS;
    EXPECT(cxd_port_start(dev_b, &cfg, &port_b), CXD_ERROR_OK);
    cxd_rxq *rxq, *plain;
    EXPECT(cxd_port_txq(port_a, 0, &txq), CXD_ERROR_OK);
    EXPECT(cxd_port_rxq(port_b, 0, &rxq), CXD_ERROR_OK);
    EXPECT(cxd_port_rxq(port_a, 0, &plain), CXD_ERROR_OK);
    EXPECT(cxd_port_mempool(port_a, &pool_a), CXD_ERROR_OK);

    /* A queue of a port started without interrupts has none. */
    EXPECT(cxd_rxq_interrupt_fd(plain), CXD_ERROR_CONFIG);
    CHECK(strstr(cxd_last_error(), "CXD_PORT_RX_INTERRUPTS") != NULL);
    EXPECT(cxd_rxq_interrupt_arm(plain), CXD_ERROR_CONFIG);
    EXPECT(cxd_rxq_interrupt_fd(NULL), CXD_ERROR_NULL);
    EXPECT(cxd_rxq_interrupt_arm((cxd_rxq *)txq), CXD_ERROR_INVALID_HANDLE);

    int fd = cxd_rxq_interrupt_fd(rxq);
    CHECK(fd >= 0);
    for (int round = 0; round < ROUNDS; round++) {
        cxd_mbuf *got[8];
        /* Idle: nothing to receive; arm, look once more, then sleep. */
        EXPECT(cxd_rx_burst(rxq, got, 8), 0);
        EXPECT(cxd_rxq_interrupt_arm(rxq), CXD_ERROR_OK);
        EXPECT(cxd_rx_burst(rxq, got, 8), 0);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        CHECK(poll(&pfd, 1, 0) == 0);
        pthread_t sender;
        CHECK(pthread_create(&sender, NULL, send_later, (void *)(uintptr_t)round) == 0);
        double before = now_ms();
        CHECK(poll(&pfd, 1, 5000) == 1 && (pfd.revents & POLLIN));
        double slept = now_ms() - before;
        CHECK(pthread_join(sender, NULL) == 0);
        /* Woken by the frame, not by the timeout. */
        CHECK(slept >= 20 && slept < 4000);
        EXPECT(cxd_rxq_interrupt_ack(rxq), 1);
        CHECK(poll(&pfd, 1, 0) == 0);
        EXPECT(cxd_rx_burst(rxq, got, 8), 1);
        uint8_t byte;
        EXPECT(cxd_mbuf_read(got[0], 14, &byte, 1), 1);
        CHECK(byte == round);
        EXPECT(cxd_mbuf_free(got[0]), CXD_ERROR_OK);
        /* Not armed again: nothing fired. */
        EXPECT(cxd_rxq_interrupt_ack(rxq), 0);
    }

    EXPECT(cxd_port_close(port_b), CXD_ERROR_OK);
    EXPECT(cxd_rxq_interrupt_fd(rxq), CXD_ERROR_CLOSED);
    EXPECT(cxd_port_close(port_a), CXD_ERROR_OK);
    EXPECT(cxd_device_close(dev_a), CXD_ERROR_OK);
    EXPECT(cxd_device_close(dev_b), CXD_ERROR_OK);
    printf("interrupt.c: %d wake-ups from poll(), each by its frame\n", ROUNDS);
    return 0;
}
