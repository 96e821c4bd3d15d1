#include <stdio.h>
#include <string.h>
#include <cxdirect.h>

/* Prints what failed and the library's message, and leaves. */
#define TRY(call)                                                                  \
    do {                                                                           \
        int rc_ = (call);                                                          \
        if (rc_ < 0) {                                                             \
            fprintf(stderr, "%s: %s: %s\n", #call, cxd_error_name(rc_), cxd_last_error()); \
            return 1;                                                              \
        }                                                                          \
    } while (0)

int main(void) {
    /* Two modelled ConnectX functions wired back to back, a port started on each. */
    cxd_device *a, *b;
    cxd_port *sender, *receiver;
    struct cxd_port_config config;
    TRY(cxd_open_emulated_pair(&a, &b));
    TRY(cxd_port_config_default(&config));
    TRY(cxd_port_start(a, &config, &sender));
    TRY(cxd_port_start(b, &config, &receiver));
    cxd_txq *txq;
    cxd_rxq *rxq;
    cxd_mempool *pool;
    TRY(cxd_port_txq(sender, 0, &txq));
    TRY(cxd_port_rxq(receiver, 0, &rxq));
    TRY(cxd_port_mempool(sender, &pool));

    /* 32 broadcast frames of 64 bytes, numbered in their last byte. */
    cxd_mbuf *burst[32];
    for (int i = 0; i < 32; i++) {
        unsigned char frame[64] = {0};
        memset(frame, 0xff, 6);
        frame[12] = 0x88, frame[13] = 0xb5; /* local experimental EtherType */
        frame[63] = (unsigned char)i;
        TRY(cxd_mbuf_alloc(pool, &burst[i]));
        TRY(cxd_mbuf_set_data(burst[i], frame, sizeof frame));
    }
    int sent = 0;
    while (sent < 32) {
        int n = cxd_tx_burst(txq, burst + sent, (uint16_t)(32 - sent)); /* takes the sent ones */
        TRY(n);
        sent += n;
    }

    /* Receive them on the other port, in order; each received mbuf is ours to free. */
    int got = 0;
    while (got < 32) {
        cxd_mbuf *pkts[32];
        int n = cxd_rx_burst(rxq, pkts, (uint16_t)(32 - got));
        TRY(n);
        for (int i = 0; i < n; i++, got++) {
            unsigned char last;
            TRY(cxd_mbuf_read(pkts[i], 63, &last, 1));
            if (last != got)
                return 1;
            TRY(cxd_mbuf_free(pkts[i]));
        }
    }
    printf("received %d frames\n", got);

    TRY(cxd_port_close(sender));
    TRY(cxd_port_close(receiver));
    TRY(cxd_device_close(a));
    TRY(cxd_device_close(b));
    return 0;
}
