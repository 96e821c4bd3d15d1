/*
 * txrx: a txonly sender and an rxonly receiver on the emulated pair, from C, checked as
 * `cxdirect-testpmd --forward-mode txonly --verify` checks its traffic: every packet carries a
 * UDP/IPv4 header, the stamp "cxdt", its flow and sequence number, and a pattern; every
 * received packet's content is checked, and each flow's sequence numbers tell gaps (lost),
 * late arrivals (reordered) and duplicates apart within a window of 4096.
 *
 *   txrx [PACKETS [FRAME_BYTES [BURST]]]      (default 10000 64 32)
 *
 * Prints `verify: ...` and `summary: tx=N rx=N lost=N corrupt=N duplicate=N oerrors=N
 * imissed=N`, as cxdirect-testpmd does; exits 1 unless every packet arrived once, intact.
 */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cxdirect.h>

#define TRY(call)                                                                  \
    do {                                                                           \
        int rc_ = (call);                                                          \
        if (rc_ < 0) {                                                             \
            fprintf(stderr, "%s: %s: %s\n", #call, cxd_error_name(rc_), cxd_last_error()); \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

enum { HEADER_LEN = 42, STAMP_LEN = 10, MIN_LEN = HEADER_LEN + STAMP_LEN, MAX_FRAME = 1514 };
enum { WINDOW = 4096, WINDOW_WORDS = WINDOW / 64, FLOWS = 1 };
static const unsigned char MAGIC[4] = {'c', 'x', 'd', 't'};

/* The pattern byte at payload offset i of packet seq of flow (testpmd.rs's `pattern`). */
static unsigned char pattern(uint16_t flow, uint32_t seq, size_t i) {
    return (unsigned char)((unsigned char)seq * 31u + (unsigned char)flow + (unsigned char)i);
}

/* A generated packet of len bytes (testpmd.rs's `build`): UDP/IPv4 to the discard port. */
static void build(unsigned char *out, size_t len, uint16_t flow, uint32_t seq) {
    memset(out, 0, len);
    const unsigned char dst[6] = {0x02, 0xcd, 0, 0, 0, 0x02}, src[6] = {0x02, 0xcd, 0, 0, 0, 0x01};
    memcpy(out, dst, 6);
    memcpy(out + 6, src, 6);
    out[12] = 0x08, out[13] = 0x00;
    uint16_t ip_len = (uint16_t)(len - 14);
    out[14] = 0x45;
    out[16] = ip_len >> 8, out[17] = ip_len & 0xff;
    out[22] = 64;
    out[23] = 17;
    out[26] = 198, out[27] = 18, out[28] = 0, out[29] = 1;
    out[30] = 198, out[31] = 18, out[32] = 0, out[33] = 2;
    uint16_t sport = (uint16_t)(10000u + (uint16_t)(flow * 7919u));
    out[34] = sport >> 8, out[35] = sport & 0xff;
    out[36] = 0, out[37] = 9;
    uint16_t udp_len = (uint16_t)(ip_len - 20);
    out[38] = udp_len >> 8, out[39] = udp_len & 0xff;
    unsigned char *p = out + HEADER_LEN;
    memcpy(p, MAGIC, 4);
    p[4] = flow >> 8, p[5] = flow & 0xff;
    p[6] = seq >> 24, p[7] = (seq >> 16) & 0xff, p[8] = (seq >> 8) & 0xff, p[9] = seq & 0xff;
    for (size_t i = 0; i < len - MIN_LEN; i++)
        p[STAMP_LEN + i] = pattern(flow, seq, i);
    uint32_t sum = 0;
    for (int i = 14; i < 34; i += 2)
        sum += (uint32_t)(out[i] << 8 | out[i + 1]);
    while (sum > 0xffff)
        sum = (sum & 0xffff) + (sum >> 16);
    out[24] = (unsigned char)(~sum >> 8), out[25] = (unsigned char)~sum;
}

/* One flow's window: one past the newest sequence number seen, and which of the WINDOW
 * before it arrived (testpmd.rs's `FlowWindow`). */
struct window {
    uint64_t next;
    uint64_t seen[WINDOW_WORDS];
};

struct verifier {
    struct window flows[FLOWS];
    uint64_t good, corrupt, duplicate, gaps, reordered, out_of_window;
};

static int is_seen(const struct window *w, uint64_t s) {
    return (w->seen[(s % WINDOW) / 64] >> (s % 64)) & 1;
}

static void mark(struct window *w, uint64_t s, int on) {
    uint64_t bit = 1ull << (s % 64);
    if (on)
        w->seen[(s % WINDOW) / 64] |= bit;
    else
        w->seen[(s % WINDOW) / 64] &= ~bit;
}

/* Records seq (32 bits on the wire, taken as the 64-bit number nearest to `next`). */
static void record(struct verifier *v, uint16_t flow, uint32_t seq32) {
    struct window *w = &v->flows[flow];
    int64_t delta = (int32_t)(seq32 - (uint32_t)w->next);
    if (delta < 0 && (uint64_t)(-delta) > w->next) {
        v->out_of_window++;
        return;
    }
    uint64_t seq = w->next + (uint64_t)delta;
    if (seq >= w->next) {
        uint64_t skipped = seq - w->next;
        if (skipped >= WINDOW)
            memset(w->seen, 0, sizeof w->seen);
        else
            for (uint64_t s = w->next; s < seq; s++)
                mark(w, s, 0);
        mark(w, seq, 1);
        w->next = seq + 1;
        v->gaps += skipped;
        v->good++;
        return;
    }
    if (w->next - seq > WINDOW) {
        v->out_of_window++;
        return;
    }
    if (is_seen(w, seq)) {
        v->duplicate++;
        return;
    }
    mark(w, seq, 1);
    v->gaps--;
    v->reordered++;
    v->good++;
}

/* Checks one received packet's content, then records its sequence number. */
static void check(struct verifier *v, cxd_mbuf *m) {
    unsigned char buf[MAX_FRAME];
    int len = cxd_mbuf_len(m);
    TRY(len);
    if (len < MIN_LEN || len > MAX_FRAME) {
        v->corrupt++;
        return;
    }
    TRY(cxd_mbuf_read(m, 0, buf, (size_t)len));
    const unsigned char *p = buf + HEADER_LEN;
    uint16_t flow = (uint16_t)(p[4] << 8 | p[5]);
    uint32_t seq = (uint32_t)p[6] << 24 | (uint32_t)p[7] << 16 | (uint32_t)p[8] << 8 | p[9];
    if (memcmp(p, MAGIC, 4) != 0 || flow >= FLOWS) {
        v->corrupt++;
        return;
    }
    for (int i = 0; i < len - MIN_LEN; i++)
        if (p[STAMP_LEN + i] != pattern(flow, seq, (size_t)i)) {
            v->corrupt++;
            return;
        }
    record(v, flow, seq);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    uint64_t packets = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000;
    size_t frame = argc > 2 ? strtoul(argv[2], NULL, 10) : 64;
    int burst = argc > 3 ? atoi(argv[3]) : 32;
    if (packets == 0 || frame < MIN_LEN || frame > MAX_FRAME || burst < 1 || burst > CXD_MAX_BURST) {
        fprintf(stderr, "usage: txrx [PACKETS>0 [FRAME_BYTES %d..%d [BURST 1..%d]]]\n", MIN_LEN,
                MAX_FRAME, CXD_MAX_BURST);
        return 2;
    }
    cxd_device *a, *b;
    cxd_port *ports[2];
    struct cxd_port_config config;
    TRY(cxd_open_emulated_pair(&a, &b));
    TRY(cxd_port_config_default(&config));
    TRY(cxd_port_start(a, &config, &ports[0]));
    TRY(cxd_port_start(b, &config, &ports[1]));
    cxd_txq *txq;
    cxd_rxq *rxq;
    cxd_mempool *pool;
    TRY(cxd_port_txq(ports[0], 0, &txq));
    TRY(cxd_port_rxq(ports[1], 0, &rxq));
    TRY(cxd_port_mempool(ports[0], &pool));

    static struct verifier v;
    uint64_t generated = 0, rx = 0;
    uint32_t next_seq[FLOWS] = {0};
    cxd_mbuf *pending[CXD_MAX_BURST], *got[CXD_MAX_BURST];
    int npending = 0;
    unsigned char buf[MAX_FRAME];
    double start = now(), idle_since = 0;
    for (;;) {
        if (generated >= packets && rx >= generated)
            break;
        int progress = 0;
        /* Both ends are in this process: no more in flight than the receiving ring holds. */
        if (npending == 0 && generated < packets &&
            generated - rx + (uint64_t)burst <= config.ring_size) {
            while (npending < burst && generated < packets) {
                uint16_t flow = (uint16_t)(generated % FLOWS);
                build(buf, frame, flow, next_seq[flow]++);
                if (cxd_mbuf_alloc(pool, &pending[npending]) < 0)
                    break; /* the pool is empty for now: send what there is */
                TRY(cxd_mbuf_set_data(pending[npending], buf, frame));
                npending++;
                generated++;
            }
        }
        if (npending > 0) {
            int sent = cxd_tx_burst(txq, pending, (uint16_t)npending);
            TRY(sent);
            memmove(pending, pending + sent, (size_t)(npending - sent) * sizeof pending[0]);
            npending -= sent;
            progress |= sent > 0;
        }
        int n = cxd_rx_burst(rxq, got, (uint16_t)burst);
        TRY(n);
        for (int i = 0; i < n; i++) {
            check(&v, got[i]);
            TRY(cxd_mbuf_free(got[i]));
        }
        rx += (uint64_t)n;
        progress |= n > 0;
        if (progress) {
            idle_since = 0;
        } else {
            double t = now();
            if (idle_since == 0)
                idle_since = t;
            else if (generated >= packets && npending == 0 && t - idle_since > 0.5)
                break; /* nothing moves any more: what is missing is lost */
        }
    }
    double elapsed = now() - start;
    struct cxd_port_stats s[2];
    TRY(cxd_port_stats_get(ports[0], &s[0]));
    TRY(cxd_port_stats_get(ports[1], &s[1]));
    uint64_t oerrors = s[0].oerrors + s[1].oerrors, imissed = s[0].imissed + s[1].imissed;
    for (int i = 0; i < npending; i++)
        TRY(cxd_mbuf_free(pending[i]));
    TRY(cxd_port_close(ports[0]));
    TRY(cxd_port_close(ports[1]));
    TRY(cxd_device_close(a));
    TRY(cxd_device_close(b));

    uint64_t lost = generated > rx ? generated - rx : 0;
    printf("verify: good %llu corrupt %llu duplicate %llu gaps %llu reordered %llu "
           "out-of-window %llu\n",
           (unsigned long long)v.good, (unsigned long long)v.corrupt,
           (unsigned long long)v.duplicate, (unsigned long long)v.gaps,
           (unsigned long long)v.reordered, (unsigned long long)v.out_of_window);
    printf("summary: tx=%llu rx=%llu lost=%llu corrupt=%llu duplicate=%llu oerrors=%llu "
           "imissed=%llu mpps=%.3f\n",
           (unsigned long long)generated, (unsigned long long)rx, (unsigned long long)lost,
           (unsigned long long)v.corrupt, (unsigned long long)v.duplicate,
           (unsigned long long)oerrors, (unsigned long long)imissed,
           (double)rx / elapsed / 1e6);
    int clean = lost == 0 && v.corrupt == 0 && v.duplicate == 0 && v.out_of_window == 0 &&
                v.good == packets;
    return clean ? 0 : 1;
}
