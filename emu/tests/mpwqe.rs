//! Linux mlx5e's striding receive queue (multi-packet WQEs), driven as mlx5e drives it: a UMR
//! key per RQ (`mlx5e_create_umr_mkey`), an internal control SQ created with `reg_umr`
//! (`mlx5e_open_icosq`) whose UMR WQEs load each RX WQE's pages into the key
//! (`mlx5e_alloc_rx_mpwqe`), completions read as `mlx5e_poll_ico_cq` reads them, a
//! linked-list striding RQ (`wq_type` 2, `mlx5e_build_rq_param`) whose WQEs are posted and
//! relinked as `mlx5_wq_ll_push` / `mlx5_wq_ll_pop` do, and the multi-packet completions
//! `mlx5e_handle_rx_cqe_mpwrq` reads (`wqe_id` the WQE's index, `wqe_counter` its first
//! stride, the consumed strides in `byte_cnt`).

use cxdirect_emu::testkit::mpwqe::{mlx5e_umr_wqe, LinkedList};
use cxdirect_emu::testkit::umr::{cqe_opcode, CQE_REQ};
use cxdirect_emu::testkit::{udp_frame, CmdFail, Cq, Host, Rq, Sq};
use cxdirect_emu::{Device, EmuConfig};
use cxdirect_hw::caps::PerProtocolNetworkingOffloadCaps;
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, CqeSyndrome, ErrCqe};
use cxdirect_hw::hca::cap_type;
use cxdirect_hw::wq::striding::{FILLER, LEN_MASK, STRIDES_MASK, STRIDES_SHIFT};

const MEM: usize = 64 << 20;
const PAGE: u64 = 4096;
/// 512 strides of 64 bytes (both context fields 0): 32 KiB, eight pages, per WQE.
const STRIDES: u32 = 512;
const STRIDE: u64 = 64;
const WQE_BYTES: u64 = STRIDES as u64 * STRIDE;
const PAGES_PER_WQE: usize = (WQE_BYTES / PAGE) as usize;
/// Four WQEs (`log_wq_sz` 2).
const LOG_WQ: u8 = 2;
const WQES: u16 = 1 << LOG_WQ;

/// A function with mlx5e's pieces of one channel: the ICOSQ and its CQ, the UMR key over
/// every WQE's pages, and the linked-list striding RQ (every frame steered to it) and its CQ.
struct Channel {
    h: Host,
    icosq: Sq,
    ico_cq: Cq,
    umr_key: u32,
    rq: Rq,
    list: LinkedList,
    cq: Cq,
}

fn channel() -> Channel {
    let mut h = Host::new(Device::loopback(EmuConfig::default()), MEM);
    h.bring_up();
    let filler = h.alloc(PAGE, PAGE);
    let umr_key = h
        .create_umr_mtt_mkey(usize::from(WQES) * PAGES_PER_WQE, filler)
        .expect("CREATE_MKEY of the UMR key");
    let ico_cq = h.create_cq(6);
    let icosq = h
        .create_icosq(ico_cq.cqn, 6, true)
        .expect("CREATE_SQ with reg_umr");
    let cq = h.create_cq(9);
    let (rq, list) = h
        .try_create_linked_striding_rq(cq.cqn, LOG_WQ, 0, 0)
        .expect("CREATE_RQ wq_type 2");
    h.steer_all_to(rq.rqn);
    // `mlx5e_alloc_rq`: WQE i covers its strides from offset i * mtts_per_wqe pages of the
    // key (no headroom: a non-linear striding RQ).
    for i in 0..WQES {
        let at = u64::from(i) * PAGES_PER_WQE as u64 * PAGE;
        h.write_ll_data(&rq, i, at, WQE_BYTES as u32, umr_key);
    }
    Channel {
        h,
        icosq,
        ico_cq,
        umr_key,
        rq,
        list,
        cq,
    }
}

impl Channel {
    /// Eight fresh pages, allocated apart and handed out in reverse so that the key's pages
    /// are neither contiguous nor in address order.
    fn scattered_pages(&mut self) -> Vec<u64> {
        let mut pages: Vec<u64> = (0..PAGES_PER_WQE)
            .map(|_| {
                let p = self.h.alloc(PAGE, PAGE);
                self.h.alloc(PAGE, PAGE);
                p
            })
            .collect();
        pages.reverse();
        pages
    }

    /// `mlx5e_alloc_rx_mpwqe` for the WQE at the list's head: a UMR WQE loading `pages` at
    /// its place in the key, rung; then, once `mlx5e_poll_ico_cq` has seen its completion,
    /// `mlx5e_post_rx_mpwqe`. Returns the posted WQE's index.
    fn map_and_post(&mut self, pages: &[u64]) -> u16 {
        let ix = self.list.head;
        let w = mlx5e_umr_wqe(&self.icosq, self.umr_key, ix, PAGES_PER_WQE, pages);
        let at = self.icosq.pi;
        self.h.post(&mut self.icosq, &w, false);
        let cqe = self.h.poll_cq(&mut self.ico_cq).expect("UMR completion");
        assert_eq!(cqe_opcode(&cqe), CQE_REQ, "{cqe:02x?}");
        assert_eq!(Cqe64::new(&cqe[..]).unwrap().wqe_counter(), at);
        self.h.ll_push(&self.rq, &mut self.list)
    }

    /// The next receive completion: (wqe_id, stride index, filler, strides, length).
    fn next(&mut self) -> (u16, u16, bool, u32, u32) {
        let cqe = self.h.poll_cq(&mut self.cq).expect("a completion");
        let c = Cqe64::new(&cqe[..]).unwrap();
        assert_eq!(c.opcode(), CqeOpcode::RespSend as u8, "{cqe:02x?}");
        assert_eq!(c.qpn(), 0, "sop_drop_qpn: no rule set a flow tag");
        let word = c.byte_cnt();
        (
            c.wqe_id(),
            c.wqe_counter(),
            word & FILLER != 0,
            word >> STRIDES_SHIFT & STRIDES_MASK,
            word & LEN_MASK,
        )
    }
}

/// Where byte `offset` of a WQE mapped onto `pages` lies.
fn at(pages: &[u64], offset: u64) -> u64 {
    pages[(offset / PAGE) as usize] + offset % PAGE
}

#[test]
fn capability_is_reported_with_striding_rqs() {
    for striding_rq in [true, false] {
        let mut h = Host::new(
            Device::loopback(EmuConfig {
                striding_rq,
                ..EmuConfig::default()
            }),
            MEM,
        );
        h.bring_up();
        let out = h.query_cap(cap_type::ETHERNET_OFFLOADS, true);
        let eth = PerProtocolNetworkingOffloadCaps::new(&out[0x10..]).unwrap();
        assert_eq!(eth.reg_umr_sq(), striding_rq);
    }
}

#[test]
fn frames_land_in_the_pages_the_umr_mapped_for_their_wqe() {
    let mut c = channel();
    let first = c.scattered_pages();
    let second = c.scattered_pages();
    assert_eq!(c.map_and_post(&first), 0);
    assert_eq!(c.map_and_post(&second), 1);
    // 100 bytes take two strides, 1024 bytes sixteen: the frames after the first start at
    // strides 2, 18, 34 and 50; the last (byte 3200) runs into the WQE's second page, which
    // lies elsewhere in memory.
    let a = udp_frame(58, 1);
    let rest: Vec<Vec<u8>> = (2..6).map(|seed| udp_frame(982, seed)).collect();
    let mut frames = vec![a.clone()];
    frames.extend(rest.iter().cloned());
    c.h.arrive(&frames);
    assert_eq!(c.next(), (0, 0, false, 2, 100));
    for (i, frame) in rest.iter().enumerate() {
        let stride = 2 + 16 * i as u16;
        assert_eq!(c.next(), (0, stride, false, 16, 1024));
        let start = u64::from(stride) * STRIDE;
        let in_page = (PAGE - start).min(1024) as usize;
        assert_eq!(c.h.read(at(&first, start), in_page), frame[..in_page]);
        if in_page < frame.len() {
            assert_eq!(c.h.read(first[1], frame.len() - in_page), frame[in_page..]);
        }
    }
    assert_eq!(c.h.read(at(&first, 0), a.len()), a);
    // Fill the rest of WQE 0 (512 - 66 strides) with 1024-byte frames and a filler: the next
    // frame goes to WQE 1, into the pages its own UMR loaded.
    let mut used = 66;
    while used + 16 <= STRIDES {
        c.h.arrive(&[udp_frame(982, 4)]);
        assert_eq!(c.next(), (0, used as u16, false, 16, 1024));
        used += 16;
    }
    let e = udp_frame(982, 5);
    c.h.arrive(std::slice::from_ref(&e));
    assert_eq!(c.next(), (0, used as u16, true, STRIDES - used, 0));
    assert_eq!(c.next(), (1, 0, false, 16, 1024));
    assert_eq!(c.h.read(second[0], e.len()), e);
}

/// A frame of 1024 bytes: sixteen strides, so 32 of them fill a WQE.
fn fill_wqe(c: &mut Channel, seed: u8) -> u16 {
    let frames: Vec<Vec<u8>> = (0..32).map(|_| udp_frame(982, seed)).collect();
    c.h.arrive(&frames);
    let (wqe, stride, filler, strides, _) = c.next();
    assert_eq!((stride, filler, strides), (0, false, 16));
    for i in 1..32 {
        assert_eq!(c.next(), (wqe, i * 16, false, 16, 1024));
    }
    wqe
}

#[test]
fn wqes_are_taken_in_next_pointer_order_read_when_the_device_moves_on() {
    let mut c = channel();
    // A list not in index order, 0 -> 2 -> 1 -> 3, whose tail (3) still names WQE 1.
    c.h.link_wqe(&c.rq, 0, 2);
    c.h.link_wqe(&c.rq, 2, 1);
    c.h.link_wqe(&c.rq, 1, 3);
    c.h.link_wqe(&c.rq, 3, 1);
    let mut mapped = Vec::new();
    for _ in 0..3 {
        let pages = c.scattered_pages();
        let ix = c.map_and_post(&pages);
        mapped.push((ix, pages));
    }
    assert_eq!(mapped.iter().map(|m| m.0).collect::<Vec<_>>(), [0, 2, 1]);
    assert_eq!(fill_wqe(&mut c, 1), 0);
    // `mlx5e_handle_rx_cqe_mpwrq`: WQE 0 is done, `mlx5_wq_ll_pop` links it after the tail
    // (WQE 3 now names WQE 0), and the refill maps and posts WQE 3 (the head).
    c.h.ll_pop(&c.rq, &mut c.list, 0);
    let pages = c.scattered_pages();
    assert_eq!(c.map_and_post(&pages), 3);
    mapped.push((3, pages));
    assert_eq!(fill_wqe(&mut c, 2), 2);
    c.h.ll_pop(&c.rq, &mut c.list, 2);
    assert_eq!(fill_wqe(&mut c, 3), 1);
    c.h.ll_pop(&c.rq, &mut c.list, 1);
    // WQE 0 comes back (the list's head now), mapped onto new pages.
    let pages = c.scattered_pages();
    assert_eq!(c.map_and_post(&pages), 0);
    mapped.push((0, pages));
    assert_eq!(fill_wqe(&mut c, 4), 3);
    c.h.ll_pop(&c.rq, &mut c.list, 3);
    // WQE 3's next segment named WQE 1 until the pop of WQE 0 relinked it: the device
    // followed the new link.
    let last = udp_frame(982, 9);
    c.h.arrive(std::slice::from_ref(&last));
    assert_eq!(c.next(), (0, 0, false, 16, 1024));
    let (_, pages) = mapped.last().unwrap();
    assert_eq!(c.h.read(pages[0], last.len()), last);
    // Every WQE's frames went to the pages mapped for it: WQE 3's last frame is in its page 7.
    let (_, pages3) = &mapped[3];
    assert_eq!(c.h.read(pages3[7] + PAGE - 1024, 1024), udp_frame(982, 4));
}

#[test]
fn no_posted_wqe_after_the_list_runs_out() {
    let mut c = channel();
    let pages = c.scattered_pages();
    c.map_and_post(&pages);
    assert_eq!(fill_wqe(&mut c, 1), 0);
    // Only WQE 0 was posted: the device stands at WQE 1 and drops the frame.
    let before = c.h.dev.counters().rx_out_of_buffer;
    c.h.arrive(&[udp_frame(982, 2)]);
    assert!(c.h.poll_cq(&mut c.cq).is_none());
    assert_eq!(c.h.dev.counters().rx_out_of_buffer, before + 1);
}

#[test]
fn a_next_index_past_the_ring_stops_the_rq() {
    let mut c = channel();
    c.h.link_wqe(&c.rq, 0, WQES);
    let pages = c.scattered_pages();
    c.map_and_post(&pages);
    // The post read the bad index as its head; put a good one back for the second post, as
    // the device reads WQE 0's next segment again when it finishes it.
    c.list.head = 1;
    let pages = c.scattered_pages();
    c.map_and_post(&pages);
    assert_eq!(fill_wqe(&mut c, 1), 0);
    assert_eq!(c.h.dev.counters().rx_striding_bad_links, 1);
    c.h.arrive(&[udp_frame(982, 2)]);
    assert!(c.h.poll_cq(&mut c.cq).is_none(), "the RQ is in error");
}

#[test]
fn umr_on_an_sq_without_reg_umr_completes_in_error() {
    let mut c = channel();
    let mut plain_cq = c.h.create_cq(6);
    let mut plain =
        c.h.create_icosq(plain_cq.cqn, 6, false)
            .expect("CREATE_SQ without reg_umr");
    let pages = c.scattered_pages();
    let w = mlx5e_umr_wqe(&plain, c.umr_key, 0, PAGES_PER_WQE, &pages);
    c.h.post(&mut plain, &w, false);
    let cqe = c.h.poll_cq(&mut plain_cq).expect("error completion");
    let err = ErrCqe::new(&cqe[..]).unwrap();
    assert_eq!(cqe_opcode(&cqe), CqeOpcode::ReqErr as u8);
    assert_eq!(err.syndrome(), CqeSyndrome::LocalQpOperation as u8);
    // The key was not loaded: a frame into WQE 0 posted without its UMR finds no mapping.
    c.h.ll_push(&c.rq, &mut c.list);
    c.h.arrive(&[udp_frame(58, 1)]);
    let cqe = c.h.poll_cq(&mut c.cq).expect("receive error completion");
    assert_eq!(
        Cqe64::new(&cqe[..]).unwrap().opcode(),
        CqeOpcode::RespErr as u8
    );
}

#[test]
fn reg_umr_and_linked_striding_rqs_are_refused_without_the_capability() {
    let mut h = Host::new(
        Device::loopback(EmuConfig {
            striding_rq: false,
            ..EmuConfig::default()
        }),
        MEM,
    );
    h.bring_up();
    let cq = h.create_cq(6);
    assert!(matches!(
        h.create_icosq(cq.cqn, 6, true),
        Err(CmdFail::Status { .. })
    ));
    assert!(h.create_icosq(cq.cqn, 6, false).is_ok());
    assert!(matches!(
        h.try_create_linked_striding_rq(cq.cqn, LOG_WQ, 0, 0),
        Err(CmdFail::Status { .. })
    ));
}
