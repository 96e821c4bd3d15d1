/*
 * Packets built and checked in place through cxd_mbuf_data (the buffer's CPU address while the
 * mbuf is held), with cxd_mbuf_set_len, across the emulated pair; then the refusals.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cxdirect.h>

#include "check.h"

#define TRY(call)                                                                  \
    do {                                                                           \
        int rc_ = (call);                                                          \
        if (rc_ < 0) {                                                             \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,     \
                    cxd_error_name(rc_), cxd_last_error());                        \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

enum { FRAMES = 256 };

static size_t length_of(int i) { return 60 + (size_t)(i * 37) % 1400; }

int main(void) {
    cxd_device *a, *b;
    cxd_port *tx_port, *rx_port;
    struct cxd_port_config config;
    TRY(cxd_open_emulated_pair(&a, &b));
    TRY(cxd_port_config_default(&config));
    config.ring_size = 256;
    config.pool_buffers = 1024;
    TRY(cxd_port_start(a, &config, &tx_port));
    TRY(cxd_port_start(b, &config, &rx_port));
    cxd_txq *txq;
    cxd_rxq *rxq;
    cxd_mempool *pool;
    TRY(cxd_port_txq(tx_port, 0, &txq));
    TRY(cxd_port_rxq(rx_port, 0, &rxq));
    TRY(cxd_port_mempool(tx_port, &pool));

    int sent = 0, got = 0;
    while (got < FRAMES) {
        if (sent < FRAMES && sent - got < 128) {
            cxd_mbuf *m;
            TRY(cxd_mbuf_alloc(pool, &m));
            unsigned char *p;
            int capacity = cxd_mbuf_data(m, (void **)&p);
            TRY(capacity);
            size_t len = length_of(sent);
            if ((size_t)capacity < len)
                return 1;
            memset(p, 0xff, 6);
            memset(p + 6, 0, 6);
            p[12] = 0x88, p[13] = 0xb5;
            for (size_t k = 14; k < len; k++)
                p[k] = (unsigned char)(k * 7 + (size_t)sent);
            TRY(cxd_mbuf_set_len(m, len));
            while (cxd_tx_burst(txq, &m, 1) == 0)
                ;
            /* The send took it: its handle is refused from now on. */
            EXPECT(cxd_mbuf_data(m, (void **)&p), CXD_ERROR_DOUBLE_FREE);
            sent++;
        }
        cxd_mbuf *pkts[32];
        int n = cxd_rx_burst(rxq, pkts, 32);
        TRY(n);
        for (int i = 0; i < n; i++, got++) {
            const unsigned char *p;
            int capacity = cxd_mbuf_data(pkts[i], (void **)&p);
            TRY(capacity);
            size_t len = length_of(got);
            EXPECT(cxd_mbuf_len(pkts[i]), (int)len);
            for (size_t k = 14; k < len; k++)
                if (p[k] != (unsigned char)(k * 7 + (size_t)got)) {
                    fprintf(stderr, "frame %d byte %zu differs\n", got, k);
                    return 1;
                }
            EXPECT(cxd_mbuf_set_len(pkts[i], (size_t)capacity + 1), CXD_ERROR_TOO_LONG);
            EXPECT(cxd_mbuf_len(pkts[i]), (int)len);
            TRY(cxd_mbuf_free(pkts[i]));
        }
    }
    EXPECT(cxd_mbuf_data(NULL, NULL), CXD_ERROR_NULL);
    TRY(cxd_port_close(tx_port));
    TRY(cxd_port_close(rx_port));
    TRY(cxd_device_close(a));
    TRY(cxd_device_close(b));
    printf("%d frames built and checked in place\n", got);
    return 0;
}
