//! `ibv_create_flow` on a raw packet QP, on a port whose receive tables Linux's mlx5e already
//! built: mlx5_ib puts the rule in the NIC receive bypass priority (`get_flow_table` in
//! `drivers/infiniband/hw/mlx5/fs.c`, namespace `MLX5_FLOW_NAMESPACE_BYPASS`), which
//! mlx5_core's fs_core creates only when the device reports the chaining capabilities
//! (`FS_CHAINING_CAPS` in `fs_core.c`: `flow_modify_en`, `modify_root`,
//! `identified_miss_table_mode`, `flow_table_modify`) and a `max_ft_level` that reaches the
//! priority's `min_ft_level`. fs_core then chains the bypass table in front of mlx5e's tables
//! by its miss, makes it root (`connect_flow_table`, `update_root_ft_create`), re-points it by
//! MODIFY_FLOW_TABLE when mlx5e puts a table in front of its own (`connect_prev_fts`), and
//! restores the root when the rule goes (`update_root_ft_destroy`). The command sequences
//! below are the ones Linux 6.12 sends (fs_core.c, fs_cmd.c).

use cxdirect_emu::testkit::flow_tables::{
    create_group, create_table, delete_fte, destroy_group, destroy_table, modify_miss, set_root,
};
use cxdirect_emu::testkit::{udp_frame, CmdFail, Cq, Host, Rq};
use cxdirect_emu::{Device, EmuConfig, Syndrome};
use cxdirect_hw::caps::FlowTableNicCap;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::flow;
use cxdirect_hw::hca::cap_type;
use cxdirect_hw::tir::{CreateTirIn, CreateTirOut};

const MEM: usize = 4 << 20;
const MAC_A: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 1];
/// The receiving port's own MAC: perftest's `raw_ethernet_bw --server -B` steers it to the
/// raw QP, taking it from mlx5e while the rule lives.
const MAC_B: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 2];
/// Another MAC, which only a promiscuous port receives.
const MAC_C: [u8; 6] = [0x02, 0xcc, 0, 0, 0, 3];

/// Table levels fs_core gives Linux 6.12's NIC receive priorities when every one of them is
/// in the tree (`set_prio_attrs`): bypass priorities 0-32 (mlx5_ib's priority 0 rule is
/// core priority 1, `ib_prio_to_core_prio`), then MACsec (2 levels), LAG (1), offloads (4),
/// ethtool (11), the kernel's TC (3) and NIC (11: promiscuous, VLAN, L2, TTC, ...) priorities,
/// leftovers, and the anchor table fs_core creates at init (`create_anchor_flow_table`).
const BYPASS_PRIO_1: u8 = 1;
const KERNEL_NIC: u8 = 54;
const PROMISC: u8 = KERNEL_NIC;
const L2: u8 = KERNEL_NIC + 2;
const TTC: u8 = KERNEL_NIC + 3;
const ANCHOR: u8 = 66;
/// The `min_ft_level` of the LAG priority, the highest one of the tree.
const LAG_MIN_LEVEL: u8 = 119;

fn bad_param(syndrome: Syndrome) -> CmdFail {
    CmdFail::status(CmdStatus::BadParameter, syndrome)
}

fn mac(m: [u8; 6]) -> u64 {
    m.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
}

fn frame_to(dst: [u8; 6], seed: u8) -> Vec<u8> {
    let mut f = udp_frame(100, seed);
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&MAC_A);
    f
}

/// `mlx5_cmd_set_fte`: op_mod 0 creates (`create_fte`), 1 modifies what `mask` selects
/// (`update_fte`); the whole entry is sent either way, forwarding to `dests`.
#[allow(clippy::too_many_arguments)]
fn set_fte(
    h: &mut Host,
    op_mod: u16,
    mask: u8,
    table: u32,
    index: u32,
    group: u32,
    dmac: Option<[u8; 6]>,
    dests: &[(u8, u32)],
) -> Result<(), CmdFail> {
    let mut input = Host::input(Opcode::SetFlowTableEntry, op_mod, 0x340 + 8 * dests.len());
    {
        let mut cmd = flow::SetFteIn::new(&mut input[..]).unwrap();
        cmd.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
            .set_table_id(table)
            .set_flow_index(index)
            .set_modify_enable_mask(mask);
        let mut ctx = cmd.flow_context_all_mut();
        ctx.set_group_id(group)
            .set_action(flow::FLOW_CONTEXT_ACTION_FWD_DEST)
            .set_destination_list_size(dests.len() as u32);
        if let Some(m) = dmac {
            ctx.match_value_mut().outer_headers_mut().set_dmac(mac(m));
        }
        for (i, &(kind, id)) in dests.iter().enumerate() {
            ctx.set_destination(i, flow::dest_format_entry(kind, id))
                .unwrap();
        }
    }
    h.exec(&input, 16).map(|_| ())
}

/// A direct TIR to `rqn` (mlx5e's, or a raw packet QP's `create_raw_packet_qp_tir`).
fn tir_to(h: &mut Host, rqn: u32) -> u32 {
    let mut input = Host::input(Opcode::CreateTir, 0, 0x110);
    CreateTirIn::new(&mut input[..])
        .unwrap()
        .ctx_mut()
        .set_disp_type(0)
        .set_inline_rqn(rqn)
        .set_transport_domain(h.td);
    let out = h.exec(&input, 16).expect("CREATE_TIR");
    CreateTirOut::new(&out[..]).unwrap().tirn()
}

const TIR: u8 = flow::FLOW_DESTINATION_TYPE_TIR;
const TABLE: u8 = flow::FLOW_DESTINATION_TYPE_FLOW_TABLE;

/// An RQ with its CQ, a TIR to it, and receive buffers posted.
struct Receiver {
    cq: Cq,
    rq: Rq,
    tirn: u32,
    lkey: u32,
}

impl Receiver {
    fn new(h: &mut Host) -> Self {
        let cq = h.create_cq(6);
        let rq = h.create_rq(cq.cqn, 6, None);
        let tirn = tir_to(h, rq.rqn);
        let lkey = h.create_mkey(false, true);
        let mut r = Self { cq, rq, tirn, lkey };
        for _ in 0..16 {
            let buf = h.alloc(2048, 64);
            h.post_recv(&mut r.rq, buf, 2048, r.lkey);
        }
        r
    }

    /// How many frames arrived since the last call.
    fn take(&mut self, h: &Host) -> usize {
        let mut n = 0;
        while h.poll_cq(&mut self.cq).is_some() {
            n += 1;
        }
        n
    }
}

/// mlx5e's steering as far as this test needs it, in the order Linux builds it: fs_core's
/// anchor table at init (made root), then mlx5e's TTC table (catch-all to its TIR) and L2
/// table (the port's MAC to the TTC table), each created with its miss to the next chained
/// table (the anchor) and made root as it comes in front (`update_root_ft_create`).
struct Mlx5e {
    anchor: u32,
    ttc: u32,
    l2: u32,
}

fn mlx5e_steering(h: &mut Host, tirn: u32) -> Mlx5e {
    let anchor = create_table(h, ANCHOR, 0, None).expect("anchor table");
    set_root(h, anchor);
    let ttc = create_table(h, TTC, 4, Some(anchor)).expect("TTC table");
    set_root(h, ttc);
    let g = create_group(h, ttc, 0, 0, false);
    set_fte(h, 0, 0, ttc, 0, g, None, &[(TIR, tirn)]).expect("TTC entry");
    let l2 = create_table(h, L2, 4, Some(anchor)).expect("L2 table");
    set_root(h, l2);
    let g = create_group(h, l2, 0, 0, true);
    set_fte(h, 0, 0, l2, 0, g, Some(MAC_B), &[(TABLE, ttc)]).expect("L2 entry");
    Mlx5e { anchor, ttc, l2 }
}

/// mlx5_ib's bypass table for priority 0 (`_get_prio`: an auto-grouped table of
/// `min(MLX5_FS_MAX_ENTRIES, 2^log_max_ft_size)` entries): created with its miss to the first
/// table after the bypass priorities (mlx5e's L2 table) and made root, being the lowest
/// level. Then the rule (`mlx5_add_flow_rules`): an auto group (6 groups wanted, so each
/// takes 65536 / 7 entries, `mlx5_create_auto_grouped_flow_table`) masking the destination
/// MAC, and the entry forwarding to the raw QP's TIR. Returns (table, group).
fn ib_create_flow(h: &mut Host, next: u32, tirn: u32) -> (u32, u32) {
    let table = create_table(h, BYPASS_PRIO_1, 16, Some(next)).expect("bypass table");
    set_root(h, table);
    let group = create_group(h, table, 0, 65536 / 7 - 1, true);
    set_fte(h, 0, 0, table, 0, group, Some(MAC_B), &[(TIR, tirn)]).expect("bypass entry");
    (table, group)
}

/// `mlx5_ib_destroy_flow`: the entry, its emptied auto group; then the table
/// (`mlx5_destroy_flow_table`), after `update_root_ft_destroy` made the next table root.
fn ib_destroy_flow(h: &mut Host, table: u32, group: u32, next: u32) {
    delete_fte(h, table, 0);
    destroy_group(h, table, group);
    set_root(h, next);
    destroy_table(h, table).expect("DESTROY_FLOW_TABLE of the bypass table");
}

/// The receiving host, on a loopback cable (what it puts on the wire comes back to it).
fn host() -> Host {
    let mut h = Host::new(
        Device::loopback(EmuConfig {
            mac: MAC_B,
            ..EmuConfig::default()
        }),
        MEM,
    );
    h.bring_up();
    h
}

/// What fs_core's `init_root_tree_recursive` checks before it puts a chained priority (the
/// bypass one among them) in the tree: the four chaining capabilities, and a `max_ft_level`
/// at or above the priority's `min_ft_level`. Without them `mlx5_get_flow_namespace` has no
/// bypass namespace and `ibv_create_flow` fails with EOPNOTSUPP before any command.
#[test]
fn the_flow_table_caps_give_linux_its_bypass_priority() {
    let mut h = host();
    let out = h.query_cap(cap_type::FLOW_TABLE, true);
    let caps = FlowTableNicCap::new(&out[0x10..]).unwrap();
    let rx = caps.flow_table_properties_nic_receive();
    assert!(rx.ft_support());
    assert!(rx.flow_modify_en(), "FS_CHAINING_CAPS: flow_modify_en");
    assert!(rx.modify_root(), "FS_CHAINING_CAPS: modify_root");
    assert!(
        rx.identified_miss_table_mode(),
        "FS_CHAINING_CAPS: identified_miss_table_mode"
    );
    assert!(
        rx.flow_table_modify(),
        "FS_CHAINING_CAPS: flow_table_modify"
    );
    assert!(
        rx.max_ft_level() >= LAG_MIN_LEVEL && rx.max_ft_level() >= ANCHOR,
        "max_ft_level {} leaves Linux priorities out",
        rx.max_ft_level()
    );
    assert_eq!(rx.log_max_ft_size(), 16, "mlx5_ib's bypass table size");
    h.teardown();
}

/// The raw QP's rule takes the port's MAC from mlx5e while it lives; mlx5e turning
/// promiscuous puts its table in front of its own, and fs_core re-points the bypass table's
/// miss at it (and back when it goes) by MODIFY_FLOW_TABLE; destroying the rule gives the
/// MAC back to mlx5e.
#[test]
fn a_raw_qp_flow_rule_in_the_bypass_priority_takes_its_mac_from_mlx5e_and_gives_it_back() {
    let mut h = host();
    let mut en = Receiver::new(&mut h);
    let mut raw = Receiver::new(&mut h);
    let e = mlx5e_steering(&mut h, en.tirn);

    // Before the rule: the port's MAC reaches mlx5e; another MAC misses to the empty anchor.
    h.arrive(&[frame_to(MAC_B, 1), frame_to(MAC_C, 2)]);
    assert_eq!((en.take(&h), raw.take(&h)), (1, 0));

    let (bypass, group) = ib_create_flow(&mut h, e.l2, raw.tirn);
    h.arrive(&[frame_to(MAC_B, 3), frame_to(MAC_B, 4)]);
    assert_eq!(
        (en.take(&h), raw.take(&h)),
        (0, 2),
        "the bypass rule takes the MAC"
    );

    // mlx5e turns promiscuous: its promiscuous table (created with its miss at the anchor)
    // goes in front of the L2 table; connect_prev_fts points the bypass table's miss at it;
    // the root stays the bypass table, whose level is lower.
    let promisc = create_table(&mut h, PROMISC, 0, Some(e.anchor)).expect("promiscuous table");
    modify_miss(&mut h, bypass, Some(promisc)).expect("MODIFY_FLOW_TABLE to the new table");
    let g = create_group(&mut h, promisc, 0, 0, false);
    set_fte(&mut h, 0, 0, promisc, 0, g, None, &[(TABLE, e.ttc)]).expect("promiscuous entry");
    h.arrive(&[frame_to(MAC_C, 5), frame_to(MAC_B, 6)]);
    assert_eq!(
        (en.take(&h), raw.take(&h)),
        (1, 1),
        "another MAC through the bypass miss and the promiscuous table; the port's MAC still to the raw QP"
    );
    // A table still some table's miss cannot go, and a miss may only lead deeper.
    delete_fte(&mut h, promisc, 0);
    destroy_group(&mut h, promisc, g);
    assert_eq!(
        destroy_table(&mut h, promisc),
        Err(CmdFail::status(
            CmdStatus::BadResourceState,
            Syndrome::ObjectInUse
        ))
    );
    assert_eq!(
        modify_miss(&mut h, e.l2, Some(bypass)),
        Err(bad_param(Syndrome::BadSteeringParams))
    );
    // Promiscuous off: disconnect_flow_table points the bypass miss at the next table (L2)
    // before the promiscuous table goes.
    modify_miss(&mut h, bypass, Some(e.l2)).expect("MODIFY_FLOW_TABLE back");
    destroy_table(&mut h, promisc).expect("promiscuous table");
    h.arrive(&[frame_to(MAC_C, 7), frame_to(MAC_B, 8)]);
    assert_eq!((en.take(&h), raw.take(&h)), (0, 1));

    ib_destroy_flow(&mut h, bypass, group, e.l2);
    h.arrive(&[frame_to(MAC_B, 9)]);
    assert_eq!(
        (en.take(&h), raw.take(&h)),
        (1, 0),
        "the previous path is back"
    );
    h.teardown();
}

/// A second raw QP's rule with the same specification lands on the same entry: fs_core adds
/// its TIR to the entry's destinations by SET_FTE op_mod 1 with the destination list
/// selected (`add_rule_fte`, `mlx5_cmd_update_fte`), and takes it out the same way when that
/// rule goes while the other stays (`del_sw_hw_rule`, `modify_fte`).
#[test]
fn a_second_rule_on_the_same_entry_is_added_and_removed_in_place() {
    let mut h = host();
    let mut en = Receiver::new(&mut h);
    let mut one = Receiver::new(&mut h);
    let mut two = Receiver::new(&mut h);
    let e = mlx5e_steering(&mut h, en.tirn);
    let (bypass, group) = ib_create_flow(&mut h, e.l2, one.tirn);
    let dests = [(TIR, two.tirn), (TIR, one.tirn)];
    set_fte(
        &mut h,
        1,
        flow::SET_FTE_MODIFY_DESTINATION_LIST,
        bypass,
        0,
        group,
        Some(MAC_B),
        &dests,
    )
    .expect("SET_FTE op_mod 1 adding a destination");
    h.arrive(&[frame_to(MAC_B, 1)]);
    assert_eq!((en.take(&h), one.take(&h), two.take(&h)), (0, 1, 1));

    // An in-place change keeps the match value, and needs the entry to exist.
    assert_eq!(
        set_fte(
            &mut h,
            1,
            flow::SET_FTE_MODIFY_DESTINATION_LIST,
            bypass,
            0,
            group,
            Some(MAC_C),
            &dests
        ),
        Err(bad_param(Syndrome::BadSteeringParams))
    );
    assert_eq!(
        set_fte(
            &mut h,
            1,
            flow::SET_FTE_MODIFY_DESTINATION_LIST,
            bypass,
            1,
            group,
            Some(MAC_B),
            &dests
        ),
        Err(CmdFail::status(
            CmdStatus::BadResource,
            Syndrome::NoSuchObject
        ))
    );
    // Without the destination list selected the old list stays.
    set_fte(
        &mut h,
        1,
        flow::SET_FTE_MODIFY_ACTION,
        bypass,
        0,
        group,
        Some(MAC_B),
        &[(TIR, two.tirn)],
    )
    .expect("SET_FTE op_mod 1, action only");
    h.arrive(&[frame_to(MAC_B, 2)]);
    assert_eq!((en.take(&h), one.take(&h), two.take(&h)), (0, 1, 1));

    // The first QP's rule goes: the entry keeps the second QP's TIR.
    set_fte(
        &mut h,
        1,
        flow::SET_FTE_MODIFY_DESTINATION_LIST,
        bypass,
        0,
        group,
        Some(MAC_B),
        &[(TIR, two.tirn)],
    )
    .expect("SET_FTE op_mod 1 removing a destination");
    h.arrive(&[frame_to(MAC_B, 3)]);
    assert_eq!((en.take(&h), one.take(&h), two.take(&h)), (0, 0, 1));

    ib_destroy_flow(&mut h, bypass, group, e.l2);
    h.arrive(&[frame_to(MAC_B, 4)]);
    assert_eq!((en.take(&h), one.take(&h), two.take(&h)), (1, 0, 0));
    h.teardown();
}
