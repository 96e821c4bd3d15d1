//! Receive-side pieces of the software steering tests: a plugged function, a receive queue
//! behind a TIR with the ICM address CREATE_TIR gives it, the root rule forwarding to a
//! software-owned table, and a DR table of one source-MAC rule as rdma-core's matchers lay it
//! out (dr_table.c, dr_matcher.c, dr_rule.c).

use super::dr;
use super::flow_tables::{catch_all, create_table, set_root};
use super::ste::{self as tb, Builder};
use super::{udp_frame, CmdFail, Cq, Host};
use crate::{Device, EmuConfig};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::flow;
use cxdirect_hw::tir::{CreateTirIn, CreateTirOut};

/// Host memory of a plugged function.
const MEM: usize = 8 << 20;
/// The lookup type of rdma-core's smac matcher (dr_ste_v1.h): the outer source MAC.
pub const ETHL2_SRC_O: u16 = 0x0005;
/// The anchors' lookup type.
pub const DONT_CARE: u16 = 0x000f;
/// The smac bytes of an ETHL2_SRC_O tag (`ste_eth_l2_src_v1`: bytes 4..=9), as a byte mask.
pub const SMAC_BYTE_MASK: u16 = 0x0fc0;
/// The source MAC the rules of [`smac_table`] match.
pub const SMAC: [u8; 6] = [0x02, 0x5a, 0, 0, 0, 0x07];
/// A source MAC no rule matches.
pub const OTHER_SMAC: [u8; 6] = [0x02, 0x5a, 0, 0, 0, 0x08];

/// A function behind a loopback plug: [`Host::arrive`] hands it frames from the cable.
pub fn plugged(sw_steering: bool) -> Host {
    let dev = Device::loopback(EmuConfig {
        sw_steering,
        ..EmuConfig::default()
    });
    let mut h = Host::new(dev, MEM);
    h.bring_up();
    h
}

/// CREATE_FLOW_TABLE of a software-owned NIC receive table.
pub fn create_sw_table(h: &mut Host, level: u8, root: u64) -> Result<u32, CmdFail> {
    dr::create_sw_table(h, flow::FLOW_TABLE_TYPE_NIC_RX, level, root)
}

/// A receive queue with buffers behind a direct TIR; the TIR and its ICM address as
/// CREATE_TIR's output gives them.
pub struct Receiver {
    /// Its completion queue.
    pub cq: Cq,
    /// The TIR.
    pub tirn: u32,
    /// The TIR's ICM address (CREATE_TIR's `icm_address`).
    pub tir_icm: u64,
}

/// A receive queue behind a new direct TIR, 16 buffers of 2 KiB posted.
pub fn receiver(h: &mut Host) -> Receiver {
    let cq = h.create_cq(6);
    let mut rq = h.create_rq(cq.cqn, 6, None);
    let lkey = h.create_mkey(false, true);
    for _ in 0..16 {
        let buf = h.alloc(2048, 64);
        h.post_recv(&mut rq, buf, 2048, lkey);
    }
    let mut input = Host::input(Opcode::CreateTir, 0, 0x110);
    CreateTirIn::new(&mut input[..])
        .expect("layout")
        .ctx_mut()
        .set_inline_rqn(rq.rqn)
        .set_transport_domain(h.td);
    let out = h.exec(&input, 16).expect("CREATE_TIR");
    let out = CreateTirOut::new(&out[..]).expect("layout");
    // mlx5_ib's create_raw_packet_qp: 31_0 | 39_32 << 32 | 63_40 << 40.
    let tir_icm = u64::from(out.icm_address_31_0())
        | u64::from(out.icm_address_39_32()) << 32
        | u64::from(out.icm_address_63_40()) << 40;
    Receiver {
        cq,
        tirn: out.tirn(),
        tir_icm,
    }
}

/// The root firmware table with one catch-all entry forwarding to `table`, as the kernel's
/// rule for a DR "go to table" action on the root level (MLX5DV_FLOW_ACTION_DEST_DEVX) does.
pub fn forward_root_to(h: &mut Host, table: u32) {
    let root = create_table(h, 0, 2, None).expect("CREATE_FLOW_TABLE");
    catch_all(h, root, flow::FLOW_DESTINATION_TYPE_FLOW_TABLE, table, 0);
    set_root(h, root);
}

/// QUERY_FLOW_TABLE as `dr_devx_query_flow_table` sends it: `sw_owner_icm_root_0`.
pub fn query_root(h: &mut Host, table: u32) -> Result<u64, CmdFail> {
    let mut input = Host::input(Opcode::QueryFlowTable, 0, 0x40);
    flow::QueryFlowTableIn::new(&mut input[..])
        .expect("layout")
        .set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
        .set_table_id(table);
    let out = h.exec(&input, 0x40)?;
    Ok(flow::QueryFlowTableOut::new(&out[..])
        .expect("layout")
        .flow_table_context()
        .sw_owner_icm_root_0())
}

/// The flow tag an Ethernet receive CQE carries: `sop_drop_qpn`'s low 24 bits, where libmlx5's
/// `mlx5_cq_read_flow_tag` and DPDK's mark read it.
pub fn flow_tag(cqe: &[u8]) -> u32 {
    u32::from_be_bytes(cqe[0x38..0x3c].try_into().expect("4 bytes")) & 0x00ff_ffff
}

/// The entries of a DR table with one smac matcher (one slot) and one rule, laid out from
/// `base`: the table's anchor (always hit into the matcher), the rule (counting into `counter`
/// and hitting `dest`), and the matcher's end anchor (always miss to `default`).
pub fn smac_table(
    base: u64,
    gvmi: u16,
    counter: u32,
    dest: u64,
    default: u64,
) -> Vec<(u64, Builder)> {
    let (anchor, matcher, end) = (base, base + 0x1000, base + 0x2000);
    let mut a = Builder::init(DONT_CARE, gvmi);
    a.always_hit_htbl(SMAC_BYTE_MASK, ETHL2_SRC_O, matcher, 1);
    let mut tag = [0u8; 16];
    tag[4..10].copy_from_slice(&SMAC);
    let mut mask = [0u8; 16];
    mask[4..10].fill(0xff);
    let mut rule = Builder::init(ETHL2_SRC_O, gvmi);
    rule.bit_mask(mask)
        .tag(tag)
        .action(0, &tb::flow_tag(0x77))
        .counter(counter)
        .hit(dest, 1)
        .miss(end);
    let mut e = Builder::init(DONT_CARE, gvmi);
    e.always_miss(default);
    vec![(anchor, a), (matcher, rule), (end, e)]
}

/// A UDP frame from `smac`.
pub fn frame_from(smac: [u8; 6]) -> Vec<u8> {
    let mut f = udp_frame(64, 3);
    f[6..12].copy_from_slice(&smac);
    f
}

/// What became of frames that arrived from the cable: the receive CQEs they left on a
/// queue's CQ, and how many the steering dropped or failed on.
pub struct Arrived {
    /// The CQEs polled, in order.
    pub cqes: Vec<Vec<u8>>,
    /// Frames dropped by steering (`rx_steer_drops`).
    pub steer_drops: u64,
    /// Walks that ended in an error (`rx_sw_steering_errors`).
    pub sw_steering_errors: u64,
}

/// Hands `frames` to the function from the cable and collects what they left on `cq`.
pub fn arrive_at(h: &mut Host, cq: &mut Cq, frames: &[Vec<u8>]) -> Arrived {
    let before = h.dev.counters();
    h.arrive(frames);
    let cqes = std::iter::from_fn(|| h.poll_cq(cq)).collect();
    let after = h.dev.counters();
    Arrived {
        cqes,
        steer_drops: after.rx_steer_drops - before.rx_steer_drops,
        sw_steering_errors: after.rx_sw_steering_errors - before.rx_sw_steering_errors,
    }
}
