//! DEVX on the model, driven by hand-built commands the way Linux 6.12's mlx5_ib and rdma-core's
//! DEVX tests send them: the capabilities that make mlx5_ib offer DEVX, user contexts
//! (CREATE_UCTX / DESTROY_UCTX, `mlx5_ib_devx_create` / `mlx5_ib_devx_destroy`), umems
//! (CREATE_UMEM / DESTROY_UMEM, `devx_umem_reg_cmd_alloc`), the ownership every command's uid
//! is held to, and an RC QP and CQ on umems carrying SEND_WITH_IMM traffic written as raw WQEs
//! (`test_devx_rc_qp_send_imm_traffic` in `tests/test_mlx5_devx.py`).

use cxdirect_emu::testkit::devx::DevxRcQp;
use cxdirect_emu::testkit::rc::{
    lone_host, take_frames, RemoteRights, GID_A, GID_B, MAC_A, MAC_B, UDP_SPORT,
};
use cxdirect_emu::testkit::ud::{ud_wqe, UdAv, UD_QKEY};
use cxdirect_emu::testkit::{refused, udp_frame, CmdFail, Cq, Host, Sq};
use cxdirect_emu::{Device, EmuConfig, Syndrome};
use cxdirect_hw::caps::CmdHcaCap;
use cxdirect_hw::cmd::{CmdStatus, Opcode};
use cxdirect_hw::cq::{CreateCqIn, DestroyCqIn};
use cxdirect_hw::devx::{UCTX_CAP_INTERNAL_DEV_RES, UCTX_CAP_RAW_TX};
use cxdirect_hw::hca::cap_type;
use cxdirect_hw::mkey::{mkey_from_index, CreateMkeyIn, CreateMkeyOut, MKC_ACCESS_MODE_MTT};
use cxdirect_hw::qp::{mtu, service_type, DestroyQpIn, QueryQpIn};
use cxdirect_hw::wq::{CreateSqIn, CreateSqOut, ModifySqIn};
use cxdirect_hw::wqe::{opcode, CtrlSeg, DataSeg};

const MEM: usize = 8 << 20;
const MSG: u32 = 1024;
/// The rdma-core test's immediate base (`Mlx5DevxRcResources.imm`).
const IMM: u32 = 0x0302_0100;

fn host() -> Host {
    Host::roce_loopback(MEM)
}

fn destroy_cq(h: &mut Host, uid: u16, cqn: u32) -> Result<Vec<u8>, CmdFail> {
    let mut input = Host::input(Opcode::DestroyCq, 0, 0x10);
    DestroyCqIn::new(&mut input[..])
        .expect("layout")
        .set_uid(uid)
        .set_cqn(cqn);
    h.exec(&input, 16)
}

fn destroy_qp(h: &mut Host, uid: u16, qpn: u32) -> Result<Vec<u8>, CmdFail> {
    let mut input = Host::input(Opcode::DestroyQp, 0, 0x10);
    DestroyQpIn::new(&mut input[..])
        .expect("layout")
        .set_qpn(qpn);
    h.exec_as(uid, &input, 16)
}

fn alloc_pd_as(h: &mut Host, uid: u16) -> Result<u32, CmdFail> {
    let out = h.exec_as(uid, &Host::input(Opcode::AllocPd, 0, 0x10), 16)?;
    Ok(u32::from_be_bytes(out[8..12].try_into().expect("4 bytes")) & 0xff_ffff)
}

fn dealloc_pd_as(h: &mut Host, uid: u16, pd: u32) -> Result<Vec<u8>, CmdFail> {
    let mut input = Host::input(Opcode::DeallocPd, 0, 0x10);
    input[8..12].copy_from_slice(&pd.to_be_bytes());
    h.exec_as(uid, &input, 16)
}

/// `mlx5_ib_devx_create` opens a context only when `log_max_uctx` is non-zero, and asks for
/// RAW_TX / INTERNAL_DEV_RES only where `uctx_cap` offers them.
#[test]
fn general_caps_offer_user_contexts_as_mlx5_ib_devx_create_reads_them() {
    let mut h = host();
    let page = h.query_cap(cap_type::GENERAL_DEVICE, true);
    let caps = CmdHcaCap::new(&page[0x10..]).expect("layout");
    assert!(
        caps.log_max_uctx() > 0,
        "log_max_uctx 0: mlx5_ib offers no DEVX"
    );
    assert!(caps.log_max_umem() > 0);
    assert_eq!(caps.uctx_cap(), UCTX_CAP_RAW_TX);
    h.teardown();
}

/// `mlx5_ib_devx_init` opens the whitelist context at probe (cap 0); every DEVX user context
/// opens one of its own (RAW_TX for a CAP_NET_RAW caller); `mlx5_ib_devx_destroy` closes each
/// by the uid in DESTROY_UCTX's body.
#[test]
fn create_uctx_hands_out_distinct_nonzero_uids_and_destroy_uctx_closes_them() {
    let mut h = host();
    let whitelist = h.create_uctx(0).expect("CREATE_UCTX at probe");
    let user = h.create_uctx(UCTX_CAP_RAW_TX).expect("CREATE_UCTX RAW_TX");
    assert!(whitelist > 0 && user > 0 && whitelist != user);
    assert_ne!(user, 0xffff, "0xffff is the shared uid");
    refused(
        h.create_uctx(UCTX_CAP_INTERNAL_DEV_RES),
        CmdStatus::BadParameter,
        Syndrome::UctxCapDenied,
    );
    h.destroy_uctx(user).expect("DESTROY_UCTX");
    refused(
        h.destroy_uctx(user),
        CmdStatus::BadParameter,
        Syndrome::UnknownUid,
    );
    // A closed context's uid no longer acts: its commands are refused.
    refused(
        alloc_pd_as(&mut h, user),
        CmdStatus::BadParameter,
        Syndrome::UnknownUid,
    );
    h.destroy_uctx(whitelist).expect("DESTROY_UCTX whitelist");
    h.teardown();
}

/// mlx5_core writes the shared uid 0xffff (`MLX5_SHARED_RESOURCE_UID`) on its completion EQs
/// (`create_map_eq`) and mlx5_ib on its counter sets once `log_max_uctx` is set: accepted
/// with no user context behind it.
#[test]
fn the_shared_uid_needs_no_user_context() {
    let mut h = host();
    let out = h
        .exec_as(0xffff, &Host::input(Opcode::AllocQCounter, 0, 0x10), 16)
        .expect("ALLOC_Q_COUNTER under the shared uid");
    let set = out[11];
    let mut input = Host::input(Opcode::DeallocQCounter, 0, 0x10);
    input[11] = set;
    h.exec(&input, 16).expect("DEALLOC_Q_COUNTER by the driver");
    h.teardown();
}

/// Objects belong to the uid that created them; mlx5_ib passes the object's own uid on
/// modify, query and destroy (`devx_obj_build_destroy_cmd`, `mlx5_ib_dealloc_pd`), so another
/// context's uid is refused; the driver's uid 0 (`mlx5_core_qp_query` sends none) may touch
/// any.
#[test]
fn a_user_context_may_touch_only_its_own_objects() {
    let mut h = host();
    let a = h.create_uctx(0).expect("uctx a");
    let b = h.create_uctx(0).expect("uctx b");
    let pd = alloc_pd_as(&mut h, a).expect("ALLOC_PD under a");
    refused(
        dealloc_pd_as(&mut h, b, pd),
        CmdStatus::BadParameter,
        Syndrome::UidMismatch,
    );
    dealloc_pd_as(&mut h, a, pd).expect("DEALLOC_PD under its owner");

    let (cq, ring, dbr) = h.create_devx_cq(a, 6).expect("DEVX CQ");
    let qp = h.create_devx_rc_qp(a, &cq, 4, 4).expect("DEVX QP");
    let mut query = Host::input(Opcode::QueryQp, 0, 0x10);
    QueryQpIn::new(&mut query[..])
        .expect("layout")
        .set_qpn(qp.qpn);
    refused(
        h.exec_as(b, &query, 0x1d0),
        CmdStatus::BadParameter,
        Syndrome::UidMismatch,
    );
    h.exec_as(a, &query, 0x1d0).expect("QUERY_QP by its owner");
    h.exec(&query, 0x1d0).expect("QUERY_QP by the driver");
    refused(
        destroy_qp(&mut h, b, qp.qpn),
        CmdStatus::BadParameter,
        Syndrome::UidMismatch,
    );
    destroy_qp(&mut h, a, qp.qpn).expect("DESTROY_QP");
    destroy_cq(&mut h, a, cq.cqn).expect("DESTROY_CQ");
    for u in [qp.ring, qp.dbr, ring, dbr] {
        h.destroy_umem(a, u.id).expect("DESTROY_UMEM");
    }
    h.destroy_uctx(a).expect("DESTROY_UCTX a");
    h.destroy_uctx(b).expect("DESTROY_UCTX b");
    h.teardown();
}

/// The rdma-core test's closing order (`devx_objs`: QP, CQ, UARs, umems, then the context):
/// each step refused while something still rests on what it destroys.
#[test]
fn destroy_order_umems_outlive_their_queues_and_the_context_its_objects() {
    let mut h = host();
    let uid = h.create_uctx(0).expect("uctx");
    let (cq, ring, dbr) = h.create_devx_cq(uid, 6).expect("DEVX CQ");
    let qp = h.create_devx_rc_qp(uid, &cq, 4, 4).expect("DEVX QP");
    refused(
        h.destroy_umem(uid, qp.ring.id),
        CmdStatus::BadResourceState,
        Syndrome::ObjectInUse,
    );
    refused(
        h.destroy_umem(uid, dbr.id),
        CmdStatus::BadResourceState,
        Syndrome::ObjectInUse,
    );
    destroy_qp(&mut h, uid, qp.qpn).expect("DESTROY_QP");
    h.destroy_umem(uid, qp.ring.id).expect("QP ring umem free");
    h.destroy_umem(uid, qp.dbr.id)
        .expect("QP doorbell umem free");
    refused(
        h.destroy_umem(uid, ring.id),
        CmdStatus::BadResourceState,
        Syndrome::ObjectInUse,
    );
    destroy_cq(&mut h, uid, cq.cqn).expect("DESTROY_CQ");
    h.destroy_umem(uid, ring.id).expect("CQ ring umem free");
    h.destroy_umem(uid, dbr.id).expect("CQ doorbell umem free");
    refused(
        h.destroy_umem(uid, dbr.id),
        CmdStatus::BadResource,
        Syndrome::NoSuchObject,
    );
    h.destroy_uctx(uid).expect("DESTROY_UCTX");
    h.teardown();
}

/// CREATE_UMEM as `devx_umem_reg_cmd_alloc` fills it: refused without a user context's uid
/// (the model reports no `umem_uid_0`), with a page offset past the first page or with a
/// page list that is not page-aligned.
#[test]
fn create_umem_checks_what_devx_umem_reg_cmd_alloc_fills() {
    let mut h = host();
    let uid = h.create_uctx(0).expect("uctx");
    let buf = h.alloc(8192, 4096);
    refused(
        h.register_umem(0, buf, 4096, true),
        CmdStatus::BadParameter,
        Syndrome::UnknownUid,
    );
    // An 8-byte doorbell umem 8-byte aligned inside a page (the rdma-core test registers its
    // doorbell records with `alignment=8`): `page_offset` says where.
    let id = h
        .register_umem(uid, buf + 0x128, 8, true)
        .expect("umem inside a page");
    h.destroy_umem(uid, id).expect("DESTROY_UMEM");
    let mut input = Host::input(Opcode::CreateUmem, 0, 0x40);
    let mut cmd = cxdirect_hw::devx::CreateUmemIn::new(&mut input[..]).expect("layout");
    cmd.set_uid(uid).set_page_offset(4096).set_num_of_mtt(1);
    cmd.set_mtt(0, buf | 1).expect("room");
    refused(
        h.exec(&input, 16),
        CmdStatus::BadParameter,
        Syndrome::BadUmem,
    );
    let mut cmd = cxdirect_hw::devx::CreateUmemIn::new(&mut input[..]).expect("layout");
    cmd.set_page_offset(0)
        .set_mtt(0, (buf + 0x200) | 1)
        .expect("room");
    refused(
        h.exec(&input, 16),
        CmdStatus::BadParameter,
        Syndrome::BadAddress,
    );
    cmd = cxdirect_hw::devx::CreateUmemIn::new(&mut input[..]).expect("layout");
    cmd.set_mtt(0, buf | 1).expect("room").set_num_of_mtt(3);
    refused(
        h.exec(&input, 16),
        CmdStatus::BadParameter,
        Syndrome::BadUmem,
    );
    h.destroy_uctx(uid).expect("DESTROY_UCTX");
    h.teardown();
}

/// A queue may rest only on a umem of its own uid, inside it, and (for a CQ, which the device
/// writes) on a writable one.
#[test]
fn umem_backed_cq_checks_owner_bounds_and_writability() {
    let mut h = host();
    let a = h.create_uctx(0).expect("uctx a");
    let b = h.create_uctx(0).expect("uctx b");
    let small = h.create_umem(a, 4096, true).expect("4 KiB umem");
    let dbr = h.create_umem(a, 8, true).expect("dbr umem");
    let read_only = h.create_umem(a, 4096, false).expect("read-only umem");
    let cq_in = |h: &Host, uid: u16, ring: u32, log: u8, offset: u64| {
        let mut input = Host::input(Opcode::CreateCq, 0, 0x110);
        let mut cmd = CreateCqIn::new(&mut input[..]).expect("layout");
        cmd.set_uid(uid)
            .set_cq_umem_valid(true)
            .set_cq_umem_id(ring)
            .set_cq_umem_offset(offset);
        cmd.cq_context_mut()
            .set_log_cq_size(log)
            .set_uar_page(h.uar)
            .set_c_eqn(h.eqn as u8)
            .set_dbr_umem_valid(true)
            .set_dbr_umem_id(dbr.id);
        input
    };
    // 128 CQEs of 64 bytes need 8 KiB: past the 4 KiB umem.
    let input = cq_in(&h, a, small.id, 7, 0);
    refused(
        h.exec(&input, 16),
        CmdStatus::BadParameter,
        Syndrome::BadUmem,
    );
    let input = cq_in(&h, a, small.id, 5, 32);
    refused(
        h.exec(&input, 16),
        CmdStatus::BadParameter,
        Syndrome::BadUmem,
    );
    let input = cq_in(&h, a, read_only.id, 6, 0);
    refused(
        h.exec(&input, 16),
        CmdStatus::BadParameter,
        Syndrome::BadUmem,
    );
    let input = cq_in(&h, b, small.id, 6, 0);
    refused(
        h.exec(&input, 16),
        CmdStatus::BadParameter,
        Syndrome::UidMismatch,
    );
    // Half of the umem, from its middle: fits.
    let input = cq_in(&h, a, small.id, 5, 2048);
    let out = h.exec(&input, 16).expect("CQ in the umem's second half");
    let cqn = u32::from_be_bytes(out[8..12].try_into().expect("4 bytes")) & 0xff_ffff;
    destroy_cq(&mut h, a, cqn).expect("DESTROY_CQ");
    for u in [small, dbr, read_only] {
        h.destroy_umem(a, u.id).expect("DESTROY_UMEM");
    }
    h.destroy_uctx(a).expect("uctx a");
    h.destroy_uctx(b).expect("uctx b");
    h.teardown();
}

/// One side of the traffic test: a host with RoCE at `gid`/`mac`, a user context, a DEVX CQ
/// and RC QP, and a 1 KiB message buffer with its key.
struct Side {
    h: Host,
    uid: u16,
    cq: Cq,
    cq_umems: [u32; 2],
    qp: DevxRcQp,
    buf: u64,
    lkey: u32,
}

fn side(mut h: Host, gid: [u8; 16], mac: [u8; 6]) -> Side {
    h.bring_up();
    h.enable_roce(gid, mac);
    let uid = h.create_uctx(UCTX_CAP_RAW_TX).expect("CREATE_UCTX");
    let (cq, ring, dbr) = h.create_devx_cq(uid, 6).expect("DEVX CQ");
    let qp = h.create_devx_rc_qp(uid, &cq, 6, 6).expect("DEVX QP");
    let buf = h.alloc(u64::from(MSG), 4096);
    let pd = h.pd;
    let rights = RemoteRights {
        read: true,
        write: true,
        atomic: false,
    };
    let lkey = h.create_remote_mkey(pd, buf, u64::from(MSG), rights, 0x11);
    Side {
        h,
        uid,
        cq,
        cq_umems: [ring.id, dbr.id],
        qp,
        buf,
        lkey,
    }
}

/// `to_rts` of the rdma-core test, every transition under the context's uid: RST2INIT with
/// remote read and write and port 1; INIT2RTR with MTU 1024, `log_msg_max` 20, the peer's QP,
/// PSN, GID, MAC, hop limit and UDP source port; RTR2RTS with retries, PSN and ack timeout.
fn to_rts(s: &mut Side, peer_qpn: u32, peer_gid: [u8; 16], peer_mac: [u8; 6]) {
    let (uid, qpn) = (s.uid, s.qp.qpn);
    s.h.modify_qp_as(uid, Opcode::Rst2initQp, qpn, |c| {
        c.set_rre(true).set_rwe(true);
        c.primary_address_path_mut().set_vhca_port_num(1);
    })
    .expect("RST2INIT");
    s.h.modify_qp_as(uid, Opcode::Init2rtrQp, qpn, |c| {
        c.set_mtu(mtu::MTU_1024)
            .set_log_msg_max(20)
            .set_remote_qpn(peer_qpn)
            .set_min_rnr_nak(12)
            .set_next_rcv_psn(0x1234);
        c.primary_address_path_mut()
            .set_vhca_port_num(1)
            .set_rgid(peer_gid)
            .set_rmac(peer_mac)
            .set_src_addr_index(0)
            .set_hop_limit(64)
            .set_udp_sport(UDP_SPORT);
    })
    .expect("INIT2RTR");
    s.h.modify_qp_as(uid, Opcode::Rtr2rtsQp, qpn, |c| {
        c.set_retry_count(5)
            .set_rnr_retry(5)
            .set_next_send_psn(0x1234)
            .set_log_sra_max(0);
        c.primary_address_path_mut()
            .set_vhca_port_num(1)
            .set_ack_timeout(14);
    })
    .expect("RTR2RTS");
}

fn settle(a: &Side, b: &Side) {
    for _ in 0..4 {
        b.h.dev.poll();
        a.h.dev.poll();
    }
}

/// `test_devx_rc_qp_send_imm_traffic`: two DEVX RC QPs on umems, SEND_WITH_IMM written as raw
/// WQEs into the ring umem and rung through the UAR after the doorbell record, receive WQEs
/// of one data segment, completions polled from the CQ umem and the consumer index written to
/// the CQ's doorbell umem, for more messages than either ring holds; then everything closed
/// in the test's order.
#[test]
fn devx_rc_qps_on_umems_carry_send_with_immediate_as_rdma_core_posts_it() {
    let side_cfg = |mac| EmuConfig {
        roce: true,
        mac,
        ..EmuConfig::default()
    };
    let (da, db) = Device::pair(side_cfg(MAC_A), side_cfg(MAC_B));
    let mut client = side(Host::new(da, MEM), GID_A, MAC_A);
    let mut server = side(Host::new(db, MEM), GID_B, MAC_B);
    let (cq_pn, sq_pn) = (client.qp.qpn, server.qp.qpn);
    to_rts(&mut server, cq_pn, GID_A, MAC_A);
    to_rts(&mut client, sq_pn, GID_B, MAC_B);

    for n in 0..150u32 {
        let text = vec![b'a' + (n % 26) as u8; MSG as usize];
        client.h.write(client.buf, &text);
        server.h.write(server.buf, &[0u8; MSG as usize]);
        let (sbuf, slkey) = (server.buf, server.lkey);
        server.h.post_devx_recv(&mut server.qp, sbuf, MSG, slkey);
        let mut w = [0u8; 64];
        DataSeg::new(&mut w[16..32])
            .expect("layout")
            .set_byte_count(MSG)
            .set_lkey(client.lkey)
            .set_addr(client.buf);
        CtrlSeg::new(&mut w[..16])
            .expect("layout")
            .set_opcode(opcode::SEND_IMM)
            .set_wqe_index(client.qp.sq.pi)
            .set_qpn_or_sqn(client.qp.qpn)
            .set_ds(2)
            .set_ce(2)
            .set_imm(IMM + n);
        client.h.post(&mut client.qp.sq, &w, false);
        settle(&client, &server);

        let send = client.h.poll_cq(&mut client.cq).expect("send CQE");
        assert_eq!(send[63] >> 4, 0, "message {n}: REQ CQE");
        let recv = server.h.poll_cq(&mut server.cq).expect("receive CQE");
        assert_eq!(recv[63] >> 4, 3, "message {n}: RESP_SEND_IMM CQE");
        let imm = u32::from_be_bytes(recv[0x24..0x28].try_into().expect("4 bytes"));
        assert_eq!(
            imm,
            IMM + n,
            "message {n}: immediate, in the WQE's byte order"
        );
        let len = u32::from_be_bytes(recv[0x2c..0x30].try_into().expect("4 bytes"));
        assert_eq!(len, MSG);
        assert_eq!(server.h.read(server.buf, MSG as usize), text, "message {n}");
    }

    for s in [&mut client, &mut server] {
        let uid = s.uid;
        destroy_qp(&mut s.h, uid, s.qp.qpn).expect("DESTROY_QP");
        destroy_cq(&mut s.h, uid, s.cq.cqn).expect("DESTROY_CQ");
        for id in [s.qp.ring.id, s.qp.dbr.id, s.cq_umems[0], s.cq_umems[1]] {
            s.h.destroy_umem(uid, id).expect("DESTROY_UMEM");
        }
        s.h.destroy_uctx(uid).expect("DESTROY_UCTX");
    }
    client.h.teardown();
    server.h.teardown();
}

/// A DEVX raw Ethernet SQ (what a RAW_TX context creates through `mlx5dv_devx_obj_create`):
/// CREATE_SQ with `wq_umem_valid` and `dbr_umem_valid` (`devx_set_umem_valid`), its ring and
/// doorbell record in umems of its uid, moved to RDY by MODIFY_SQ under that uid; the frame
/// it sends leaves on the cable, and its umems are held until DESTROY_SQ.
#[test]
fn devx_sq_on_umems_sends_a_frame() {
    let (mut h, wire) = lone_host(EmuConfig::default(), MEM, GID_A, MAC_A);
    let uid = h.create_uctx(UCTX_CAP_RAW_TX).expect("uctx");
    let key = h.create_mkey(true, true);
    let mut cq = h.create_cq(6);
    let tisn = h.create_tis();
    let ring = h.create_umem(uid, 64 << 6, true).expect("ring umem");
    let dbr = h.create_umem(uid, 8, true).expect("doorbell umem");
    let mut input = Host::input(Opcode::CreateSq, 0, 0x110);
    let mut cmd = CreateSqIn::new(&mut input[..]).expect("layout");
    cmd.set_uid(uid);
    {
        let mut ctx = cmd.ctx_mut();
        ctx.set_cqn(cq.cqn).set_tis_num_0(tisn).set_tis_lst_sz(1);
        ctx.wq_mut()
            .set_wq_type(1)
            .set_pd(h.pd)
            .set_uar_page(h.uar)
            .set_log_wq_stride(6)
            .set_log_wq_sz(6)
            .set_wq_umem_valid(true)
            .set_wq_umem_id(ring.id)
            .set_dbr_umem_valid(true)
            .set_dbr_umem_id(dbr.id);
    }
    let out = h.exec(&input, 16).expect("CREATE_SQ on umems");
    let sqn = CreateSqOut::new(&out[..]).expect("layout").sqn();
    let mut modify = Host::input(Opcode::ModifySq, 0, 0x110);
    let mut m = ModifySqIn::new(&mut modify[..]).expect("layout");
    m.set_sq_state(0).set_sqn(sqn);
    m.ctx_mut().set_state(1);
    refused(
        h.exec_as(0x7, &modify, 16),
        CmdStatus::BadParameter,
        Syndrome::UnknownUid,
    );
    h.exec_as(uid, &modify, 16).expect("MODIFY_SQ RST->RDY");
    let mut sq = Sq {
        sqn,
        buf: ring.iova,
        dbr: dbr.iova,
        log: 6,
        pi: 0,
        bf_toggle: false,
    };
    let frame = udp_frame(100, 9);
    let payload = h.alloc(frame.len() as u64, 64);
    let wqe = h.build_send(&sq, &frame, payload, key, true);
    h.post(&mut sq, &wqe, false);
    let cqe = h.poll_cq(&mut cq).expect("send completion");
    assert_eq!(cqe[63] >> 4, 0, "REQ CQE");
    assert_eq!(take_frames(&wire), vec![frame]);
    refused(
        h.destroy_umem(uid, ring.id),
        CmdStatus::BadResourceState,
        Syndrome::ObjectInUse,
    );
    let mut destroy = Host::input(Opcode::DestroySq, 0, 0x10);
    destroy[8..12].copy_from_slice(&sqn.to_be_bytes());
    h.exec_as(uid, &destroy, 16).expect("DESTROY_SQ");
    h.destroy_umem(uid, ring.id).expect("ring umem free");
    h.destroy_umem(uid, dbr.id).expect("doorbell umem free");
    h.destroy_uctx(uid).expect("DESTROY_UCTX");
}

/// A DEVX MTT memory key on a umem, as rdma-core's `test_mlx5_cuda_umem.py` creates it
/// (`mkey_umem_valid`, `mkey_umem_id`, no page list and no page size: mlx5_ib's
/// `devx_handle_mkey_create` sets the valid bit on every DEVX MTT key): a UD SEND gathers
/// through the key from the umem's pages, and the key holds the umem until DESTROY_MKEY.
#[test]
fn devx_mtt_key_on_a_umem_translates_through_it() {
    let (mut h, _wire) = lone_host(EmuConfig::default(), MEM, GID_A, MAC_A);
    let uid = h.create_uctx(0).expect("uctx");
    let mut cq = h.create_cq(6);
    let mut a = h.create_ud_qp(&cq, service_type::UD, 4, 4);
    let mut b = h.create_ud_qp(&cq, service_type::UD, 4, 4);
    h.activate_ud(a.qpn, service_type::UD, UD_QKEY);
    h.activate_ud(b.qpn, service_type::UD, UD_QKEY);
    let pd = h.pd;
    let umem = h.create_umem(uid, 3 * 4096, true).expect("umem");
    let text: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
    // 300 bytes straddling the umem's second and third pages.
    h.write(umem.iova + 2 * 4096 - 100, &text);
    let start = 0x7000_0080u64;
    let mut input = Host::input(Opcode::CreateMkey, 0, 0x110);
    let mut cmd = CreateMkeyIn::new(&mut input[..]).expect("layout");
    cmd.set_mkey_umem_valid(true)
        .set_mkey_umem_id(umem.id)
        .set_mkey_umem_offset(4096 + 0x80);
    cmd.memory_key_mkey_entry_mut()
        .set_access_mode(MKC_ACCESS_MODE_MTT)
        .set_lr(true)
        .set_lw(true)
        .set_pd(pd)
        .set_qpn(0xff_ffff)
        .set_mkey_7_0(0x42)
        .set_start_addr(start)
        .set_len(2 * 4096 - 0x80);
    let out = h.exec_as(uid, &input, 16).expect("CREATE_MKEY on a umem");
    let index = CreateMkeyOut::new(&out[..]).expect("layout").mkey_index();
    refused(
        h.destroy_umem(uid, umem.id),
        CmdStatus::BadResourceState,
        Syndrome::ObjectInUse,
    );
    // Key address `start` is umem byte 0x1080: the text (umem byte 0x2000 - 100) sits
    // 0xf80 - 100 bytes into the key.
    let key = mkey_from_index(index, 0x42);
    let rx = h.alloc(1024, 64);
    let rx_key = h.create_mkey(true, true);
    h.post_ud_recv(&mut b, rx, 1024, rx_key);
    let av = UdAv::to(GID_A, MAC_A, b.qpn, UD_QKEY);
    let w = ud_wqe(
        &a.sq,
        opcode::SEND,
        0,
        &av,
        &[(start + 0xf80 - 100, key, 300)],
    );
    h.post(&mut a.sq, &w, false);
    let kinds: Vec<u8> = std::iter::from_fn(|| h.poll_cq(&mut cq))
        .map(|c| c[63] >> 4)
        .collect();
    assert!(kinds.contains(&2), "a receive completion: {kinds:?}");
    assert_eq!(
        h.read(rx + 40, 300),
        text,
        "gathered through the umem's pages"
    );
    // A key whose start sits elsewhere in its page than its umem offset is refused.
    let mut cmd = CreateMkeyIn::new(&mut input[..]).expect("layout");
    cmd.memory_key_mkey_entry_mut().set_start_addr(0x7000_0000);
    refused(
        h.exec_as(uid, &input, 16),
        CmdStatus::BadParameter,
        Syndrome::BadUmem,
    );
    let mut destroy = Host::input(Opcode::DestroyMkey, 0, 0x10);
    destroy[8..12].copy_from_slice(&index.to_be_bytes());
    h.exec_as(uid, &destroy, 16).expect("DESTROY_MKEY");
    h.destroy_umem(uid, umem.id).expect("umem free");
    h.destroy_uctx(uid).expect("DESTROY_UCTX");
}

/// Linux closes a user context while a memory key it created may live on in mlx5_ib's mkey
/// cache (`mlx5_revoke_mr` keeps the revoked key for reuse), so DESTROY_UCTX succeeds with
/// objects left: they pass to the driver, which may destroy them, and no other context may
/// touch them.
#[test]
fn destroy_uctx_with_objects_left_hands_them_to_the_driver() {
    let mut h = host();
    let a = h.create_uctx(0).expect("uctx a");
    let pd = alloc_pd_as(&mut h, a).expect("ALLOC_PD under a");
    h.destroy_uctx(a).expect("DESTROY_UCTX with a PD left");
    let b = h.create_uctx(0).expect("uctx b");
    refused(
        dealloc_pd_as(&mut h, b, pd),
        CmdStatus::BadParameter,
        Syndrome::UidMismatch,
    );
    dealloc_pd_as(&mut h, 0, pd).expect("DEALLOC_PD by the driver");
    h.destroy_uctx(b).expect("DESTROY_UCTX b");
    h.teardown();
}
