//! Striding (multi-packet) receive queues, driven by hand: frames fill a WQE's strides one after
//! another, a frame that does not fit what is left closes the WQE with a filler, completions
//! name the WQE, the first stride and the stride count, and compressed sessions carry the
//! stride index in checksum-format mini-CQEs.

use cxdirect_emu::counters::QueueKind;
use cxdirect_emu::testkit::{udp_frame, CmdFail, Cq, Host, Rq};
use cxdirect_emu::{Device, EmuConfig};
use cxdirect_hw::cqe::{
    mini_array_slot, mini_cqe_res_format, Cqe64, CqeOpcode, MiniCqe8Csum, MINI_CQE_SIZE,
};
use cxdirect_hw::wq::striding::{FILLER, LEN_MASK, STRIDES_MASK, STRIDES_SHIFT};

const MEM: usize = 64 << 20;
/// 512 strides of 64 bytes (both context fields 0): 32 KiB per WQE.
const STRIDES: u32 = 512;
const STRIDE: u64 = 64;
const WQE_BYTES: u64 = STRIDES as u64 * STRIDE;

/// A function whose every frame is steered to a striding RQ of four WQEs (32 KiB buffers,
/// `posted` of them posted) completing on `cq` (compressed in `format` when given).
struct Rig {
    h: Host,
    key: u32,
    cq: Cq,
    rq: Rq,
    bufs: Vec<u64>,
}

fn rig(config: EmuConfig, format: Option<u8>, shift: bool, posted: usize) -> Rig {
    let mut h = Host::new(Device::loopback(config), MEM);
    h.bring_up();
    let key = h.create_mkey(true, true);
    let cq = h.try_create_cq(8, format).expect("CREATE_CQ");
    let mut rq = h
        .try_create_striding_rq(cq.cqn, 2, 0, 0, shift)
        .expect("CREATE_RQ striding");
    h.steer_all_to(rq.rqn);
    let bufs: Vec<u64> = (0..4).map(|_| h.alloc(WQE_BYTES, 4096)).collect();
    for &b in &bufs[..posted] {
        h.post_striding_recv(&mut rq, b, WQE_BYTES as u32, key);
    }
    Rig {
        h,
        key,
        cq,
        rq,
        bufs,
    }
}

impl Rig {
    /// The next plain completion: (wqe_id, stride index, filler, strides, length).
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
            (word >> STRIDES_SHIFT) & STRIDES_MASK,
            word & LEN_MASK,
        )
    }
}

fn frames(lens: &[usize]) -> Vec<Vec<u8>> {
    lens.iter()
        .enumerate()
        .map(|(i, &len)| udp_frame(len, i as u8))
        .collect()
}

#[test]
fn frames_fill_consecutive_strides_of_one_wqe_and_land_where_their_completions_say() {
    let mut r = rig(EmuConfig::default(), None, false, 2);
    // 60 + 42 bytes of headers: 1, 2, 16 and 1 strides.
    let sent = frames(&[18, 86, 980, 18]);
    r.h.arrive(&sent);
    let mut stride = 0u16;
    for frame in &sent {
        let (wqe, at, filler, strides, len) = r.next();
        assert_eq!((wqe, at, filler), (0, stride, false));
        assert_eq!(len as usize, frame.len());
        assert_eq!(strides as usize, frame.len().div_ceil(STRIDE as usize));
        let landed = r.h.read(r.bufs[0] + u64::from(at) * STRIDE, frame.len());
        assert_eq!(&landed, frame);
        stride += strides as u16;
    }
    assert_eq!(stride, 20);
    assert!(r.h.poll_cq(&mut r.cq).is_none());
    let qc =
        r.h.dev
            .queue_counters(QueueKind::Rq, r.rq.rqn)
            .expect("counted");
    assert_eq!(
        (qc.frames, qc.wqes),
        (4, 0),
        "the WQE is still being filled"
    );
}

#[test]
fn a_frame_that_does_not_fit_closes_the_wqe_with_a_filler_and_starts_the_next() {
    let mut r = rig(EmuConfig::default(), None, false, 2);
    // 31 frames of 16 strides leave 16; the next needs 18.
    let big = udp_frame(980, 1);
    r.h.arrive(&vec![big.clone(); 31]);
    for i in 0..31u16 {
        assert_eq!(r.next(), (0, i * 16, false, 16, big.len() as u32));
    }
    let longer = udp_frame(1100, 2);
    r.h.arrive(std::slice::from_ref(&longer));
    let (wqe, at, filler, strides, _) = r.next();
    assert_eq!((wqe, at, filler, strides), (0, 496, true, 16));
    assert_eq!(r.next(), (1, 0, false, 18, longer.len() as u32));
    assert_eq!(r.h.read(r.bufs[1], longer.len()), longer);
    let c = r.h.dev.counters();
    assert_eq!(c.rx_striding_fillers, 1);
    let qc =
        r.h.dev
            .queue_counters(QueueKind::Rq, r.rq.rqn)
            .expect("counted");
    assert_eq!((qc.frames, qc.wqes), (32, 1));
}

#[test]
fn a_wqe_filled_exactly_is_done_without_a_filler() {
    let mut r = rig(EmuConfig::default(), None, false, 2);
    let big = udp_frame(980, 1);
    r.h.arrive(&vec![big.clone(); 33]);
    for i in 0..32u16 {
        assert_eq!(r.next(), (0, i * 16, false, 16, big.len() as u32));
    }
    assert_eq!(r.next(), (1, 0, false, 16, big.len() as u32));
    assert_eq!(r.h.dev.counters().rx_striding_fillers, 0);
    assert_eq!(
        r.h.dev
            .queue_counters(QueueKind::Rq, r.rq.rqn)
            .expect("counted")
            .wqes,
        1
    );
}

#[test]
fn with_the_two_byte_shift_each_frame_starts_two_bytes_into_its_stride() {
    let mut r = rig(EmuConfig::default(), None, true, 1);
    // 63 bytes fit one stride alone, not with the shift; 62 still do.
    let sent = frames(&[21, 20]);
    r.h.arrive(&sent);
    assert_eq!(r.next(), (0, 0, false, 2, 63));
    assert_eq!(r.next(), (0, 2, false, 1, 62));
    assert_eq!(r.h.read(r.bufs[0] + 2, 63), sent[0]);
    assert_eq!(r.h.read(r.bufs[0] + 2 * STRIDE + 2, 62), sent[1]);
}

/// A compressed session on a striding RQ: each mini-CQE's stride index in the checksum and
/// stride index format (`MLX5_CQE_FORMAT_CSUM_STRIDX`, which mlx5e asks for when
/// `mini_cqe_resp_stride_index` is set); in the plain checksum format the same two bytes are
/// reserved (zero), and Linux counts the index on from the title's byte counts
/// (`mlx5e_decompress_cqe`, `mpwrq_get_cqe_consumed_strides`).
#[test]
fn a_compressed_session_carries_each_stride_index_in_its_mini_cqes() {
    for format in [mini_cqe_res_format::CSUM_STRIDX, mini_cqe_res_format::CSUM] {
        let r = rig(EmuConfig::default(), Some(format), false, 2);
        // 1, 2, 1, 2... strides.
        let lens: Vec<usize> = (0..10).map(|i| if i % 2 == 0 { 18 } else { 86 }).collect();
        let sent = frames(&lens);
        r.h.arrive(&sent);
        let title = r.h.cq_slot(&r.cq, 0);
        let t = Cqe64::new(&title[..]).unwrap();
        assert_eq!(t.cqe_format(), cxdirect_hw::cqe::cqe_format::COMPRESSED);
        assert_eq!(t.byte_cnt(), 10, "one session of ten");
        assert_eq!(t.wqe_id(), 0);
        let mut stride = 0u16;
        for (i, frame) in sent.iter().enumerate() {
            let array = r.h.cq_slot(&r.cq, mini_array_slot(i as u32));
            let at = (i % 8) * MINI_CQE_SIZE;
            let mini = MiniCqe8Csum::new(&array[at..at + MINI_CQE_SIZE]).unwrap();
            let strides = frame.len().div_ceil(STRIDE as usize) as u32;
            let carried = if format == mini_cqe_res_format::CSUM {
                0
            } else {
                stride
            };
            assert_eq!(mini.stridx(), carried, "format {format}, completion {i}");
            assert_eq!(
                mini.byte_cnt(),
                strides << STRIDES_SHIFT | frame.len() as u32
            );
            stride += strides as u16;
        }
    }
}

#[test]
fn a_frame_without_a_next_wqe_is_dropped_after_the_filler() {
    let mut r = rig(EmuConfig::default(), None, false, 1);
    let big = udp_frame(980, 1);
    r.h.arrive(&vec![big.clone(); 31]);
    for _ in 0..31 {
        r.next();
    }
    r.h.arrive(&[udp_frame(1100, 2)]);
    let (wqe, at, filler, strides, _) = r.next();
    assert_eq!((wqe, at, filler, strides), (0, 496, true, 16));
    assert!(r.h.poll_cq(&mut r.cq).is_none());
    assert_eq!(r.h.dev.counters().rx_out_of_buffer, 1);
    // Posting the next WQE lets frames in again, from its first stride.
    let key = r.key;
    r.h.post_striding_recv(&mut r.rq, r.bufs[1], WQE_BYTES as u32, key);
    r.h.arrive(&[udp_frame(18, 3)]);
    assert_eq!(r.next(), (1, 0, false, 1, 60));
}

#[test]
fn a_too_short_buffer_completes_in_error() {
    let mut r = rig(EmuConfig::default(), None, false, 0);
    let key = r.key;
    r.h.post_striding_recv(&mut r.rq, r.bufs[0], WQE_BYTES as u32 - 64, key);
    r.h.arrive(&[udp_frame(18, 3)]);
    let cqe = r.h.poll_cq(&mut r.cq).expect("error completion");
    let c = Cqe64::new(&cqe[..]).unwrap();
    assert_eq!(c.opcode(), CqeOpcode::RespErr as u8);
    assert_eq!(r.h.dev.counters().rx_delivered, 0);
}

#[test]
fn creation_is_refused_without_the_capability_and_outside_the_geometry() {
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
        h.try_create_striding_rq(cq.cqn, 2, 0, 0, false),
        Err(CmdFail::Status { .. })
    ));
    let mut h = Host::new(Device::loopback(EmuConfig::default()), MEM);
    h.bring_up();
    let cq = h.create_cq(6);
    // log_wqe_num_of_strides 8 would be 2^17 strides, or, signed with ext_stride_num_range,
    // 2 strides: below the 8 that range reaches down to.
    assert!(matches!(
        h.try_create_striding_rq(cq.cqn, 2, 8, 0, false),
        Err(CmdFail::Status { .. })
    ));
    assert!(h.try_create_striding_rq(cq.cqn, 2, 7, 7, false).is_ok());
}

/// `ext_stride_num_range`: the 4-bit stride count is signed, down to 8 strides, as mlx5e writes
/// it for its linear 2 KiB strides (`mlx5e_build_rq_param`: `log_wqe_num_of_strides -
/// MLX5_MPWQE_LOG_NUM_STRIDES_BASE`); a frame then takes one stride, and the ninth starts the
/// next WQE.
#[test]
fn with_ext_stride_num_range_a_wqe_may_have_as_few_as_eight_strides() {
    let mut h = Host::new(Device::loopback(EmuConfig::default()), MEM);
    h.bring_up();
    let page = h.query_cap(cxdirect_hw::hca::cap_type::GENERAL_DEVICE, true);
    let general = cxdirect_hw::caps::CmdHcaCap::new(&page[0x10..]).expect("layout");
    assert!(general.ext_stride_num_range());
    let key = h.create_mkey(true, true);
    let mut cq = h.try_create_cq(8, None).expect("CREATE_CQ");
    for refused in [0x8, 0x9] {
        assert!(
            matches!(
                h.try_create_striding_rq(cq.cqn, 2, refused, 5, false),
                Err(CmdFail::Status { .. })
            ),
            "field {refused:#x}: fewer than 8 strides"
        );
    }
    // 0xa: 2^(9 - 6) = 8 strides; stride size field 5: 2 KiB.
    let mut rq = h
        .try_create_striding_rq(cq.cqn, 2, 0xa, 5, false)
        .expect("8 strides of 2 KiB");
    h.steer_all_to(rq.rqn);
    let bufs: Vec<u64> = (0..2).map(|_| h.alloc(8 * 2048, 4096)).collect();
    for &b in &bufs {
        h.post_striding_recv(&mut rq, b, 8 * 2048, key);
    }
    let sent = frames(&[1400; 9]);
    h.arrive(&sent);
    for (i, frame) in sent.iter().enumerate() {
        let cqe = h.poll_cq(&mut cq).expect("a completion");
        let c = Cqe64::new(&cqe[..]).unwrap();
        let word = c.byte_cnt();
        let (wqe, stride) = (i / 8, i % 8);
        assert_eq!(
            (
                c.wqe_id(),
                c.wqe_counter(),
                (word >> STRIDES_SHIFT) & STRIDES_MASK
            ),
            (wqe as u16, stride as u16, 1),
            "frame {i}"
        );
        assert_eq!(
            h.read(bufs[wqe] + 2048 * stride as u64, frame.len()),
            *frame
        );
    }
}
