/*
 * A port whose buffers live in the program's own memory: a memfd of 256 buffers given to
 * cxd_port_start_on_memory. Frames sent to it land there, where the program reads them
 * through its own mapping at cxd_mbuf_memory_offset; frames it sends from there arrive whole.
 * Exits 0 when every check holds, 1 at the first that does not.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "cxdirect.h"

#define BUFFERS 256
#define BUF_SIZE 2048
#define FRAMES 100
#define SKIP 4096 /* the pool's range starts this far into the memfd */

static void make_frame(uint8_t *f, uint32_t seq) {
    memset(f, 0xff, 6);
    memcpy(f + 6, "\x02\x00\x00\x00\x00\x01\x88\xb5", 8);
    for (int i = 14; i < 128; i++)
        f[i] = (uint8_t)(seq * 5 + (uint32_t)i);
}

/* Sends one 128-byte frame `seq` on `q` from `pool`. */
static void send_frame(cxd_txq *q, cxd_mempool *pool, uint32_t seq) {
    uint8_t f[128];
    make_frame(f, seq);
    cxd_mbuf *m;
    EXPECT(cxd_mbuf_alloc(pool, &m), CXD_ERROR_OK);
    EXPECT(cxd_mbuf_set_data(m, f, sizeof f), CXD_ERROR_OK);
    EXPECT(cxd_tx_burst(q, &m, 1), 1);
}

/* Receives one frame on `q`. */
static cxd_mbuf *receive_frame(cxd_rxq *q) {
    cxd_mbuf *m;
    for (long tries = 0; tries < 1000000; tries++) {
        int n = cxd_rx_burst(q, &m, 1);
        CHECK(n >= 0);
        if (n == 1)
            return m;
    }
    CHECK(!"no frame arrived");
    return NULL;
}

int main(void) {
    size_t length = (size_t)BUFFERS * BUF_SIZE;
    int fd = memfd_create("cxdirect-pool", 0);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, (off_t)(SKIP + length)) == 0);
    const uint8_t *mem = mmap(NULL, SKIP + length, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(mem != MAP_FAILED);

    cxd_device *dev_a, *dev_b;
    EXPECT(cxd_open_emulated_pair(&dev_a, &dev_b), CXD_ERROR_OK);
    struct cxd_port_config cfg;
    EXPECT(cxd_port_config_default(&cfg), CXD_ERROR_OK);
    cfg.ring_size = 64;
    cfg.pool_buffers = 1024;
    cfg.buf_size = BUF_SIZE;
    cxd_port *port_a, *port_b;
    EXPECT(cxd_port_start(dev_a, &cfg, &port_a), CXD_ERROR_OK);
    /* Refused descriptors and ranges leave the device usable. */
    EXPECT(cxd_port_start_on_memory(dev_b, &cfg, -1, 0, length, &port_b),
           CXD_ERROR_INVALID_ARGUMENT);
    EXPECT(cxd_port_start_on_memory(dev_b, &cfg, fd, SKIP, 1u << 30, &port_b),
           CXD_ERROR_INVALID_ARGUMENT);
    EXPECT(cxd_port_start_on_memory(dev_b, &cfg, fd, SKIP, length, &port_b), CXD_ERROR_OK);

    cxd_txq *tx_a, *tx_b;
    cxd_rxq *rx_a, *rx_b;
    cxd_mempool *pool_a, *pool_b;
    EXPECT(cxd_port_txq(port_a, 0, &tx_a), CXD_ERROR_OK);
    EXPECT(cxd_port_rxq(port_a, 0, &rx_a), CXD_ERROR_OK);
    EXPECT(cxd_port_txq(port_b, 0, &tx_b), CXD_ERROR_OK);
    EXPECT(cxd_port_rxq(port_b, 0, &rx_b), CXD_ERROR_OK);
    EXPECT(cxd_port_mempool(port_a, &pool_a), CXD_ERROR_OK);
    EXPECT(cxd_port_mempool(port_b, &pool_b), CXD_ERROR_OK);
    struct cxd_mempool_info info;
    EXPECT(cxd_mempool_info_get(pool_b, &info), CXD_ERROR_OK);
    CHECK(info.capacity == BUFFERS);

    for (uint32_t seq = 0; seq < FRAMES; seq++) {
        /* A to B: the frame is in the memfd, where the program's mapping sees it. */
        send_frame(tx_a, pool_a, seq);
        cxd_mbuf *m = receive_frame(rx_b);
        uint8_t want[128];
        make_frame(want, seq);
        EXPECT(cxd_mbuf_len(m), 128);
        uint64_t at;
        EXPECT(cxd_mbuf_memory_offset(m, &at), CXD_ERROR_OK);
        CHECK(at + 128 <= length);
        CHECK(memcmp(mem + SKIP + at, want, 128) == 0);
        EXPECT(cxd_mbuf_free(m), CXD_ERROR_OK);
        /* B to A, sent from the memfd. */
        send_frame(tx_b, pool_b, seq + 1000);
        m = receive_frame(rx_a);
        uint8_t got[128];
        make_frame(want, seq + 1000);
        EXPECT(cxd_mbuf_read(m, 0, got, sizeof got), 128);
        CHECK(memcmp(got, want, 128) == 0);
        EXPECT(cxd_mbuf_free(m), CXD_ERROR_OK);
    }
    uint64_t at;
    EXPECT(cxd_mbuf_memory_offset(NULL, &at), CXD_ERROR_NULL);

    EXPECT(cxd_port_close(port_b), CXD_ERROR_OK);
    EXPECT(cxd_port_close(port_a), CXD_ERROR_OK);
    EXPECT(cxd_device_close(dev_a), CXD_ERROR_OK);
    EXPECT(cxd_device_close(dev_b), CXD_ERROR_OK);
    munmap((void *)mem, SKIP + length);
    close(fd);
    printf("memory.c: %d frames each way through a pool in the program's memfd\n", FRAMES);
    return 0;
}
