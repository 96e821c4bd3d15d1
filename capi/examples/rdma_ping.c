/*
 * rdma_ping: an RDMA ping in C on the emulated pair, as Linux's krping runs one: the client
 * SENDs the address, key and size of its source buffer; the server RDMA READs it into its own
 * buffer and SENDs "go"; the client SENDs where its sink buffer is; the server RDMA WRITEs what
 * it read there and SENDs "done"; the client checks the sink against the source.
 *
 *   rdma_ping [COUNT [SIZE]]      (default 100 pings of 4096 bytes; SIZE 1..65536)
 *
 * Prints `summary: pings=N size=S validated=N errors=N`; exits 1 on any error.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cxdirect.h>

#define TRY(call)                                                                  \
    do {                                                                           \
        int rc_ = (call);                                                          \
        if (rc_ < 0) {                                                             \
            fprintf(stderr, "%s: %s: %s\n", #call, cxd_error_name(rc_), cxd_last_error()); \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

enum { MAX_SIZE = 65536, MSG = 16, SEND_AT = 0, RECV_AT = 64, DATA_AT = 4096 };
enum { REGION = DATA_AT + 2 * MAX_SIZE };
#define ACCESS (CXD_ACCESS_LOCAL_WRITE | CXD_ACCESS_REMOTE_READ | CXD_ACCESS_REMOTE_WRITE)

struct side {
    const char *name;
    cxd_device *dev;
    cxd_rdma *rdma;
    cxd_pd *pd;
    cxd_cq *cq;
    cxd_qp *qp;
    cxd_mr *mr;
    struct cxd_mr_info mr_info;
};

/* krping's `struct krping_rdma_info`: buffer address, key and size, big-endian. */
struct info {
    uint64_t addr;
    uint32_t rkey;
    uint32_t size;
};

static void put_be(unsigned char *out, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++)
        out[i] = (unsigned char)(v >> (8 * (bytes - 1 - i)));
}

static uint64_t get_be(const unsigned char *in, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v = v << 8 | in[i];
    return v;
}

static uint64_t errors;

/* Waits for one completion on `s`, polling `other` too (the model runs when polled), and
 * checks that it is `wr_id` and succeeded. */
static struct cxd_wc wait_for(struct side *s, struct side *other, uint64_t wr_id) {
    struct cxd_wc wc;
    for (long spins = 0; spins < 50000000; spins++) {
        int n = cxd_cq_poll(s->cq, &wc, 1);
        TRY(n);
        if (n == 1) {
            if (wc.status != CXD_WC_SUCCESS || wc.wr_id != wr_id) {
                fprintf(stderr, "%s: completion wr_id %llu status %u (vendor %#x); expected %llu\n",
                        s->name, (unsigned long long)wc.wr_id, wc.status, wc.vendor_err,
                        (unsigned long long)wr_id);
                exit(1);
            }
            return wc;
        }
        TRY(cxd_cq_poll(other->cq, NULL, 0));
    }
    fprintf(stderr, "%s: no completion for wr_id %llu\n", s->name, (unsigned long long)wr_id);
    exit(1);
}

static void post_recv(struct side *s, uint64_t wr_id) {
    struct cxd_sge sge = {s->mr_info.addr + RECV_AT, MSG, s->mr_info.lkey};
    struct cxd_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1};
    TRY(cxd_qp_post_recv(s->qp, &wr, 1, NULL));
}

/* SENDs a message of the info `i` from the side's send buffer. */
static void send_info(struct side *s, struct info i, uint64_t wr_id) {
    unsigned char msg[MSG];
    put_be(msg, i.addr, 8);
    put_be(msg + 8, i.rkey, 4);
    put_be(msg + 12, i.size, 4);
    TRY(cxd_mr_write(s->mr, SEND_AT, msg, MSG));
    struct cxd_sge sge = {s->mr_info.addr + SEND_AT, MSG, s->mr_info.lkey};
    struct cxd_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
                             .opcode = CXD_WR_SEND, .send_flags = CXD_SEND_SIGNALED};
    TRY(cxd_qp_post_send(s->qp, &wr, 1, NULL));
}

static struct info received_info(struct side *s) {
    unsigned char msg[MSG];
    TRY(cxd_mr_read(s->mr, RECV_AT, msg, MSG));
    struct info i = {get_be(msg, 8), (uint32_t)get_be(msg + 8, 4), (uint32_t)get_be(msg + 12, 4)};
    return i;
}

/* One RDMA READ or WRITE of `size` bytes between the side's data buffer and `remote`. */
static void rdma(struct side *s, uint32_t opcode, struct info remote, uint64_t wr_id) {
    struct cxd_sge sge = {s->mr_info.addr + DATA_AT, remote.size, s->mr_info.lkey};
    struct cxd_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = opcode,
                             .send_flags = CXD_SEND_SIGNALED, .remote_addr = remote.addr,
                             .rkey = remote.rkey};
    TRY(cxd_qp_post_send(s->qp, &wr, 1, NULL));
}

static void open_side(struct side *s, const char *ip) {
    TRY(cxd_rdma_open(s->dev, ip, &s->rdma));
    TRY(cxd_pd_alloc(s->rdma, &s->pd));
    TRY(cxd_cq_create(s->rdma, 64, &s->cq));
    TRY(cxd_mr_alloc(s->pd, REGION, ACCESS, &s->mr));
    TRY(cxd_mr_query(s->mr, &s->mr_info));
    struct cxd_qp_caps caps;
    TRY(cxd_qp_caps_default(&caps));
    TRY(cxd_qp_create(s->pd, s->cq, NULL, &caps, &s->qp));
}

static void close_side(struct side *s) {
    TRY(cxd_qp_destroy(s->qp));
    /* Flushed completions of anything still posted (none after a clean run). */
    struct cxd_wc wc[8];
    while (cxd_cq_poll(s->cq, wc, 8) > 0)
        ;
    TRY(cxd_mr_dereg(s->mr));
    TRY(cxd_cq_destroy(s->cq));
    TRY(cxd_pd_dealloc(s->pd));
    TRY(cxd_rdma_close(s->rdma));
    TRY(cxd_device_close(s->dev));
}

int main(int argc, char **argv) {
    long count = argc > 1 ? atol(argv[1]) : 100;
    long size = argc > 2 ? atol(argv[2]) : 4096;
    if (count < 1 || size < 1 || size > MAX_SIZE) {
        fprintf(stderr, "usage: rdma_ping [COUNT>0 [SIZE 1..%d]]\n", MAX_SIZE);
        return 2;
    }
    struct side client = {.name = "client"}, server = {.name = "server"};
    TRY(cxd_open_emulated_pair(&client.dev, &server.dev));
    open_side(&client, "10.0.0.1");
    open_side(&server, "10.0.0.2");
    struct cxd_endpoint ec, es;
    TRY(cxd_qp_endpoint(client.qp, &ec));
    TRY(cxd_qp_endpoint(server.qp, &es));
    TRY(cxd_qp_connect(client.qp, &es, NULL));
    TRY(cxd_qp_connect(server.qp, &ec, NULL));

    static unsigned char source[MAX_SIZE], sink[MAX_SIZE];
    const uint64_t src_at = DATA_AT, sink_at = DATA_AT + MAX_SIZE;
    uint64_t validated = 0;
    post_recv(&server, 1);
    for (long ping = 0; ping < count; ping++) {
        /* The client's source: krping's pattern of printable characters, moved on each ping. */
        for (long i = 0; i < size; i++)
            source[i] = (unsigned char)(0x41 + (ping + i) % 58);
        TRY(cxd_mr_write(client.mr, src_at, source, (size_t)size));
        TRY(cxd_mr_write(client.mr, sink_at, (unsigned char[1]){0}, 1));
        post_recv(&client, 2);
        /* Client: here is my source. */
        struct info src = {client.mr_info.addr + src_at, client.mr_info.rkey, (uint32_t)size};
        send_info(&client, src, 10);
        wait_for(&client, &server, 10);
        wait_for(&server, &client, 1);
        struct info asked = received_info(&server);
        /* Server: READ it, then tell the client to go on. */
        post_recv(&server, 1);
        rdma(&server, CXD_WR_RDMA_READ, asked, 20);
        struct cxd_wc wc = wait_for(&server, &client, 20);
        if (wc.byte_len != asked.size)
            errors++;
        send_info(&server, (struct info){0, 0, 0}, 21);
        wait_for(&server, &client, 21);
        wait_for(&client, &server, 2);
        /* Client: here is my sink. */
        post_recv(&client, 3);
        struct info dst = {client.mr_info.addr + sink_at, client.mr_info.rkey, (uint32_t)size};
        send_info(&client, dst, 11);
        wait_for(&client, &server, 11);
        wait_for(&server, &client, 1);
        struct info into = received_info(&server);
        /* Server: WRITE what it read there, then say done. */
        post_recv(&server, 1);
        rdma(&server, CXD_WR_RDMA_WRITE, into, 22);
        wait_for(&server, &client, 22);
        send_info(&server, (struct info){0, 0, 0}, 23);
        wait_for(&server, &client, 23);
        wait_for(&client, &server, 3);
        /* Client: validate (krping's -V). */
        TRY(cxd_mr_read(client.mr, sink_at, sink, (size_t)size));
        if (memcmp(source, sink, (size_t)size) == 0)
            validated++;
        else
            errors++;
    }
    close_side(&client);
    close_side(&server);
    printf("summary: pings=%ld size=%ld validated=%llu errors=%llu\n", count, size,
           (unsigned long long)validated, (unsigned long long)errors);
    return errors == 0 && validated == (uint64_t)count ? 0 : 1;
}
