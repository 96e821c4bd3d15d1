//! RC QPs, the RoCE address table and the RoCE capabilities, driven by hand-built commands:
//! the state machine with every transition it refuses, mandatory and optional attributes, the
//! checks on paths, MTUs and GID indexes, and that a refused command creates, changes and leaks
//! nothing.

use cxdirect_emu::testkit::{CmdFail, Cq, Host};
use cxdirect_emu::{Device, EmuConfig, RemoteAccess, Syndrome};
use cxdirect_hw::caps::CmdHcaCap;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::cqe::CqeSyndrome;
use cxdirect_hw::hca::{cap_type, query_cap_op_mod, set_cap_op_mod, QueryHcaCapOut};
use cxdirect_hw::mkey::{mkey_from_index, CreateMkeyIn, CreateMkeyOut, MKC_ACCESS_MODE_PA};
use cxdirect_hw::qp::{
    mtu, optpar, rq_type, service_type, state, CreateQpIn, CreateQpOut, Qpc, Rst2initQpIn,
};
use cxdirect_hw::roce::{l3_type, roce_version, QueryRoceAddressOut, RoceCap, SetRoceAddressIn};
use cxdirect_hw::vport::ModifyNicVportContextIn;

const MEM: usize = 8 << 20;
const QPC_BYTE: usize = 0x18;
const QUERY_QP_OUT: usize = 0x1d0;
const PEER_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2];
const OWN_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1];

fn host(roce: bool) -> Host {
    let cfg = EmuConfig {
        roce,
        ..EmuConfig::default()
    };
    let mut h = Host::new(Device::loopback(cfg), MEM);
    h.bring_up();
    h
}

fn status(err: CmdFail) -> (u8, u32) {
    match err {
        CmdFail::Status { status, syndrome } => (status, syndrome),
        other => panic!("expected a command status, got {other:?}"),
    }
}

fn refused(result: Result<Vec<u8>, CmdFail>, want: CmdStatus, syndrome: Syndrome) {
    let got = status(result.expect_err("command must be refused"));
    assert_eq!(got, (want as u8, syndrome as u32));
}

/// What a test QP is made of.
struct QpSpec {
    st: u8,
    rq: u8,
    rmpn: u32,
    no_sq: bool,
    cqn: u32,
}

fn spec(cq: &Cq) -> QpSpec {
    QpSpec {
        st: service_type::RC,
        rq: rq_type::REGULAR,
        rmpn: 0,
        no_sq: false,
        cqn: cq.cqn,
    }
}

/// CREATE_QP with a 16-entry receive ring of 64-byte WQEs and a 16-WQEBB send ring.
fn try_create_qp(h: &mut Host, s: &QpSpec) -> Result<u32, CmdFail> {
    let buf = h.alloc(8192, 4096);
    let dbr = h.alloc(8, 64);
    let mut input = Host::input(Opcode::CreateQp, 0, 0x110 + 16);
    let mut cmd = CreateQpIn::new(&mut input[..]).expect("layout");
    cmd.qpc_mut()
        .set_st(s.st)
        .set_pm_state(3)
        .set_pd(h.pd)
        .set_uar_page(h.uar)
        .set_cqn_snd(s.cqn)
        .set_cqn_rcv(s.cqn)
        .set_rq_type(s.rq)
        .set_srqn_rmpn_xrqn(s.rmpn)
        .set_log_rq_size(4)
        .set_log_rq_stride(2)
        .set_no_sq(s.no_sq)
        .set_log_sq_size(4)
        .set_log_msg_max(20)
        .set_ts_format(1)
        .set_dbr_addr(dbr);
    cmd.set_pas(0, buf).expect("room");
    cmd.set_pas(1, buf + 4096).expect("room");
    let out = h.exec(&input, 16)?;
    Ok(CreateQpOut::new(&out[..]).expect("layout").qpn())
}

/// A transition input for `qpn` with `mask`, its context filled by `fill`.
fn modify(
    h: &mut Host,
    opcode: Opcode,
    qpn: u32,
    mask: u32,
    fill: impl FnOnce(&mut Qpc<&mut [u8]>),
) -> Result<Vec<u8>, CmdFail> {
    let mut input = Host::input(opcode, 0, 0x110);
    let mut cmd = Rst2initQpIn::new(&mut input[..]).expect("layout");
    cmd.set_qpn(qpn).set_opt_param_mask(mask);
    fill(&mut cmd.qpc_mut());
    h.exec(&input, 16)
}

fn simple_qp_cmd(h: &mut Host, opcode: Opcode, qpn: u32) -> Result<Vec<u8>, CmdFail> {
    // Every one of these inputs has the QPN at bit 0x48 (bytes 9..12), as `qp_2err_in` does.
    let mut input = Host::input(opcode, 0, 0x10);
    cxdirect_hw::qp::Qp2errIn::new(&mut input[..])
        .expect("layout")
        .set_qpn(qpn);
    h.exec(
        &input,
        if opcode == Opcode::QueryQp {
            QUERY_QP_OUT
        } else {
            16
        },
    )
}

fn query(h: &mut Host, qpn: u32) -> Vec<u8> {
    simple_qp_cmd(h, Opcode::QueryQp, qpn).expect("QUERY_QP")
}

fn qp_state(h: &mut Host, qpn: u32) -> u8 {
    let out = query(h, qpn);
    Qpc::new(&out[QPC_BYTE..]).expect("layout").state()
}

fn rst2init(h: &mut Host, qpn: u32) -> Result<Vec<u8>, CmdFail> {
    modify(h, Opcode::Rst2initQp, qpn, 0, |c| {
        c.set_rre(true).set_rwe(true);
        c.primary_address_path_mut().set_vhca_port_num(1);
    })
}

/// INIT2RTR on a force-loopback path (no GID needed), path MTU `code`.
fn init2rtr_loopback(h: &mut Host, qpn: u32, code: u8) -> Result<Vec<u8>, CmdFail> {
    modify(h, Opcode::Init2rtrQp, qpn, 0, |c| {
        c.set_mtu(code)
            .set_log_msg_max(20)
            .set_remote_qpn(qpn)
            .set_min_rnr_nak(12)
            .set_next_rcv_psn(0x123)
            .set_log_rra_max(2);
        c.primary_address_path_mut()
            .set_vhca_port_num(1)
            .set_fl(true);
    })
}

fn rtr2rts(h: &mut Host, qpn: u32) -> Result<Vec<u8>, CmdFail> {
    modify(h, Opcode::Rtr2rtsQp, qpn, 0, |c| {
        c.set_next_send_psn(0x456)
            .set_retry_count(7)
            .set_rnr_retry(7)
            .set_log_sra_max(2);
        c.primary_address_path_mut()
            .set_vhca_port_num(1)
            .set_ack_timeout(14);
    })
}

fn to_rts(h: &mut Host, qpn: u32) {
    rst2init(h, qpn).expect("RST2INIT");
    init2rtr_loopback(h, qpn, mtu::MTU_1024).expect("INIT2RTR");
    rtr2rts(h, qpn).expect("RTR2RTS");
}

#[test]
fn rc_qp_walks_to_rts_and_query_reports_every_attribute() {
    let mut h = host(false);
    let cq = h.create_cq(6);
    let qpn = try_create_qp(&mut h, &spec(&cq)).expect("CREATE_QP");
    assert_eq!(h.dev.qp_count(), 1);
    assert_eq!(qp_state(&mut h, qpn), state::RST);
    rst2init(&mut h, qpn).expect("RST2INIT");
    assert_eq!(qp_state(&mut h, qpn), state::INIT);
    init2rtr_loopback(&mut h, qpn, mtu::MTU_1024).expect("INIT2RTR");
    assert_eq!(qp_state(&mut h, qpn), state::RTR);
    rtr2rts(&mut h, qpn).expect("RTR2RTS");
    let out = query(&mut h, qpn);
    let ctx = Qpc::new(&out[QPC_BYTE..]).expect("layout");
    assert_eq!(ctx.state(), state::RTS);
    assert_eq!(ctx.st(), service_type::RC);
    assert_eq!(ctx.pd(), h.pd);
    assert_eq!((ctx.cqn_snd(), ctx.cqn_rcv()), (cq.cqn, cq.cqn));
    assert_eq!(ctx.mtu(), mtu::MTU_1024);
    assert_eq!(ctx.remote_qpn(), qpn);
    assert_eq!((ctx.next_rcv_psn(), ctx.next_send_psn()), (0x123, 0x456));
    assert_eq!((ctx.retry_count(), ctx.rnr_retry()), (7, 7));
    assert_eq!((ctx.log_sra_max(), ctx.log_rra_max()), (2, 2));
    assert_eq!(ctx.min_rnr_nak(), 12);
    assert!(ctx.rre() && ctx.rwe() && !ctx.rae());
    assert_eq!((ctx.log_rq_size(), ctx.log_sq_size()), (4, 4));
    // An older header's query_qp_out (0x110 bytes, ending at the page list) carries the same
    // context.
    let mut short = Host::input(Opcode::QueryQp, 0, 0x10);
    cxdirect_hw::qp::QueryQpIn::new(&mut short[..])
        .expect("layout")
        .set_qpn(qpn);
    let old = h.exec(&short, 0x110).expect("QUERY_QP, 0x110-byte output");
    assert_eq!(old[QPC_BYTE..0x100], out[QPC_BYTE..0x100]);
    let path = ctx.primary_address_path();
    assert!(path.fl());
    assert_eq!(path.ack_timeout(), 14);
    assert_eq!(path.vhca_port_num(), 1);
    // RTS2RTS with an allowed optional attribute changes just that one.
    modify(&mut h, Opcode::Rts2rtsQp, qpn, optpar::RAE, |c| {
        c.set_rae(true).set_rre(false);
    })
    .expect("RTS2RTS");
    let out = query(&mut h, qpn);
    let ctx = Qpc::new(&out[QPC_BYTE..]).expect("layout");
    assert!(ctx.rae() && ctx.rre(), "only the masked attribute changed");
    // 2ERR then 2RST from there; back to RST the QP walks up again.
    simple_qp_cmd(&mut h, Opcode::Qp2errQp, qpn).expect("2ERR");
    assert_eq!(qp_state(&mut h, qpn), state::ERR);
    simple_qp_cmd(&mut h, Opcode::Qp2rstQp, qpn).expect("2RST");
    assert_eq!(qp_state(&mut h, qpn), state::RST);
    to_rts(&mut h, qpn);
    // The QP's protection domain stays while the QP lives.
    let mut dealloc_pd = Host::input(Opcode::DeallocPd, 0, 0x10);
    dealloc_pd[0x09..0x0c].copy_from_slice(&h.pd.to_be_bytes()[1..]);
    refused(
        h.exec(&dealloc_pd, 16),
        CmdStatus::BadResourceState,
        Syndrome::ObjectInUse,
    );
    simple_qp_cmd(&mut h, Opcode::DestroyQp, qpn).expect("DESTROY_QP");
    assert_eq!(h.dev.qp_count(), 0);
}

#[test]
fn every_transition_from_a_wrong_state_is_refused_and_changes_nothing() {
    let mut h = host(false);
    let cq = h.create_cq(6);
    let qpn = try_create_qp(&mut h, &spec(&cq)).expect("CREATE_QP");
    let steps = [
        (Opcode::Rst2initQp, state::RST),
        (Opcode::Init2rtrQp, state::INIT),
        (Opcode::Rtr2rtsQp, state::RTR),
        (Opcode::Rts2rtsQp, state::RTS),
        (Opcode::Sqerr2rtsQp, state::SQER),
    ];
    let mut checked = 0;
    // Walk RST → INIT → RTR → RTS, then ERR; in each state try every transition that does
    // not start there.
    for current in [state::RST, state::INIT, state::RTR, state::RTS, state::ERR] {
        match current {
            state::INIT => {
                rst2init(&mut h, qpn).expect("RST2INIT");
            }
            state::RTR => {
                init2rtr_loopback(&mut h, qpn, mtu::MTU_1024).expect("INIT2RTR");
            }
            state::RTS => {
                rtr2rts(&mut h, qpn).expect("RTR2RTS");
            }
            state::ERR => {
                simple_qp_cmd(&mut h, Opcode::Qp2errQp, qpn).expect("2ERR");
            }
            _ => {}
        }
        assert_eq!(qp_state(&mut h, qpn), current);
        let before = query(&mut h, qpn);
        for &(opcode, from) in &steps {
            if from == current {
                continue;
            }
            let result = modify(&mut h, opcode, qpn, 0, |c| {
                c.set_mtu(mtu::MTU_1024).set_remote_qpn(qpn);
                c.primary_address_path_mut()
                    .set_vhca_port_num(1)
                    .set_fl(true);
            });
            refused(result, CmdStatus::BadQpState, Syndrome::BadQpTransition);
            assert_eq!(
                query(&mut h, qpn),
                before,
                "{opcode:?} from {current} changed the QP"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 4 + 4 + 4 + 4 + 5);
}

#[test]
fn missing_mandatory_attributes_and_foreign_optional_bits_are_refused() {
    let mut h = host(false);
    let cq = h.create_cq(6);
    let qpn = try_create_qp(&mut h, &spec(&cq)).expect("CREATE_QP");
    // RST2INIT without the port.
    let result = modify(&mut h, Opcode::Rst2initQp, qpn, 0, |c| {
        c.set_rre(true);
    });
    refused(
        result,
        CmdStatus::BadParameter,
        Syndrome::MissingQpAttribute,
    );
    assert_eq!(qp_state(&mut h, qpn), state::RST);
    // RST2INIT takes no optional attribute.
    let result = modify(&mut h, Opcode::Rst2initQp, qpn, optpar::Q_KEY, |c| {
        c.primary_address_path_mut().set_vhca_port_num(1);
    });
    refused(result, CmdStatus::BadParameter, Syndrome::BadQpOptParam);
    rst2init(&mut h, qpn).expect("RST2INIT");
    let before = query(&mut h, qpn);
    // INIT2RTR without a path MTU, without a destination QP, without any path.
    for (what, fill) in [
        (
            "MTU",
            Box::new(|c: &mut Qpc<&mut [u8]>| {
                c.set_remote_qpn(5);
                c.primary_address_path_mut().set_fl(true);
            }) as Box<dyn FnOnce(&mut Qpc<&mut [u8]>)>,
        ),
        (
            "remote QPN",
            Box::new(|c: &mut Qpc<&mut [u8]>| {
                c.set_mtu(mtu::MTU_1024);
                c.primary_address_path_mut().set_fl(true);
            }),
        ),
        (
            "path",
            Box::new(|c: &mut Qpc<&mut [u8]>| {
                c.set_mtu(mtu::MTU_1024).set_remote_qpn(5);
            }),
        ),
    ] {
        let result = modify(&mut h, Opcode::Init2rtrQp, qpn, 0, fill);
        let got = status(result.expect_err(what));
        assert_eq!(
            got,
            (
                CmdStatus::BadParameter as u8,
                Syndrome::MissingQpAttribute as u32
            ),
            "{what}"
        );
    }
    // An optional bit INIT2RTR does not take for RC.
    let result = modify(&mut h, Opcode::Init2rtrQp, qpn, optpar::RETRY_COUNT, |c| {
        c.set_mtu(mtu::MTU_1024).set_remote_qpn(5);
        c.primary_address_path_mut().set_fl(true);
    });
    refused(result, CmdStatus::BadParameter, Syndrome::BadQpOptParam);
    assert_eq!(
        query(&mut h, qpn),
        before,
        "refused transitions changed the QP"
    );
}

#[test]
fn path_mtu_above_the_port_and_unknown_codes_are_refused() {
    let mut h = host(false);
    h.set_port_mtu(1500);
    let cq = h.create_cq(6);
    let qpn = try_create_qp(&mut h, &spec(&cq)).expect("CREATE_QP");
    rst2init(&mut h, qpn).expect("RST2INIT");
    for code in [mtu::MTU_2048, mtu::MTU_4096, 6, 7] {
        refused(
            init2rtr_loopback(&mut h, qpn, code),
            CmdStatus::BadParameter,
            Syndrome::BadPathMtu,
        );
        assert_eq!(qp_state(&mut h, qpn), state::INIT);
    }
    init2rtr_loopback(&mut h, qpn, mtu::MTU_1024).expect("1024 fits a 1500-byte port");
}

#[test]
fn unknown_qpn_is_refused_by_every_qp_command() {
    let mut h = host(false);
    let missing = 0x4fff;
    for opcode in [
        Opcode::Rst2initQp,
        Opcode::Init2rtrQp,
        Opcode::Rtr2rtsQp,
        Opcode::Rts2rtsQp,
        Opcode::Sqerr2rtsQp,
    ] {
        refused(
            modify(&mut h, opcode, missing, 0, |_| {}),
            CmdStatus::BadResource,
            Syndrome::NoSuchObject,
        );
    }
    for opcode in [
        Opcode::Qp2errQp,
        Opcode::Qp2rstQp,
        Opcode::QueryQp,
        Opcode::DestroyQp,
    ] {
        refused(
            simple_qp_cmd(&mut h, opcode, missing),
            CmdStatus::BadResource,
            Syndrome::NoSuchObject,
        );
    }
}

#[test]
fn create_qp_refusals_create_and_leak_nothing() {
    let mut h = host(false);
    let cq = h.create_cq(6);
    let counts = h.dev.object_counts();
    let pages = h.dev.firmware_pages_held();
    let cases = [
        (
            QpSpec {
                st: service_type::RAW_ETHERTYPE,
                ..spec(&cq)
            },
            CmdStatus::BadParameter,
            Syndrome::UnsupportedServiceType,
        ),
        (
            QpSpec {
                cqn: 0x7777,
                ..spec(&cq)
            },
            CmdStatus::BadResource,
            Syndrome::NoSuchObject,
        ),
        (
            QpSpec {
                rq: rq_type::SRQ,
                rmpn: 0x1fff,
                ..spec(&cq)
            },
            CmdStatus::BadResource,
            Syndrome::NoSuchObject,
        ),
        (
            QpSpec {
                rq: rq_type::CRQ,
                ..spec(&cq)
            },
            CmdStatus::BadParameter,
            Syndrome::BadQpParams,
        ),
    ];
    for (s, want, syndrome) in cases {
        let got = status(try_create_qp(&mut h, &s).expect_err("refused"));
        assert_eq!(got, (want as u8, syndrome as u32));
    }
    assert_eq!(h.dev.qp_count(), 0);
    assert_eq!(h.dev.object_counts(), counts);
    assert_eq!(h.dev.firmware_pages_held(), pages);
}

#[test]
fn qp_on_an_rmp_and_a_zero_length_qp_hold_their_queues_until_destroyed() {
    let mut h = host(false);
    let cq = h.create_cq(6);
    let (rmpn, _) = h.create_rmp(4, 0);
    let on_rmp = try_create_qp(
        &mut h,
        &QpSpec {
            rq: rq_type::SRQ,
            rmpn,
            ..spec(&cq)
        },
    )
    .expect("QP on an RMP");
    let zero = try_create_qp(
        &mut h,
        &QpSpec {
            rq: rq_type::ZERO_LEN,
            ..spec(&cq)
        },
    )
    .expect("zero-length RQ");
    let out = query(&mut h, on_rmp);
    let ctx = Qpc::new(&out[QPC_BYTE..]).expect("layout");
    assert_eq!((ctx.rq_type(), ctx.srqn_rmpn_xrqn()), (rq_type::SRQ, rmpn));
    let out = query(&mut h, zero);
    assert_eq!(
        Qpc::new(&out[QPC_BYTE..]).expect("layout").rq_type(),
        rq_type::ZERO_LEN
    );
    // The CQ and the RMP are in use while the QPs live.
    let mut destroy_cq = Host::input(Opcode::DestroyCq, 0, 0x10);
    destroy_cq[0x09..0x0c].copy_from_slice(&cq.cqn.to_be_bytes()[1..]);
    refused(
        h.exec(&destroy_cq, 16),
        CmdStatus::BadResourceState,
        Syndrome::ObjectInUse,
    );
    let mut destroy_rmp = Host::input(Opcode::DestroyRmp, 0, 0x10);
    destroy_rmp[0x09..0x0c].copy_from_slice(&rmpn.to_be_bytes()[1..]);
    assert!(h.exec(&destroy_rmp, 16).is_err(), "RMP in use by a QP");
    simple_qp_cmd(&mut h, Opcode::DestroyQp, on_rmp).expect("DESTROY_QP");
    simple_qp_cmd(&mut h, Opcode::DestroyQp, zero).expect("DESTROY_QP");
    h.exec(&destroy_rmp, 16).expect("DESTROY_RMP");
    h.exec(&destroy_cq, 16).expect("DESTROY_CQ");
    assert_eq!(h.dev.qp_count(), 0);
    h.teardown();
}

fn set_gid(h: &mut Host, index: u16, gid: [u8; 16], l3: u8) -> Result<Vec<u8>, CmdFail> {
    let mut input = Host::input(Opcode::SetRoceAddress, 0, 0x30);
    let mut cmd = SetRoceAddressIn::new(&mut input[..]).expect("layout");
    cmd.set_roce_address_index(index).set_vhca_port_num(1);
    cmd.roce_address_mut()
        .set_gid(gid)
        .set_source_mac([0x02, 0xcd, 0, 0, 0, 1])
        .set_roce_l3_type(l3)
        .set_roce_version(roce_version::V2);
    h.exec(&input, 16)
}

fn query_gid(h: &mut Host, index: u16) -> Result<Vec<u8>, CmdFail> {
    let mut input = Host::input(Opcode::QueryRoceAddress, 0, 0x10);
    input[0x08..0x0a].copy_from_slice(&index.to_be_bytes());
    input[0x0b] = 1;
    h.exec(&input, 0x30)
}

fn enable_roce(h: &mut Host) {
    let mut input = Host::input(Opcode::ModifyNicVportContext, 0, 0x200);
    let mut cmd = ModifyNicVportContextIn::new(&mut input[..]).expect("layout");
    cmd.field_select_mut().set_roce_en(true);
    cmd.nic_vport_context_mut().set_roce_en(true);
    h.exec(&input, 16)
        .expect("MODIFY_NIC_VPORT_CONTEXT roce_en");
}

fn init2rtr_roce(h: &mut Host, qpn: u32, gid_index: u8) -> Result<Vec<u8>, CmdFail> {
    modify(h, Opcode::Init2rtrQp, qpn, 0, |c| {
        c.set_mtu(mtu::MTU_1024).set_remote_qpn(0x4001);
        c.primary_address_path_mut()
            .set_vhca_port_num(1)
            .set_src_addr_index(gid_index)
            .set_rgid(PEER_GID)
            .set_rmac([0x02, 0xcd, 0, 0, 0, 2])
            .set_udp_sport(0xdcba)
            .set_hop_limit(64);
    })
}

#[test]
fn roce_address_table_holds_ipv4_mapped_and_ipv6_gids_and_refuses_past_its_end() {
    let mut h = host(true);
    let ipv6 = [
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0xcd, 0, 0xff, 0xfe, 0, 0, 1,
    ];
    set_gid(&mut h, 0, OWN_GID, l3_type::IPV4).expect("IPv4-mapped GID");
    set_gid(&mut h, 1, ipv6, l3_type::IPV6).expect("IPv6 GID");
    for (index, gid, l3) in [(0, OWN_GID, l3_type::IPV4), (1, ipv6, l3_type::IPV6)] {
        let out = query_gid(&mut h, index).expect("QUERY_ROCE_ADDRESS");
        let out = QueryRoceAddressOut::new(&out[..]).expect("layout");
        let entry = out.roce_address();
        assert_eq!(entry.gid(), gid);
        assert_eq!(entry.roce_l3_type(), l3);
        assert_eq!(entry.roce_version(), roce_version::V2);
        assert_eq!(entry.source_mac(), [0x02, 0xcd, 0, 0, 0, 1]);
    }
    // A RoCE v1 entry: the caps list version 2 only, so mlx5_ib (mlx5_get_roce_gid_type_mask)
    // never writes one.
    let mut input = Host::input(Opcode::SetRoceAddress, 0, 0x30);
    let mut cmd = SetRoceAddressIn::new(&mut input[..]).expect("layout");
    cmd.set_roce_address_index(2);
    cmd.roce_address_mut()
        .set_gid(ipv6)
        .set_source_mac([0x02, 0xcd, 0, 0, 0, 1])
        .set_roce_l3_type(l3_type::IPV6)
        .set_roce_version(roce_version::V1);
    refused(
        h.exec(&input, 16),
        CmdStatus::BadParameter,
        Syndrome::BadQpParams,
    );
    // An L3 type that contradicts the address.
    refused(
        set_gid(&mut h, 2, ipv6, l3_type::IPV4),
        CmdStatus::BadParameter,
        Syndrome::BadQpParams,
    );
    // The table's size comes from the RoCE caps.
    let caps = h
        .exec(
            &Host::input(
                Opcode::QueryHcaCap,
                query_cap_op_mod(cap_type::ROCE, true),
                16,
            ),
            0x1010,
        )
        .expect("QUERY_HCA_CAP RoCE");
    let size = RoceCap::new(&caps[0x10..0x110])
        .expect("layout")
        .roce_address_table_size();
    assert!(size > 2);
    refused(
        set_gid(&mut h, size, OWN_GID, l3_type::IPV4),
        CmdStatus::BadParameter,
        Syndrome::BadGidIndex,
    );
    refused(
        query_gid(&mut h, size),
        CmdStatus::BadParameter,
        Syndrome::BadGidIndex,
    );
    // Deleting is writing zeros.
    set_gid(&mut h, 1, [0; 16], l3_type::IPV6).expect("delete");
    let out = query_gid(&mut h, 1).expect("QUERY_ROCE_ADDRESS");
    assert_eq!(
        QueryRoceAddressOut::new(&out[..])
            .expect("layout")
            .roce_address()
            .gid(),
        [0; 16]
    );
}

#[test]
fn a_roce_path_needs_roce_enabled_and_a_gid_in_the_table() {
    let mut h = host(true);
    let cq = h.create_cq(6);
    let qpn = try_create_qp(&mut h, &spec(&cq)).expect("CREATE_QP");
    rst2init(&mut h, qpn).expect("RST2INIT");
    set_gid(&mut h, 3, OWN_GID, l3_type::IPV4).expect("GID");
    refused(
        init2rtr_roce(&mut h, qpn, 3),
        CmdStatus::BadParameter,
        Syndrome::RoceDisabled,
    );
    enable_roce(&mut h);
    // An unset index, and one past the table.
    for index in [4, 200] {
        refused(
            init2rtr_roce(&mut h, qpn, index),
            CmdStatus::BadParameter,
            Syndrome::BadGidIndex,
        );
        assert_eq!(qp_state(&mut h, qpn), state::INIT);
    }
    init2rtr_roce(&mut h, qpn, 3).expect("INIT2RTR over RoCE v2");
    let out = query(&mut h, qpn);
    let path = Qpc::new(&out[QPC_BYTE..]).expect("layout");
    let path = path.primary_address_path();
    assert_eq!(path.src_addr_index(), 3);
    assert_eq!(path.rgid(), PEER_GID);
    assert_eq!(path.rmac(), [0x02, 0xcd, 0, 0, 0, 2]);
    assert_eq!((path.udp_sport(), path.hop_limit()), (0xdcba, 64));
}

#[test]
fn roce_caps_follow_the_switch_and_the_source_port_choice_is_settable() {
    let mut off = host(false);
    let general = off
        .exec(&Host::input(Opcode::QueryHcaCap, 1, 16), 0x1010)
        .expect("QUERY_HCA_CAP");
    let g = CmdHcaCap::new(&general[0x10..0x110]).expect("layout");
    assert!(!g.roce(), "RoCE is reported only when it is switched on");
    assert!(g.log_max_qp() > 0 && g.log_max_msg() > 0 && g.log_max_ra_req_qp() > 0);
    refused(
        off.exec(
            &Host::input(
                Opcode::QueryHcaCap,
                query_cap_op_mod(cap_type::ROCE, false),
                16,
            ),
            0x1010,
        ),
        CmdStatus::BadParameter,
        Syndrome::BadOpMod,
    );
    refused(
        set_gid(&mut off, 0, OWN_GID, l3_type::IPV4),
        CmdStatus::BadParameter,
        Syndrome::RoceDisabled,
    );

    // SET_HCA_CAP comes before INIT_HCA: bring the function up that far by hand.
    let cfg = EmuConfig {
        roce: true,
        ..EmuConfig::default()
    };
    let mut on = Host::new(Device::loopback(cfg), MEM);
    on.start_cmdif();
    on.simple(Opcode::EnableHca, 0).expect("ENABLE_HCA");
    let mut set_issi = Host::input(Opcode::SetIssi, 0, 16);
    set_issi[0x0a..0x0c].copy_from_slice(&1u16.to_be_bytes());
    on.exec(&set_issi, 16).expect("SET_ISSI");
    let boot = on.query_pages(cxdirect_hw::hca::query_pages_op_mod::BOOT);
    on.give_pages(boot as usize).expect("boot pages");
    let general = on
        .exec(&Host::input(Opcode::QueryHcaCap, 1, 16), 0x1010)
        .expect("QUERY_HCA_CAP");
    assert!(CmdHcaCap::new(&general[0x10..0x110])
        .expect("layout")
        .roce());
    let query_roce = |h: &mut Host, current: bool| {
        let out = h
            .exec(
                &Host::input(
                    Opcode::QueryHcaCap,
                    query_cap_op_mod(cap_type::ROCE, current),
                    16,
                ),
                0x1010,
            )
            .expect("QUERY_HCA_CAP RoCE");
        QueryHcaCapOut::new(&out[..]).expect("layout").as_bytes()[0x10..0x110].to_vec()
    };
    let max = query_roce(&mut on, false);
    let cur = query_roce(&mut on, true);
    let (max_cap, cur_cap) = (
        RoceCap::new(&max[..]).unwrap(),
        RoceCap::new(&cur[..]).unwrap(),
    );
    assert!(max_cap.sw_r_roce_src_udp_port() && !cur_cap.sw_r_roce_src_udp_port());
    assert_eq!(max_cap.r_roce_dest_udp_port(), 4791);
    let mut set = Host::input(Opcode::SetHcaCap, set_cap_op_mod(cap_type::ROCE), 0x1010);
    set[0x10..0x110].copy_from_slice(&cur);
    RoceCap::new(&mut set[0x10..0x110])
        .unwrap()
        .set_sw_r_roce_src_udp_port(true);
    on.exec(&set, 16).expect("SET_HCA_CAP RoCE");
    assert!(RoceCap::new(&query_roce(&mut on, true)[..])
        .unwrap()
        .sw_r_roce_src_udp_port());
    // Any other RoCE field is read-only.
    RoceCap::new(&mut set[0x10..0x110])
        .unwrap()
        .set_roce_address_table_size(4);
    refused(
        on.exec(&set, 16),
        CmdStatus::BadParameter,
        Syndrome::CapReadOnly,
    );
}

#[test]
fn remote_access_checks_key_pd_rights_and_range() {
    let mut h = host(false);
    let create = |h: &mut Host, rr: bool, rw: bool, atomic: bool| {
        let mut input = Host::input(Opcode::CreateMkey, 0, 0x110);
        let mut cmd = CreateMkeyIn::new(&mut input[..]).expect("layout");
        cmd.memory_key_mkey_entry_mut()
            .set_access_mode(MKC_ACCESS_MODE_PA)
            .set_lr(true)
            .set_lw(true)
            .set_rr(rr)
            .set_rw(rw)
            .set_a(atomic)
            .set_pd(h.pd)
            .set_qpn(0xff_ffff)
            .set_mkey_7_0(0x17)
            .set_start_addr(0x10_0000)
            .set_len(0x1000);
        let out = h.exec(&input, 16).expect("CREATE_MKEY");
        mkey_from_index(
            CreateMkeyOut::new(&out[..]).expect("layout").mkey_index(),
            0x17,
        )
    };
    let read_only = create(&mut h, true, false, false);
    let all = create(&mut h, true, true, true);
    let pd = h.pd;
    let check = |key, pd, addr, len, access| h.dev.check_remote_access(key, pd, addr, len, access);
    assert_eq!(
        check(read_only, pd, 0x10_0000, 64, RemoteAccess::Read),
        Ok(())
    );
    let denied = Err(CqeSyndrome::RemoteAccess);
    assert_eq!(
        check(read_only, pd, 0x10_0000, 64, RemoteAccess::Write),
        denied
    );
    assert_eq!(
        check(read_only, pd, 0x10_0000, 8, RemoteAccess::Atomic),
        denied
    );
    assert_eq!(check(all, pd, 0x10_0ff8, 8, RemoteAccess::Atomic), Ok(()));
    assert_eq!(
        check(all, pd, 0x10_0ff4, 8, RemoteAccess::Atomic),
        denied,
        "unaligned"
    );
    assert_eq!(
        check(all, pd, 0x10_0fc0, 0x80, RemoteAccess::Write),
        denied,
        "past the end"
    );
    assert_eq!(
        check(all, pd, 0xf_ffff, 1, RemoteAccess::Read),
        denied,
        "before the start"
    );
    assert_eq!(
        check(all, pd + 1, 0x10_0000, 8, RemoteAccess::Read),
        denied,
        "other PD"
    );
    assert_eq!(
        check(all ^ 1, pd, 0x10_0000, 8, RemoteAccess::Read),
        denied,
        "wrong variant"
    );
}
