/*
 * RDMA verbs from C on the emulated pair: RoCE on both functions, a protection domain,
 * regions (host memory and a memfd), a completion queue and an RC queue pair on each,
 * connected; SEND into a posted receive, RDMA WRITE and RDMA READ with two-entry lists, each
 * verified; a shared receive queue and its limit event; then the error codes the boundary
 * gives.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
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

enum { LEN = 8192 };
#define ALL (CXD_ACCESS_LOCAL_WRITE | CXD_ACCESS_REMOTE_READ | CXD_ACCESS_REMOTE_WRITE)

struct side {
    cxd_device *dev;
    cxd_rdma *rdma;
    cxd_pd *pd;
    cxd_cq *cq;
    cxd_qp *qp;
    cxd_mr *mr;
    struct cxd_mr_info info;
};

/* Waits for one completion on `want`, polling both sides (the model runs when polled). */
static struct cxd_wc wait_one(struct side *want, struct side *other) {
    struct cxd_wc wc[4];
    for (long spins = 0; spins < 20000000; spins++) {
        int n = cxd_cq_poll(want->cq, wc, 1);
        TRY(n);
        if (n == 1)
            return wc[0];
        struct cxd_wc ignored;
        int m = cxd_cq_poll(other->cq, &ignored, 0);
        TRY(m);
    }
    fprintf(stderr, "no completion came\n");
    exit(1);
}

static void expect_wc(struct cxd_wc wc, uint64_t wr_id, uint32_t opcode, uint32_t len) {
    if (wc.status != CXD_WC_SUCCESS || wc.wr_id != wr_id || wc.opcode != opcode ||
        wc.byte_len != len) {
        fprintf(stderr, "completion: wr_id %llu status %u opcode %u byte_len %u; expected "
                        "wr_id %llu opcode %u byte_len %u\n",
                (unsigned long long)wc.wr_id, wc.status, wc.opcode, wc.byte_len,
                (unsigned long long)wr_id, opcode, len);
        exit(1);
    }
}

static void fill(unsigned char *buf, size_t len, unsigned seed) {
    for (size_t i = 0; i < len; i++)
        buf[i] = (unsigned char)(i * 31 + seed);
}

int main(void) {
    struct side a = {0}, b = {0};
    TRY(cxd_open_emulated_pair(&a.dev, &b.dev));
    TRY(cxd_rdma_open(a.dev, "10.0.0.1", &a.rdma));
    TRY(cxd_rdma_open(b.dev, "10.0.0.2", &b.rdma));
    struct cxd_rdma_info ia;
    TRY(cxd_rdma_query(a.rdma, &ia));
    /* An IPv4-mapped GID: ::ffff:10.0.0.1. */
    CHECK(ia.gid[10] == 0xff && ia.gid[11] == 0xff && ia.gid[12] == 10 && ia.gid[15] == 1);

    struct side *sides[2] = {&a, &b};
    struct cxd_qp_caps caps;
    TRY(cxd_qp_caps_default(&caps));
    for (int i = 0; i < 2; i++) {
        struct side *s = sides[i];
        TRY(cxd_pd_alloc(s->rdma, &s->pd));
        TRY(cxd_cq_create(s->rdma, 256, &s->cq));
        TRY(cxd_mr_alloc(s->pd, LEN, ALL, &s->mr));
        TRY(cxd_mr_query(s->mr, &s->info));
        CHECK(s->info.length >= LEN);
        TRY(cxd_qp_create(s->pd, s->cq, NULL, &caps, &s->qp));
    }
    /* Posting before connecting is refused. */
    struct cxd_sge early = {a.info.addr, 8, a.info.lkey};
    struct cxd_send_wr send0 = {.wr_id = 1, .sg_list = &early, .num_sge = 1,
                                .opcode = CXD_WR_SEND, .send_flags = CXD_SEND_SIGNALED};
    EXPECT(cxd_qp_post_send(a.qp, &send0, 1, NULL), CXD_ERROR_WRONG_STATE);

    struct cxd_endpoint ea, eb;
    TRY(cxd_qp_endpoint(a.qp, &ea));
    TRY(cxd_qp_endpoint(b.qp, &eb));
    struct cxd_connect_params params;
    TRY(cxd_connect_params_default(&params));
    TRY(cxd_qp_connect(a.qp, &eb, &params));
    TRY(cxd_qp_connect(b.qp, &ea, NULL));
    EXPECT(cxd_qp_connect(b.qp, &ea, NULL), CXD_ERROR_WRONG_STATE);

    /* SEND of a two-entry gather list into a two-entry scatter list. */
    unsigned char msg[LEN], got[LEN];
    fill(msg, 1000, 7);
    TRY(cxd_mr_write(a.mr, 0, msg, 1000));
    struct cxd_sge rsg[2] = {{b.info.addr + 4096, 300, b.info.lkey},
                             {b.info.addr + 6000, 700, b.info.lkey}};
    struct cxd_recv_wr recv = {.wr_id = 77, .sg_list = rsg, .num_sge = 2};
    TRY(cxd_qp_post_recv(b.qp, &recv, 1, NULL));
    struct cxd_sge ssg[2] = {{a.info.addr, 400, a.info.lkey}, {a.info.addr + 400, 600, a.info.lkey}};
    struct cxd_send_wr send = {.wr_id = 5, .sg_list = ssg, .num_sge = 2, .opcode = CXD_WR_SEND_WITH_IMM,
                               .send_flags = CXD_SEND_SIGNALED, .imm_data = 0xfeed};
    TRY(cxd_qp_post_send(a.qp, &send, 1, NULL));
    expect_wc(wait_one(&a, &b), 5, CXD_WC_SEND, 0);
    struct cxd_wc rwc = wait_one(&b, &a);
    expect_wc(rwc, 77, CXD_WC_RECV, 1000);
    CHECK(rwc.wc_flags & CXD_WC_WITH_IMM);
    CHECK(rwc.imm_data == 0xfeed);
    TRY(cxd_mr_read(b.mr, 4096, got, 300));
    TRY(cxd_mr_read(b.mr, 6000, got + 300, 700));
    CHECK(memcmp(got, msg, 1000) == 0);

    /* RDMA WRITE of two entries into b's region at 1024. */
    fill(msg, 3000, 11);
    TRY(cxd_mr_write(a.mr, 0, msg, 3000));
    struct cxd_sge wsg[2] = {{a.info.addr, 1000, a.info.lkey}, {a.info.addr + 1000, 2000, a.info.lkey}};
    struct cxd_send_wr write = {.wr_id = 6, .sg_list = wsg, .num_sge = 2, .opcode = CXD_WR_RDMA_WRITE,
                                .send_flags = CXD_SEND_SIGNALED,
                                .remote_addr = b.info.addr + 1024, .rkey = b.info.rkey};
    TRY(cxd_qp_post_send(a.qp, &write, 1, NULL));
    expect_wc(wait_one(&a, &b), 6, CXD_WC_RDMA_WRITE, 0);
    TRY(cxd_mr_read(b.mr, 1024, got, 3000));
    CHECK(memcmp(got, msg, 3000) == 0);

    /* RDMA READ of it back into a's region at 4096, split over two entries. */
    struct cxd_sge dsg[2] = {{a.info.addr + 4096, 1500, a.info.lkey},
                             {a.info.addr + 6000, 1500, a.info.lkey}};
    struct cxd_send_wr read = {.wr_id = 8, .sg_list = dsg, .num_sge = 2, .opcode = CXD_WR_RDMA_READ,
                               .send_flags = CXD_SEND_SIGNALED,
                               .remote_addr = b.info.addr + 1024, .rkey = b.info.rkey};
    TRY(cxd_qp_post_send(a.qp, &read, 1, NULL));
    expect_wc(wait_one(&a, &b), 8, CXD_WC_RDMA_READ, 3000);
    TRY(cxd_mr_read(a.mr, 4096, got, 1500));
    TRY(cxd_mr_read(a.mr, 6000, got + 1500, 1500));
    CHECK(memcmp(got, msg, 3000) == 0);

    /* Inline SEND, unsignalled then signalled, in one call of 20 (two groups). */
    struct cxd_recv_wr recvs[20];
    struct cxd_sge one = {b.info.addr, 64, b.info.lkey};
    for (int i = 0; i < 20; i++)
        recvs[i] = (struct cxd_recv_wr){.wr_id = 100 + i, .sg_list = &one, .num_sge = 1};
    TRY(cxd_qp_post_recv(b.qp, recvs, 20, NULL));
    struct cxd_send_wr sends[20];
    const char text[] = "inline";
    for (int i = 0; i < 20; i++)
        sends[i] = (struct cxd_send_wr){.wr_id = 200 + i, .opcode = CXD_WR_SEND,
                                        .send_flags = CXD_SEND_INLINE | (i == 19 ? CXD_SEND_SIGNALED : 0),
                                        .inline_data = text, .inline_length = sizeof text};
    EXPECT(cxd_qp_post_send(a.qp, sends, 20, NULL), 20);
    expect_wc(wait_one(&a, &b), 219, CXD_WC_SEND, 0);
    for (int i = 0; i < 20; i++)
        expect_wc(wait_one(&b, &a), 100 + i, CXD_WC_RECV, sizeof text);
    TRY(cxd_mr_read(b.mr, 0, got, sizeof text));
    CHECK(memcmp(got, text, sizeof text) == 0);

    /* A memfd registered as a region: WRITE into it, read back through the caller's mmap. */
    int fd = memfd_create("cxdirect-test", 0);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, LEN) == 0);
    cxd_mr *mfd;
    TRY(cxd_mr_reg_dmabuf(b.pd, fd, 0, LEN, ALL, &mfd));
    struct cxd_mr_info mi;
    TRY(cxd_mr_query(mfd, &mi));
    unsigned char *mapped = mmap(NULL, LEN, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(mapped != MAP_FAILED);
    write.wr_id = 9;
    write.remote_addr = mi.addr + 100;
    write.rkey = mi.rkey;
    TRY(cxd_qp_post_send(a.qp, &write, 1, NULL));
    expect_wc(wait_one(&a, &b), 9, CXD_WC_RDMA_WRITE, 0);
    CHECK(memcmp(mapped + 100, msg, 3000) == 0);
    TRY(cxd_mr_read(mfd, 100, got, 3000));
    CHECK(memcmp(got, msg, 3000) == 0);
    munmap(mapped, LEN);
    EXPECT(cxd_mr_reg_dmabuf(b.pd, 0, 0, LEN, ALL, &mfd), CXD_ERROR_INVALID_ARGUMENT);

    /* A shared receive queue: a second QP pair whose b side receives from it. */
    cxd_srq *srq;
    TRY(cxd_srq_create(b.pd, 64, 1, &srq));
    cxd_qp *qa2, *qb2;
    TRY(cxd_qp_create(a.pd, a.cq, NULL, &caps, &qa2));
    TRY(cxd_qp_create(b.pd, b.cq, srq, &caps, &qb2));
    struct cxd_endpoint ea2, eb2;
    TRY(cxd_qp_endpoint(qa2, &ea2));
    TRY(cxd_qp_endpoint(qb2, &eb2));
    TRY(cxd_qp_connect(qa2, &eb2, NULL));
    TRY(cxd_qp_connect(qb2, &ea2, NULL));
    EXPECT(cxd_qp_post_recv(qb2, &recv, 1, NULL), CXD_ERROR_INVALID_ARGUMENT);
    struct cxd_sge ssge = {b.info.addr + 2048, 256, b.info.lkey};
    struct cxd_recv_wr srecv = {.wr_id = 300, .sg_list = &ssge, .num_sge = 1};
    TRY(cxd_srq_post_recv(srq, &srecv, 1, NULL));
    send.wr_id = 10;
    send.opcode = CXD_WR_SEND;
    send.num_sge = 1;
    ssg[0].length = 200;
    TRY(cxd_qp_post_send(qa2, &send, 1, NULL));
    expect_wc(wait_one(&a, &b), 10, CXD_WC_SEND, 0);
    struct cxd_wc swc = wait_one(&b, &a);
    expect_wc(swc, 300, CXD_WC_RECV, 200);
    CHECK(swc.wc_flags & CXD_WC_FROM_SRQ);
    EXPECT(cxd_srq_destroy(srq), CXD_ERROR_BUSY);

    /* Its limit: armed at 8 with 16 posted, it fires once when the 9th receive leaves 7, and
     * the device's event descriptor says so; one-shot until armed again after a refill. */
    struct cxd_recv_wr srecvs[16];
    for (int i = 0; i < 16; i++)
        srecvs[i] = (struct cxd_recv_wr){.wr_id = 400 + i, .sg_list = &ssge, .num_sge = 1};
    EXPECT(cxd_srq_post_recv(srq, srecvs, 16, NULL), 16);
    EXPECT(cxd_srq_arm_limit(srq, 1u << 20), CXD_ERROR_CONFIG);
    CHECK(strstr(cxd_last_error(), "limit") != NULL);
    TRY(cxd_srq_arm_limit(srq, 8));
    int efd = cxd_rdma_event_fd(b.rdma);
    CHECK(efd >= 0);
    struct pollfd pfd = {.fd = efd, .events = POLLIN};
    EXPECT(cxd_srq_limit_reached(srq), 0);
    CHECK(poll(&pfd, 1, 0) == 0);
    for (int i = 0; i < 9; i++) {
        send.wr_id = 20 + i;
        TRY(cxd_qp_post_send(qa2, &send, 1, NULL));
        expect_wc(wait_one(&a, &b), 20 + i, CXD_WC_SEND, 0);
        expect_wc(wait_one(&b, &a), 400 + i, CXD_WC_RECV, 200);
        if (i < 8)
            EXPECT(cxd_srq_limit_reached(srq), 0);
    }
    CHECK(poll(&pfd, 1, 1000) == 1 && (pfd.revents & POLLIN));
    EXPECT(cxd_srq_limit_reached(srq), 1);
    EXPECT(cxd_srq_limit_reached(srq), 0);
    CHECK(poll(&pfd, 1, 0) == 0);
    for (int i = 9; i < 12; i++) {
        send.wr_id = 20 + i;
        TRY(cxd_qp_post_send(qa2, &send, 1, NULL));
        expect_wc(wait_one(&a, &b), 20 + i, CXD_WC_SEND, 0);
        expect_wc(wait_one(&b, &a), 400 + i, CXD_WC_RECV, 200);
    }
    EXPECT(cxd_srq_limit_reached(srq), 0);
    /* Refilled and armed again: quiet until it falls below the new limit. */
    EXPECT(cxd_srq_post_recv(srq, srecvs, 16, NULL), 16);
    TRY(cxd_srq_arm_limit(srq, 4));
    EXPECT(cxd_srq_limit_reached(srq), 0);
    EXPECT(cxd_srq_limit_reached(NULL), CXD_ERROR_NULL);
    EXPECT(cxd_srq_arm_limit((cxd_srq *)qb2, 1), CXD_ERROR_INVALID_HANDLE);
    EXPECT(cxd_rdma_event_fd(NULL), CXD_ERROR_NULL);

    /* Boundary errors, each with nothing changed. */
    EXPECT(cxd_qp_post_send(NULL, &send, 1, NULL), CXD_ERROR_NULL);
    EXPECT(cxd_qp_post_send((cxd_qp *)a.cq, &send, 1, NULL), CXD_ERROR_INVALID_HANDLE);
    struct cxd_send_wr badop = send;
    badop.opcode = 99;
    struct cxd_send_wr two[2] = {send, badop};
    uint32_t bad = 1234;
    EXPECT(cxd_qp_post_send(a.qp, two, 2, &bad), CXD_ERROR_INVALID_ARGUMENT);
    CHECK(bad == 0);
    CHECK(strstr(cxd_last_error(), "wrs[1]") != NULL);
    struct cxd_send_wr toolong = send;
    toolong.num_sge = 40;
    EXPECT(cxd_qp_post_send(a.qp, &toolong, 1, NULL), CXD_ERROR_INVALID_ARGUMENT);
    struct cxd_wc many[300];
    EXPECT(cxd_cq_poll(a.cq, many, 300), CXD_ERROR_BURST_TOO_LARGE);
    EXPECT(cxd_rdma_close(a.rdma), CXD_ERROR_BUSY);
    EXPECT(cxd_pd_dealloc(a.pd), CXD_ERROR_BUSY);
    EXPECT(cxd_cq_destroy(a.cq), CXD_ERROR_BUSY);
    EXPECT(cxd_port_start(a.dev, NULL, NULL), CXD_ERROR_NULL);
    struct cxd_port_config config;
    cxd_port *port;
    TRY(cxd_port_config_default(&config));
    EXPECT(cxd_port_start(a.dev, &config, &port), CXD_ERROR_BUSY);
    EXPECT(cxd_rdma_open(a.dev, "10.0.0.9", &a.rdma), CXD_ERROR_BUSY);
    EXPECT(cxd_rdma_open(b.dev, "not an address", &b.rdma), CXD_ERROR_INVALID_ARGUMENT);

    /* Close everything, children first; then the handles are closed for good. */
    TRY(cxd_qp_destroy(qa2));
    TRY(cxd_qp_destroy(qb2));
    TRY(cxd_srq_destroy(srq));
    TRY(cxd_mr_dereg(mfd));
    close(fd);
    for (int i = 0; i < 2; i++) {
        struct side *s = sides[i];
        TRY(cxd_qp_destroy(s->qp));
        TRY(cxd_mr_dereg(s->mr));
        TRY(cxd_cq_destroy(s->cq));
        TRY(cxd_pd_dealloc(s->pd));
        TRY(cxd_rdma_close(s->rdma));
        TRY(cxd_device_close(s->dev));
    }
    EXPECT(cxd_qp_destroy(a.qp), CXD_ERROR_CLOSED);
    EXPECT(cxd_cq_poll(a.cq, many, 1), CXD_ERROR_CLOSED);
    EXPECT(cxd_mr_read(a.mr, 0, got, 1), CXD_ERROR_CLOSED);
    printf("rdma verbs verified: SEND, WRITE, READ, inline, memfd region, SRQ and its limit, errors\n");
    return 0;
}
