/*
 * Flow rules and offloads from C, on two emulated functions wired back to back: UDP/IPv4
 * frames whose checksums the sender asks the device to fill in, steered by a flow rule to the
 * second of the receiver's two queues, checked there with the receive flags the device set;
 * an EtherType rule; a VLAN tag inserted on send; the matches the interface refuses, each with
 * its code. Exits 0 when every check holds, 1 at the first that does not.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cxdirect.h"

#define FRAMES 64
#define FLOW_PORT 4000

static cxd_txq *txq;
static cxd_rxq *rxq[2];
static cxd_mempool *pool_a;

/* The ones' complement sum of `len` bytes (big-endian words) onto `sum`. */
static uint32_t sum16(const uint8_t *p, size_t len, uint32_t sum) {
    for (size_t i = 0; i + 1 < len; i += 2)
        sum += (uint32_t)p[i] << 8 | p[i + 1];
    if (len & 1)
        sum += (uint32_t)p[len - 1] << 8;
    return sum;
}

static uint16_t fold(uint32_t sum) {
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)sum;
}

/* A UDP/IPv4 frame from 10.0.0.1:`sport` to 10.0.0.2:`dport` with 32 payload bytes made
 * from `seq`; both checksums left 0, for the device to fill in. Returns its length. */
static size_t udp_frame(uint8_t *f, uint16_t sport, uint16_t dport, uint32_t seq) {
    memcpy(f, "\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00", 14);
    uint8_t *ip = f + 14;
    memset(ip, 0, 20);
    ip[0] = 0x45;
    ip[2] = 0;
    ip[3] = 20 + 8 + 32;
    ip[8] = 64;
    ip[9] = 17;
    memcpy(ip + 12, "\x0a\x00\x00\x01\x0a\x00\x00\x02", 8);
    uint8_t *udp = ip + 20;
    udp[0] = (uint8_t)(sport >> 8);
    udp[1] = (uint8_t)sport;
    udp[2] = (uint8_t)(dport >> 8);
    udp[3] = (uint8_t)dport;
    udp[4] = 0;
    udp[5] = 8 + 32;
    udp[6] = udp[7] = 0;
    for (int i = 0; i < 32; i++)
        udp[8 + i] = (uint8_t)(seq * 13 + (uint32_t)i);
    return 14 + 20 + 8 + 32;
}

/* Sends `len` bytes of `frame` with the offloads in `*off` (NULL: none). */
static void send_one(const uint8_t *frame, size_t len, const struct cxd_mbuf_offload *off) {
    cxd_mbuf *m;
    EXPECT(cxd_mbuf_alloc(pool_a, &m), CXD_ERROR_OK);
    EXPECT(cxd_mbuf_set_data(m, frame, len), CXD_ERROR_OK);
    if (off)
        EXPECT(cxd_mbuf_offload_set(m, off), CXD_ERROR_OK);
    for (int tries = 0; tries < 1000; tries++) {
        int sent = cxd_tx_burst(txq, &m, 1);
        CHECK(sent >= 0);
        if (sent == 1)
            return;
    }
    CHECK(!"the send queue stayed full");
}

/* Receives one frame from either queue into `*m`; returns the queue's index. */
static int receive_one(cxd_mbuf **m) {
    for (int tries = 0; tries < 100000; tries++) {
        for (int q = 0; q < 2; q++) {
            int n = cxd_rx_burst(rxq[q], m, 1);
            CHECK(n >= 0);
            if (n == 1)
                return q;
        }
    }
    CHECK(!"no frame arrived");
    return -1;
}

int main(void) {
    cxd_device *dev_a, *dev_b;
    EXPECT(cxd_open_emulated_pair(&dev_a, &dev_b), CXD_ERROR_OK);
    struct cxd_port_config cfg;
    EXPECT(cxd_port_config_default(&cfg), CXD_ERROR_OK);
    cfg.ring_size = 256;
    cfg.pool_buffers = 2048;
    cxd_port *port_a, *port_b;
    EXPECT(cxd_port_start(dev_a, &cfg, &port_a), CXD_ERROR_OK);
    cfg.rx_queues = 2;
    EXPECT(cxd_port_start(dev_b, &cfg, &port_b), CXD_ERROR_OK);
    EXPECT(cxd_port_txq(port_a, 0, &txq), CXD_ERROR_OK);
    EXPECT(cxd_port_rxq(port_b, 0, &rxq[0]), CXD_ERROR_OK);
    EXPECT(cxd_port_rxq(port_b, 1, &rxq[1]), CXD_ERROR_OK);
    EXPECT(cxd_port_mempool(port_a, &pool_a), CXD_ERROR_OK);

    /* UDP to FLOW_PORT, from many source ports, all to queue 1. */
    struct cxd_flow_match rule;
    memset(&rule, 0, sizeof rule);
    rule.kind = CXD_FLOW_IP;
    rule.ip_version = 4;
    rule.protocol = CXD_FLOW_UDP;
    rule.fields = CXD_FLOW_DST_PORT | CXD_FLOW_DST_ADDR;
    rule.dst_port = FLOW_PORT;
    memcpy(rule.dst_addr, "\x0a\x00\x00\x02", 4);
    cxd_flow *flow;
    EXPECT(cxd_flow_create(port_b, &rule, 1, &flow), CXD_ERROR_OK);

    struct cxd_mbuf_offload off = {0};
    off.flags = CXD_TX_IP_CSUM | CXD_TX_L4_CSUM;
    for (uint32_t seq = 0; seq < FRAMES; seq++) {
        uint8_t frame[128], got[128];
        size_t len = udp_frame(frame, (uint16_t)(1000 + seq * 77), FLOW_PORT, seq);
        send_one(frame, len, &off);
        cxd_mbuf *m;
        CHECK(receive_one(&m) == 1);
        EXPECT(cxd_mbuf_read(m, 0, got, sizeof got), (int)len);
        /* The device filled in both checksums: each verifies, and the rest is as sent. */
        CHECK(fold(sum16(got + 14, 20, 0)) == 0xffff);
        uint32_t pseudo = sum16(got + 14 + 12, 8, 17 + 8 + 32);
        CHECK(fold(sum16(got + 34, 8 + 32, pseudo)) == 0xffff);
        CHECK(memcmp(got, frame, 24) == 0 && memcmp(got + 26, frame + 26, 14) == 0);
        CHECK(memcmp(got + 42, frame + 42, 32) == 0);
        struct cxd_mbuf_offload rx;
        EXPECT(cxd_mbuf_offload_get(m, &rx), CXD_ERROR_OK);
        CHECK(rx.flags & CXD_RX_IP_CSUM_GOOD);
        CHECK(rx.flags & CXD_RX_L4_CSUM_GOOD);
        CHECK(rx.rx_l3_type == CXD_RX_L3_IPV4 && rx.rx_l4_type == CXD_RX_L4_UDP);
        EXPECT(cxd_mbuf_free(m), CXD_ERROR_OK);
    }

    /* Without the rule the flow is hashed again: RSS spreads it over both queues, and each
     * frame carries its hash. */
    EXPECT(cxd_flow_destroy(flow), CXD_ERROR_OK);
    EXPECT(cxd_flow_destroy(flow), CXD_ERROR_CLOSED);
    int per_queue[2] = {0, 0};
    for (uint32_t seq = 0; seq < FRAMES; seq++) {
        uint8_t frame[128];
        send_one(frame, udp_frame(frame, (uint16_t)(1000 + seq * 77), FLOW_PORT, seq), &off);
        cxd_mbuf *m;
        per_queue[receive_one(&m)]++;
        struct cxd_mbuf_offload rx;
        EXPECT(cxd_mbuf_offload_get(m, &rx), CXD_ERROR_OK);
        CHECK(rx.flags & CXD_RX_RSS_HASH);
        EXPECT(cxd_mbuf_free(m), CXD_ERROR_OK);
    }
    CHECK(per_queue[0] > 0 && per_queue[1] > 0);

    /* An EtherType rule, and a VLAN tag the device inserts on send (a tagged frame is not
     * the rule's: it lands by RSS, so either queue). */
    memset(&rule, 0, sizeof rule);
    rule.kind = CXD_FLOW_ETHERTYPE;
    rule.ethertype = 0x88b5;
    EXPECT(cxd_flow_create(port_b, &rule, 1, &flow), CXD_ERROR_OK);
    uint8_t frame[64] = "\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x88\xb5payload";
    for (int i = 0; i < 8; i++) {
        send_one(frame, sizeof frame, NULL);
        cxd_mbuf *m;
        CHECK(receive_one(&m) == 1);
        EXPECT(cxd_mbuf_len(m), (int)sizeof frame);
        EXPECT(cxd_mbuf_free(m), CXD_ERROR_OK);
    }
    memset(&off, 0, sizeof off);
    off.flags = CXD_TX_VLAN;
    off.vlan_tci = 42;
    send_one(frame, sizeof frame, &off);
    cxd_mbuf *m;
    receive_one(&m);
    uint8_t got[80];
    EXPECT(cxd_mbuf_read(m, 0, got, sizeof got), (int)sizeof frame + 4);
    CHECK(memcmp(got + 12, "\x81\x00\x00\x2a\x88\xb5", 6) == 0);
    EXPECT(cxd_mbuf_free(m), CXD_ERROR_OK);

    /* Matches the interface refuses, each with its code and nothing installed. */
    cxd_flow *none = NULL;
    memset(&rule, 0, sizeof rule);
    rule.kind = CXD_FLOW_IP;
    rule.ip_version = 5;
    rule.protocol = CXD_FLOW_UDP;
    EXPECT(cxd_flow_create(port_b, &rule, 0, &none), CXD_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(cxd_last_error(), "ip_version") != NULL);
    rule.ip_version = 4;
    rule.protocol = 47;
    EXPECT(cxd_flow_create(port_b, &rule, 0, &none), CXD_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(cxd_last_error(), "protocol") != NULL);
    rule.protocol = CXD_FLOW_ICMP;
    rule.fields = CXD_FLOW_DST_PORT;
    EXPECT(cxd_flow_create(port_b, &rule, 0, &none), CXD_ERROR_CONFIG);
    CHECK(strstr(cxd_last_error(), "port") != NULL);
    rule.fields = 0x80;
    EXPECT(cxd_flow_create(port_b, &rule, 0, &none), CXD_ERROR_INVALID_ARGUMENT);
    rule.fields = 0;
    rule.ip_version = 6;
    EXPECT(cxd_flow_create(port_b, &rule, 0, &none), CXD_ERROR_CONFIG);
    rule.ip_version = 4;
    EXPECT(cxd_flow_create(port_b, &rule, 2, &none), CXD_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(cxd_last_error(), "queue 2") != NULL);
    rule.kind = 9;
    EXPECT(cxd_flow_create(port_b, &rule, 0, &none), CXD_ERROR_INVALID_ARGUMENT);
    CHECK(none == NULL);
    EXPECT(cxd_flow_create(port_b, NULL, 0, &none), CXD_ERROR_NULL);
    EXPECT(cxd_flow_create(NULL, &rule, 0, &none), CXD_ERROR_NULL);
    EXPECT(cxd_flow_destroy(NULL), CXD_ERROR_NULL);
    EXPECT(cxd_flow_destroy((cxd_flow *)port_b), CXD_ERROR_INVALID_HANDLE);

    /* The port's rules close with it. */
    EXPECT(cxd_port_close(port_b), CXD_ERROR_OK);
    EXPECT(cxd_flow_destroy(flow), CXD_ERROR_CLOSED);
    EXPECT(cxd_port_close(port_a), CXD_ERROR_OK);
    EXPECT(cxd_device_close(dev_a), CXD_ERROR_OK);
    EXPECT(cxd_device_close(dev_b), CXD_ERROR_OK);
    printf("flow.c: %d steered frames with offloads, RSS, EtherType and VLAN checked\n", FRAMES);
    return 0;
}
