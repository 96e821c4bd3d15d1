//! The RoCE v2 RC requester: on a send doorbell for an RC QP, fetch each new WQE from the
//! QP's send ring, gather its message (data segments through memory keys, or inline bytes),
//! and cut it into RoCE v2 packets of at most the path MTU: Ethernet, IPv4 or IPv6, UDP to
//! port 4791, BTH, RETH and ImmDt where the opcode carries them, the payload padded to four
//! bytes, and the invariant CRC (ICRC) as the last four bytes.

use crate::counters::add;
use crate::fw::mkey::translate;
use crate::fw::Core;
use crate::objects::rc::Outstanding;
use cxdirect_hw::cqe::{Cqe64, CqeOpcode, CqeSyndrome, ErrCqe};
use cxdirect_hw::qp::state;
use cxdirect_hw::roce::{gid_is_ipv4_mapped, RoceAddrLayout, ROCE_V2_UDP_DPORT};
use cxdirect_hw::wqe::{
    self, opcode, AtomicSeg, CtrlSeg, DataSeg, RaddrSeg, INLINE_SEG, WQE_BB, WQE_DS,
};
use std::time::{Duration, Instant};

/// RC BTH opcodes (IBA, `include/rdma/ib_pack.h`).
pub(crate) mod bth_opcode {
    /// SEND first packet.
    pub const SEND_FIRST: u8 = 0x00;
    /// SEND middle packet.
    pub const SEND_MIDDLE: u8 = 0x01;
    /// SEND last packet.
    pub const SEND_LAST: u8 = 0x02;
    /// SEND last packet with immediate.
    pub const SEND_LAST_IMM: u8 = 0x03;
    /// SEND in one packet.
    pub const SEND_ONLY: u8 = 0x04;
    /// SEND in one packet with immediate.
    pub const SEND_ONLY_IMM: u8 = 0x05;
    /// RDMA WRITE first packet (with RETH).
    pub const WRITE_FIRST: u8 = 0x06;
    /// RDMA WRITE middle packet.
    pub const WRITE_MIDDLE: u8 = 0x07;
    /// RDMA WRITE last packet.
    pub const WRITE_LAST: u8 = 0x08;
    /// RDMA WRITE last packet with immediate.
    pub const WRITE_LAST_IMM: u8 = 0x09;
    /// RDMA WRITE in one packet (with RETH).
    pub const WRITE_ONLY: u8 = 0x0a;
    /// RDMA WRITE in one packet with RETH and immediate.
    pub const WRITE_ONLY_IMM: u8 = 0x0b;
    /// RDMA READ request (with RETH).
    pub const READ_REQUEST: u8 = 0x0c;
    /// READ response first packet (with AETH).
    pub const READ_RESPONSE_FIRST: u8 = 0x0d;
    /// READ response middle packet.
    pub const READ_RESPONSE_MIDDLE: u8 = 0x0e;
    /// READ response last packet (with AETH).
    pub const READ_RESPONSE_LAST: u8 = 0x0f;
    /// READ response in one packet (with AETH).
    pub const READ_RESPONSE_ONLY: u8 = 0x10;
    /// Atomic acknowledgement (AETH and the original value).
    pub const ATOMIC_ACKNOWLEDGE: u8 = 0x12;
    /// Compare and swap request (AtomicETH).
    pub const COMPARE_SWAP: u8 = 0x13;
    /// Fetch and add request (AtomicETH).
    pub const FETCH_ADD: u8 = 0x14;
}

/// Length of the Base Transport Header.
pub(crate) const BTH_LEN: usize = 12;
/// Length of the RDMA Extended Transport Header.
pub(crate) const RETH_LEN: usize = 16;
/// Length of the Immediate Data header.
pub(crate) const IMM_LEN: usize = 4;
/// Length of the Atomic Extended Transport Header.
pub(crate) const ATOMIC_ETH_LEN: usize = 28;
/// Length of the ICRC trailer.
pub(crate) const ICRC_LEN: usize = 4;
/// PSNs are 24 bits.
pub(crate) const PSN_MASK: u32 = 0x00ff_ffff;
/// Default partition key.
const DEFAULT_PKEY: u16 = 0xffff;
/// BTH AckReq bit in the PSN word.
const ACK_REQ: u32 = 0x8000_0000;

/// The CRC-32 (IEEE 802.3, reflected) lookup table.
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// Runs the CRC-32 register `crc` (not inverted) over `bytes`.
fn crc32_update(mut crc: u32, bytes: &[u8]) -> u32 {
    for &b in bytes {
        crc = CRC_TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    crc
}

/// The ICRC of a RoCE v2 packet: `frame` from its Ethernet header to the end of its padded
/// payload (ICRC excluded), `l3` the offset of its IP header. The variant fields are masked
/// to ones (IPv4 TOS, TTL and checksum; IPv6 traffic class, flow label and hop limit; the UDP
/// checksum; the BTH reserved byte before the destination QP), eight bytes of ones stand for
/// the absent LRH, and the CRC-32 is taken over it all. Returned in wire byte order.
pub(crate) fn icrc(frame: &[u8], l3: usize) -> [u8; 4] {
    let mut crc = crc32_update(0xffff_ffff, &[0xff; 8]);
    let ip = &frame[l3..];
    let (ip_len, mut head) = if ip[0] >> 4 == 4 {
        let mut h = [0u8; 20];
        h.copy_from_slice(&ip[..20]);
        h[1] = 0xff;
        h[8] = 0xff;
        h[10] = 0xff;
        h[11] = 0xff;
        let mut buf = [0u8; 40];
        buf[..20].copy_from_slice(&h);
        (20, buf)
    } else {
        let mut h = [0u8; 40];
        h.copy_from_slice(&ip[..40]);
        h[0] |= 0x0f;
        h[1] = 0xff;
        h[2] = 0xff;
        h[3] = 0xff;
        h[7] = 0xff;
        (40, h)
    };
    crc = crc32_update(crc, &head[..ip_len]);
    head[..8].copy_from_slice(&ip[ip_len..ip_len + 8]);
    head[6] = 0xff;
    head[7] = 0xff;
    crc = crc32_update(crc, &head[..8]);
    let bth = &ip[ip_len + 8..];
    let mut masked_bth = [0u8; BTH_LEN];
    masked_bth.copy_from_slice(&bth[..BTH_LEN]);
    masked_bth[4] = 0xff;
    crc = crc32_update(crc, &masked_bth);
    crc = crc32_update(crc, &bth[BTH_LEN..]);
    (!crc).to_le_bytes()
}

/// Bytes of path MTU code `code` (1 = 256 ... 5 = 4096).
pub(crate) fn mtu_bytes(code: u8) -> usize {
    256usize << code.clamp(1, 5).saturating_sub(1)
}

/// The addresses a QP's packets carry.
struct Addresses {
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src_gid: [u8; 16],
    dst_gid: [u8; 16],
}

/// Source and destination addresses of `qpn`'s path: the source GID and MAC from the RoCE
/// address table entry, the destination from the path (this port's own on a loopback path).
fn addresses(core: &Core, qpn: u32) -> Option<Addresses> {
    let qp = core.res.qps.get(qpn)?;
    let path = qp.path;
    let (src_gid, src_mac) = match core.res.gids.valid(usize::from(path.gid_index)) {
        Some(entry) => {
            let layout = RoceAddrLayout::new(&entry[..]).ok()?;
            let mac = layout.source_mac();
            let mac = if mac == [0; 6] { core.cfg.mac } else { mac };
            (layout.gid(), mac)
        }
        None => ([0; 16], core.cfg.mac),
    };
    let (dst_gid, dst_mac) = if path.loopback {
        (src_gid, src_mac)
    } else {
        (path.rgid, path.rmac)
    };
    Some(Addresses {
        src_mac,
        dst_mac,
        src_gid,
        dst_gid,
    })
}

/// One RC packet's transport fields.
pub(crate) struct Transport {
    pub opcode: u8,
    pub dest_qpn: u32,
    pub psn: u32,
    pub ack_req: bool,
    pub solicited: bool,
    /// RETH (virtual address, rkey, DMA length), when the opcode carries one.
    pub reth: Option<(u64, u32, u32)>,
    /// AETH (syndrome << 24 | MSN), when the opcode carries one.
    pub aeth: Option<u32>,
    /// Immediate data, when the opcode carries it.
    pub imm: Option<u32>,
    /// AtomicETH (virtual address, rkey, swap or add value, compare value).
    pub atomic: Option<(u64, u32, u64, u64)>,
    /// AtomicAckETH: the original value at the target.
    pub atomic_ack: Option<u64>,
}

/// Builds a RoCE v2 frame for QP `qpn`'s path into `out` (cleared first): headers from `t`,
/// then `payload`, the pad and the ICRC.
pub(crate) fn build_frame(
    core: &Core,
    qpn: u32,
    t: &Transport,
    payload: &[u8],
    out: &mut Vec<u8>,
) -> bool {
    let Some(addr) = addresses(core, qpn) else {
        return false;
    };
    let Some(qp) = core.res.qps.get(qpn) else {
        return false;
    };
    let path = qp.path;
    let v4 = gid_is_ipv4_mapped(&addr.dst_gid);
    let pad = (4 - payload.len() % 4) % 4;
    let ext = t.reth.map_or(0, |_| RETH_LEN)
        + t.aeth.map_or(0, |_| 4)
        + t.atomic.map_or(0, |_| ATOMIC_ETH_LEN)
        + t.atomic_ack.map_or(0, |_| 8)
        + t.imm.map_or(0, |_| IMM_LEN);
    let udp_len = 8 + BTH_LEN + ext + payload.len() + pad + ICRC_LEN;
    out.clear();
    out.extend_from_slice(&addr.dst_mac);
    out.extend_from_slice(&addr.src_mac);
    let l3 = 14;
    if v4 {
        out.extend_from_slice(&0x0800u16.to_be_bytes());
        let total = (20 + udp_len) as u16;
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[1] = path.tclass;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[6] = 0x40;
        ip[8] = if path.hop_limit == 0 {
            64
        } else {
            path.hop_limit
        };
        ip[9] = 17;
        ip[12..16].copy_from_slice(&addr.src_gid[12..16]);
        ip[16..20].copy_from_slice(&addr.dst_gid[12..16]);
        let sum = ip_checksum(&ip);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        out.extend_from_slice(&ip);
    } else {
        out.extend_from_slice(&0x86ddu16.to_be_bytes());
        let word = (6u32 << 28) | (u32::from(path.tclass) << 20) | (path.flow_label & 0xf_ffff);
        out.extend_from_slice(&word.to_be_bytes());
        out.extend_from_slice(&(udp_len as u16).to_be_bytes());
        out.push(17);
        out.push(if path.hop_limit == 0 {
            64
        } else {
            path.hop_limit
        });
        out.extend_from_slice(&addr.src_gid);
        out.extend_from_slice(&addr.dst_gid);
    }
    out.extend_from_slice(&path.udp_sport.to_be_bytes());
    out.extend_from_slice(&ROCE_V2_UDP_DPORT.to_be_bytes());
    out.extend_from_slice(&(udp_len as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.push(t.opcode);
    out.push((u8::from(t.solicited) << 7) | ((pad as u8) << 4));
    out.extend_from_slice(&DEFAULT_PKEY.to_be_bytes());
    out.extend_from_slice(&(t.dest_qpn & PSN_MASK).to_be_bytes());
    let psn_word = (t.psn & PSN_MASK) | if t.ack_req { ACK_REQ } else { 0 };
    out.extend_from_slice(&psn_word.to_be_bytes());
    if let Some((va, rkey, len)) = t.reth {
        out.extend_from_slice(&va.to_be_bytes());
        out.extend_from_slice(&rkey.to_be_bytes());
        out.extend_from_slice(&len.to_be_bytes());
    }
    if let Some(aeth) = t.aeth {
        out.extend_from_slice(&aeth.to_be_bytes());
    }
    if let Some(orig) = t.atomic_ack {
        out.extend_from_slice(&orig.to_be_bytes());
    }
    if let Some((va, rkey, swap_add, compare)) = t.atomic {
        out.extend_from_slice(&va.to_be_bytes());
        out.extend_from_slice(&rkey.to_be_bytes());
        out.extend_from_slice(&swap_add.to_be_bytes());
        out.extend_from_slice(&compare.to_be_bytes());
    }
    if let Some(imm) = t.imm {
        out.extend_from_slice(&imm.to_be_bytes());
    }
    out.extend_from_slice(payload);
    out.extend(std::iter::repeat_n(0u8, pad));
    let crc = icrc(out, l3);
    out.extend_from_slice(&crc);
    true
}

/// The IPv4 header checksum of `header` (its checksum field zero).
fn ip_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// What the requester knows of a WQE it is sending.
struct Request {
    opcode: u8,
    index: u16,
    bbs: u16,
    imm: u32,
    solicited: bool,
    signaled: bool,
    remote: Option<(u64, u32)>,
    /// A retransmission from this PSN (the WQE is already outstanding).
    resend_psn: Option<u32>,
}

/// Send doorbell for RC QP `qpn` on UAR `uar`: executes every WQE posted since the last one.
pub(crate) fn doorbell(core: &mut Core, uar: u32, qpn: u32) {
    let Some(qp) = core.res.qps.get(qpn) else {
        add(&core.counters.bad_doorbells, 1);
        return;
    };
    let Some(log_sq) = qp.log_sq_size else {
        add(&core.counters.bad_doorbells, 1);
        return;
    };
    if qp.uar != uar {
        add(&core.counters.bad_doorbells, 1);
        return;
    }
    if qp.state == state::ERR {
        flush(core, qpn);
        return;
    }
    if qp.state != state::RTS {
        add(&core.counters.bad_doorbells, 1);
        return;
    }
    let dbr = qp.dbr;
    let Ok(word) = core.dma_read_be32(dbr + 4) else {
        return;
    };
    let pi = word as u16;
    let entries = 1u32 << log_sq;
    if u32::from(pi.wrapping_sub(qp.sq_consumed)) > entries {
        add(&core.counters.bad_doorbells, 1);
        return;
    }
    let mut scratch = std::mem::take(&mut core.rc_scratch);
    while let Some(qp) = core.res.qps.get(qpn) {
        let index = qp.sq_consumed;
        if index == pi || qp.state != state::RTS {
            break;
        }
        match execute(core, qpn, index, None, &mut scratch) {
            Ok(bbs) => {
                if let Some(qp) = core.res.qps.get_mut(qpn) {
                    qp.sq_consumed = index.wrapping_add(bbs);
                }
            }
            Err((opcode, syndrome)) => {
                fail(core, qpn, index, opcode, syndrome);
                let bbs = wqe_span(core, qpn, index, pi);
                if let Some(qp) = core.res.qps.get_mut(qpn) {
                    qp.sq_consumed = index.wrapping_add(bbs);
                }
                flush(core, qpn);
                break;
            }
        }
    }
    core.rc_scratch = scratch;
}

/// WQEBBs the WQE at `index` takes by its control segment's `ds` (1 when that cannot be
/// read), ending no later than the producer index `pi`.
fn wqe_span(core: &Core, qpn: u32, index: u16, pi: u16) -> u16 {
    let mut bb = [0u8; WQE_BB];
    let ds = read_bb(core, qpn, index, &mut bb)
        .ok()
        .and_then(|()| CtrlSeg::new(&bb[..16]).ok().map(|c| usize::from(c.ds())))
        .unwrap_or(0);
    span(ds, index, pi)
}

/// WQEBBs of a WQE of `ds` 16-byte units at `index`: at least 1, and no further than the
/// producer index `pi` (a malformed `ds` never skips past what was posted).
fn span(ds: usize, index: u16, pi: u16) -> u16 {
    let bbs = u16::try_from(wqe::wqebbs(ds)).unwrap_or(u16::MAX);
    bbs.clamp(1, pi.wrapping_sub(index).max(1))
}

/// Reusable buffers of the RC requester.
#[derive(Default)]
pub(crate) struct RcScratch {
    wqe: Vec<u8>,
    message: Vec<u8>,
    frame: Vec<u8>,
    /// The responder's ACK, NAK and response frames.
    pub ack: Vec<u8>,
    /// The responder's READ response payload.
    pub response: Vec<u8>,
}

/// Reads WQEBB `bb` of QP `qpn`'s send ring into `out` (one WQEBB).
fn read_bb(core: &Core, qpn: u32, bb: u16, out: &mut [u8]) -> Result<(), ()> {
    let qp = core.res.qps.get(qpn).ok_or(())?;
    let log_sq = qp.log_sq_size.ok_or(())?;
    let slot = u64::from(bb) & ((1u64 << log_sq) - 1);
    let offset = qp.receive.ring_bytes() + slot * WQE_BB as u64;
    let addr = qp.buf.addr(offset).ok_or(())?;
    core.dma_read(addr, out).map_err(|_| ())
}

type WqeError = (u8, CqeSyndrome);

/// Executes the WQE at `index`; returns its WQEBBs.
fn execute(
    core: &mut Core,
    qpn: u32,
    index: u16,
    resend_psn: Option<u32>,
    s: &mut RcScratch,
) -> Result<u16, WqeError> {
    s.wqe.resize(WQE_BB, 0);
    read_bb(core, qpn, index, &mut s.wqe[..WQE_BB])
        .map_err(|_| (0, CqeSyndrome::LocalProtection))?;
    let ctrl = CtrlSeg::new(&s.wqe[..16]).map_err(|_| (0, CqeSyndrome::LocalQpOperation))?;
    let (op, ds) = (ctrl.opcode(), usize::from(ctrl.ds()));
    let (imm, solicited) = (ctrl.imm(), ctrl.se());
    let signaled = ctrl.ce() >= wqe::completion::ALWAYS;
    let (ctrl_qpn, ctrl_index) = (ctrl.qpn_or_sqn(), ctrl.wqe_index());
    let bad = (op, CqeSyndrome::LocalQpOperation);
    if ds == 0 || ctrl_qpn != qpn || ctrl_index != index {
        return Err(bad);
    }
    let bbs = wqe::wqebbs(ds) as u16;
    s.wqe.resize(usize::from(bbs) * WQE_BB, 0);
    for i in 1..bbs {
        let range = usize::from(i) * WQE_BB..usize::from(i + 1) * WQE_BB;
        read_bb(core, qpn, index.wrapping_add(i), &mut s.wqe[range])
            .map_err(|_| (op, CqeSyndrome::LocalProtection))?;
    }
    let mut req = Request {
        opcode: op,
        index,
        bbs,
        imm,
        solicited,
        signaled,
        remote: None,
        resend_psn,
    };
    let mut at = WQE_DS;
    match op {
        opcode::SEND | opcode::SEND_IMM => {}
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM => {
            if ds < 2 {
                return Err(bad);
            }
            let raddr = RaddrSeg::new(&s.wqe[at..at + WQE_DS]).map_err(|_| bad)?;
            req.remote = Some((raddr.raddr(), raddr.rkey()));
            at += WQE_DS;
        }
        opcode::RDMA_READ => {
            if ds < 2 {
                return Err(bad);
            }
            let raddr = RaddrSeg::new(&s.wqe[at..at + WQE_DS]).map_err(|_| bad)?;
            let (va, rkey) = (raddr.raddr(), raddr.rkey());
            let bytes = local_bytes(&s.wqe[..ds * WQE_DS], at + WQE_DS).ok_or(bad)?;
            send_read(core, qpn, &req, va, rkey, bytes);
            return Ok(req.bbs);
        }
        opcode::ATOMIC_CS | opcode::ATOMIC_FA => {
            if ds < 4 {
                return Err(bad);
            }
            let raddr = RaddrSeg::new(&s.wqe[at..at + WQE_DS]).map_err(|_| bad)?;
            let atomic = AtomicSeg::new(&s.wqe[at + WQE_DS..at + 2 * WQE_DS]).map_err(|_| bad)?;
            let bytes = local_bytes(&s.wqe[..ds * WQE_DS], at + 2 * WQE_DS).ok_or(bad)?;
            if bytes != 8 {
                return Err((op, CqeSyndrome::LocalLength));
            }
            let eth = (
                raddr.raddr(),
                raddr.rkey(),
                atomic.swap_add(),
                atomic.compare(),
            );
            send_atomic(core, qpn, &req, eth);
            return Ok(req.bbs);
        }
        _ => return Err(bad),
    }
    gather(core, qpn, &s.wqe[..ds * WQE_DS], at, &mut s.message).map_err(|syn| (op, syn))?;
    send_message(core, qpn, &req, s);
    Ok(req.bbs)
}

/// Gathers the message of the data and inline segments of `wqe` from byte `at` on.
fn gather(
    core: &Core,
    qpn: u32,
    wqe: &[u8],
    mut at: usize,
    message: &mut Vec<u8>,
) -> Result<(), CqeSyndrome> {
    message.clear();
    let qp = core.res.qps.get(qpn).ok_or(CqeSyndrome::LocalQpOperation)?;
    let pd = qp.pd;
    let max = 1usize << qp.log_msg_max.min(31);
    while at + 4 <= wqe.len() {
        let head = u32::from_be_bytes([wqe[at], wqe[at + 1], wqe[at + 2], wqe[at + 3]]);
        if head & INLINE_SEG != 0 {
            let len = (head & !INLINE_SEG) as usize;
            let end = at + 4 + len;
            if end > wqe.len() {
                return Err(CqeSyndrome::LocalLength);
            }
            message.extend_from_slice(&wqe[at + 4..end]);
            at += wqe::inline_seg_ds(len) * WQE_DS;
        } else {
            if at + WQE_DS > wqe.len() {
                break;
            }
            let seg = DataSeg::new(&wqe[at..at + WQE_DS]).map_err(|_| CqeSyndrome::LocalLength)?;
            let len = seg.byte_count() as usize;
            at += WQE_DS;
            if len == 0 {
                continue;
            }
            if message.len() + len > max {
                return Err(CqeSyndrome::LocalLength);
            }
            let start = message.len();
            message.resize(start + len, 0);
            let dest = &mut message[start..];
            translate(
                core,
                seg.lkey(),
                pd,
                seg.addr(),
                len as u64,
                false,
                |iova, offset, bytes| {
                    let range = offset as usize..(offset + bytes) as usize;
                    core.dma_read(iova, &mut dest[range])
                        .map_err(|_| crate::fw::mkey::KeyFault::Bounds)
                },
            )
            .map_err(|_| CqeSyndrome::LocalProtection)?;
        }
    }
    if message.len() > max {
        return Err(CqeSyndrome::LocalLength);
    }
    Ok(())
}

/// Cuts the gathered message into packets and transmits them.
fn send_message(core: &mut Core, qpn: u32, req: &Request, s: &mut RcScratch) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let mtu = mtu_bytes(qp.mtu);
    let dest_qpn = qp.remote_qpn;
    let mut psn = req.resend_psn.unwrap_or(qp.next_send_psn) & PSN_MASK;
    let first_psn = psn;
    let total = s.message.len();
    let packets = total.div_ceil(mtu).max(1);
    let write = req.remote.is_some();
    let with_imm = matches!(req.opcode, opcode::SEND_IMM | opcode::RDMA_WRITE_IMM);
    for n in 0..packets {
        let first = n == 0;
        let last = n + 1 == packets;
        let bth = match (write, first, last, with_imm) {
            (false, true, true, false) => bth_opcode::SEND_ONLY,
            (false, true, true, true) => bth_opcode::SEND_ONLY_IMM,
            (false, true, false, _) => bth_opcode::SEND_FIRST,
            (false, false, false, _) => bth_opcode::SEND_MIDDLE,
            (false, false, true, false) => bth_opcode::SEND_LAST,
            (false, false, true, true) => bth_opcode::SEND_LAST_IMM,
            (true, true, true, false) => bth_opcode::WRITE_ONLY,
            (true, true, true, true) => bth_opcode::WRITE_ONLY_IMM,
            (true, true, false, _) => bth_opcode::WRITE_FIRST,
            (true, false, false, _) => bth_opcode::WRITE_MIDDLE,
            (true, false, true, false) => bth_opcode::WRITE_LAST,
            (true, false, true, true) => bth_opcode::WRITE_LAST_IMM,
        };
        let t = Transport {
            opcode: bth,
            dest_qpn,
            psn,
            ack_req: last,
            solicited: last && req.solicited,
            reth: match req.remote {
                Some((va, rkey)) if first => Some((va, rkey, total as u32)),
                _ => None,
            },
            aeth: None,
            imm: (last && with_imm).then_some(req.imm),
            atomic: None,
            atomic_ack: None,
        };
        let range = (n * mtu).min(total)..((n + 1) * mtu).min(total);
        let mut frame = std::mem::take(&mut s.frame);
        if build_frame(core, qpn, &t, &s.message[range], &mut frame) {
            crate::engine::sq::transmit(core, &frame);
        }
        s.frame = frame;
        psn = (psn + 1) & PSN_MASK;
    }
    arm_ack_timer(core, qpn);
    if req.resend_psn.is_some() {
        return;
    }
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.next_send_psn = psn;
        qp.req.outstanding.push_back(Outstanding {
            index: req.index,
            opcode: req.opcode,
            first_psn,
            last_psn: psn.wrapping_sub(1) & PSN_MASK,
            signaled: req.signaled,
            bytes: total as u32,
        });
    }
}

/// An ACK or NAK (AETH `syndrome`) for `psn` reached requester QP `qpn`: every WQE whose last
/// packet it acknowledges retires in order, with a CQE when signalled. A NAK for a remote
/// access error, invalid request or remote operational error completes the WQE it names in
/// error, moves the QP to error and flushes every WQE after it.
pub(crate) fn acknowledge(core: &mut Core, qpn: u32, psn: u32, syndrome: u8) {
    use crate::engine::rc_resp::aeth;
    let kind = syndrome & aeth::TYPE_MASK;
    let error = match syndrome {
        aeth::NAK_REMOTE_ACCESS => Some(CqeSyndrome::RemoteAccess),
        aeth::NAK_INVALID_REQUEST => Some(CqeSyndrome::RemoteInvalidRequest),
        aeth::NAK_REMOTE_OPERATION => Some(CqeSyndrome::RemoteOperation),
        _ => None,
    };
    // A NAK acknowledges the packets before the PSN it names; an ACK, that PSN too.
    let acked_through = if kind == 0 {
        psn
    } else {
        psn.wrapping_sub(1) & PSN_MASK
    };
    loop {
        let Some(qp) = core.res.qps.get_mut(qpn) else {
            return;
        };
        let Some(&front) = qp.req.outstanding.front() else {
            break;
        };
        // `front.last_psn` at or before `acked_through`, in 24-bit sequence space.
        if acked_through.wrapping_sub(front.last_psn) & PSN_MASK >= 1 << 23 {
            break;
        }
        // A READ or atomic completes by its response, never by a later ACK.
        if expects_response(front.opcode) {
            break;
        }
        qp.req.outstanding.pop_front();
        if front.signaled {
            requester_cqe(core, qpn, &front);
        }
    }
    let now = Instant::now();
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.req.retries_left = qp.retry_count;
        qp.req.ack_deadline = (!qp.req.outstanding.is_empty())
            .then(|| now + ack_timeout(qp.path.ack_timeout))
            .filter(|_| qp.path.ack_timeout != 0);
    }
    if kind == aeth::RNR_NAK {
        rnr_nak(core, qpn, syndrome & 0x1f, now);
        return;
    }
    if syndrome == aeth::NAK_PSN_SEQ {
        // The responder lost a packet: go back to the first unacknowledged one.
        resend_outstanding(core, qpn);
        return;
    }
    if let Some(syndrome) = error {
        let front = core
            .res
            .qps
            .get_mut(qpn)
            .and_then(|qp| qp.req.outstanding.pop_front());
        if let Some(front) = front {
            fail(core, qpn, front.index, front.opcode, syndrome);
        }
        flush(core, qpn);
    }
}

/// Writes the requester CQE of a WQE that completed.
fn requester_cqe(core: &mut Core, qpn: u32, done: &Outstanding) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let cqn = qp.cqn_snd;
    let mut cqe = [0u8; 64];
    if let Ok(mut c) = Cqe64::new(&mut cqe[..]) {
        c.set_opcode(CqeOpcode::Req as u8)
            .set_sop_drop(done.opcode)
            .set_qpn(qpn)
            .set_wqe_counter(done.index)
            .set_byte_cnt(done.bytes);
    }
    if crate::engine::cq::post(core, cqn, &mut cqe).is_err() {
        add(&core.counters.completions_lost, 1);
    }
}

/// QP `qpn` went to error by command (2ERR_QP): every send WQE outstanding or posted and
/// every receive WQE posted complete with the flush syndrome, and no timer runs for it.
pub(crate) fn flush_on_error(core: &mut Core, qpn: u32) {
    flush(core, qpn);
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.req.ack_deadline = None;
        qp.req.rnr_until = None;
    }
    crate::engine::rc_resp::flush_receives(core, qpn);
}

/// Completes every WQE still outstanding, then every WQE posted and not executed, with the
/// flush syndrome (the QP is in error).
fn flush(core: &mut Core, qpn: u32) {
    while let Some(front) = core
        .res
        .qps
        .get_mut(qpn)
        .and_then(|qp| qp.req.outstanding.pop_front())
    {
        flushed(core, qpn, front.index, front.opcode);
    }
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let Ok(word) = core.dma_read_be32(qp.dbr + 4) else {
        return;
    };
    let pi = word as u16;
    let entries = qp.log_sq_size.map_or(0, |log| 1u32 << log);
    let mut index = qp.sq_consumed;
    if u32::from(pi.wrapping_sub(index)) > entries {
        return;
    }
    let mut ctrl = [0u8; 16];
    while index != pi {
        let mut bb = [0u8; WQE_BB];
        if read_bb(core, qpn, index, &mut bb).is_err() {
            break;
        }
        ctrl.copy_from_slice(&bb[..16]);
        let Ok(seg) = CtrlSeg::new(&ctrl[..]) else {
            break;
        };
        let (op, ds) = (seg.opcode(), usize::from(seg.ds()));
        flushed(core, qpn, index, op);
        index = index.wrapping_add(span(ds, index, pi));
    }
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.sq_consumed = pi;
    }
}

/// The flush-error CQE of one WQE.
fn flushed(core: &mut Core, qpn: u32, index: u16, opcode: u8) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let cqn = qp.cqn_snd;
    let mut cqe = [0u8; 64];
    if let Ok(mut err) = ErrCqe::new(&mut cqe[..]) {
        err.set_syndrome(CqeSyndrome::WrFlushed as u8)
            .set_s_wqe_opcode(opcode)
            .set_qpn(qpn)
            .set_wqe_counter(index)
            .set_opcode(CqeOpcode::ReqErr as u8);
    }
    if crate::engine::cq::post(core, cqn, &mut cqe).is_err() {
        add(&core.counters.completions_lost, 1);
    }
}

/// Writes an error CQE for the WQE at `index` and moves the QP to error.
fn fail(core: &mut Core, qpn: u32, index: u16, opcode: u8, syndrome: CqeSyndrome) {
    add(&core.counters.error_cqes, 1);
    let Some(qp) = core.res.qps.get_mut(qpn) else {
        return;
    };
    qp.state = state::ERR;
    let cqn = qp.cqn_snd;
    let mut cqe = [0u8; 64];
    if let Ok(mut err) = ErrCqe::new(&mut cqe[..]) {
        err.set_syndrome(syndrome as u8)
            .set_s_wqe_opcode(opcode)
            .set_qpn(qpn)
            .set_wqe_counter(index)
            .set_opcode(CqeOpcode::ReqErr as u8);
    }
    if crate::engine::cq::post(core, cqn, &mut cqe).is_err() {
        add(&core.counters.completions_lost, 1);
    }
}

/// WQEs a response (READ data, atomic original value) completes, rather than an ACK.
fn expects_response(opcode: u8) -> bool {
    matches!(
        opcode,
        opcode::RDMA_READ | opcode::ATOMIC_CS | opcode::ATOMIC_FA
    )
}

/// Bytes of the local data segments of `wqe` from byte `at` on (where a READ or atomic
/// response lands); `None` for an inline segment there.
fn local_bytes(wqe: &[u8], mut at: usize) -> Option<u32> {
    let mut total = 0u32;
    while at + WQE_DS <= wqe.len() {
        let seg = DataSeg::new(&wqe[at..at + WQE_DS]).ok()?;
        if seg.byte_count() & INLINE_SEG != 0 {
            return None;
        }
        total = total.checked_add(seg.byte_count())?;
        at += WQE_DS;
    }
    Some(total)
}

/// Sends the READ request of `req` for `bytes` at `va` through `rkey`: one packet, the PSNs
/// of all its response packets reserved.
fn send_read(core: &mut Core, qpn: u32, req: &Request, va: u64, rkey: u32, bytes: u32) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let mtu = mtu_bytes(qp.mtu);
    let psn = req.resend_psn.unwrap_or(qp.next_send_psn) & PSN_MASK;
    let responses = (bytes as usize).div_ceil(mtu).max(1) as u32;
    let t = Transport {
        opcode: bth_opcode::READ_REQUEST,
        dest_qpn: qp.remote_qpn,
        psn,
        ack_req: true,
        solicited: false,
        reth: Some((va, rkey, bytes)),
        aeth: None,
        imm: None,
        atomic: None,
        atomic_ack: None,
    };
    transmit_request(core, qpn, &t, req, psn, responses, bytes);
}

/// Sends the atomic request of `req` (AtomicETH `eth`).
fn send_atomic(core: &mut Core, qpn: u32, req: &Request, eth: (u64, u32, u64, u64)) {
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let psn = req.resend_psn.unwrap_or(qp.next_send_psn) & PSN_MASK;
    let t = Transport {
        opcode: if req.opcode == opcode::ATOMIC_CS {
            bth_opcode::COMPARE_SWAP
        } else {
            bth_opcode::FETCH_ADD
        },
        dest_qpn: qp.remote_qpn,
        psn,
        ack_req: true,
        solicited: false,
        reth: None,
        aeth: None,
        imm: None,
        atomic: Some(eth),
        atomic_ack: None,
    };
    transmit_request(core, qpn, &t, req, psn, 1, 8);
}

/// Transmits a one-packet request taking `psns` PSNs from `psn` on, and records it outstanding.
fn transmit_request(
    core: &mut Core,
    qpn: u32,
    t: &Transport,
    req: &Request,
    psn: u32,
    psns: u32,
    bytes: u32,
) {
    let mut frame = std::mem::take(&mut core.rc_scratch.frame);
    if build_frame(core, qpn, t, &[], &mut frame) {
        crate::engine::sq::transmit(core, &frame);
    }
    core.rc_scratch.frame = frame;
    arm_ack_timer(core, qpn);
    if req.resend_psn.is_some() {
        return;
    }
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        qp.next_send_psn = (psn + psns) & PSN_MASK;
        qp.req.outstanding.push_back(Outstanding {
            index: req.index,
            opcode: req.opcode,
            first_psn: psn,
            last_psn: (psn + psns - 1) & PSN_MASK,
            signaled: req.signaled,
            bytes,
        });
    }
}

/// A READ response packet (`opcode`, `psn`, payload `data`) or an atomic acknowledgement
/// (`data` the original value) reached requester QP `qpn`: earlier WQEs are acknowledged by
/// it, the data lands in the WQE's local buffers, and the last packet completes the WQE.
pub(crate) fn response(core: &mut Core, qpn: u32, opcode: u8, psn: u32, data: &[u8]) {
    use bth_opcode::*;
    let Some(awaited) = first_awaiting_response(core, qpn) else {
        add(&core.counters.roce_rx_drops, 1);
        return;
    };
    // Everything before the response's WQE is acknowledged by it.
    acknowledge_before(core, qpn, awaited.first_psn);
    let Some(qp) = core.res.qps.get(qpn) else {
        return;
    };
    let Some(&front) = qp.req.outstanding.front() else {
        return;
    };
    let offset_packets = psn.wrapping_sub(front.first_psn) & PSN_MASK;
    let span = front.last_psn.wrapping_sub(front.first_psn) & PSN_MASK;
    if offset_packets > span {
        add(&core.counters.roce_rx_drops, 1);
        return;
    }
    let last = match opcode {
        READ_RESPONSE_ONLY | READ_RESPONSE_LAST | ATOMIC_ACKNOWLEDGE => true,
        READ_RESPONSE_FIRST | READ_RESPONSE_MIDDLE => false,
        _ => return,
    };
    let offset = offset_packets as usize * mtu_bytes(qp.mtu);
    if let Err(syndrome) = scatter_local(core, qpn, front.index, offset, data) {
        if let Some(qp) = core.res.qps.get_mut(qpn) {
            qp.req.outstanding.pop_front();
        }
        fail(core, qpn, front.index, front.opcode, syndrome);
        flush(core, qpn);
        return;
    }
    if last {
        if let Some(qp) = core.res.qps.get_mut(qpn) {
            qp.req.outstanding.pop_front();
        }
        if front.signaled {
            requester_cqe(core, qpn, &front);
        }
    }
}

/// The first outstanding WQE that waits for a response.
fn first_awaiting_response(core: &Core, qpn: u32) -> Option<Outstanding> {
    let qp = core.res.qps.get(qpn)?;
    qp.req
        .outstanding
        .iter()
        .find(|o| expects_response(o.opcode))
        .copied()
}

/// Retires, in order, every outstanding WQE before the one whose first PSN is `psn`.
fn acknowledge_before(core: &mut Core, qpn: u32, psn: u32) {
    loop {
        let Some(qp) = core.res.qps.get_mut(qpn) else {
            return;
        };
        let Some(&front) = qp.req.outstanding.front() else {
            return;
        };
        if front.first_psn == psn {
            return;
        }
        qp.req.outstanding.pop_front();
        if front.signaled {
            requester_cqe(core, qpn, &front);
        }
    }
}

/// Writes `data` at byte `offset` of the local buffers of the READ or atomic WQE at `index`
/// (re-read from the send ring, which the driver does not reuse before the completion).
fn scatter_local(
    core: &Core,
    qpn: u32,
    index: u16,
    offset: usize,
    data: &[u8],
) -> Result<(), CqeSyndrome> {
    let mut wqe = [0u8; 4 * WQE_BB];
    read_bb(core, qpn, index, &mut wqe[..WQE_BB]).map_err(|_| CqeSyndrome::LocalProtection)?;
    let ctrl = CtrlSeg::new(&wqe[..16]).map_err(|_| CqeSyndrome::LocalQpOperation)?;
    let (op, ds) = (ctrl.opcode(), usize::from(ctrl.ds()));
    let bbs = wqe::wqebbs(ds);
    if bbs > 4 {
        return Err(CqeSyndrome::LocalLength);
    }
    for i in 1..bbs {
        read_bb(
            core,
            qpn,
            index.wrapping_add(i as u16),
            &mut wqe[i * WQE_BB..(i + 1) * WQE_BB],
        )
        .map_err(|_| CqeSyndrome::LocalProtection)?;
    }
    let pd = core.res.qps.get(qpn).map_or(0, |qp| qp.pd);
    let mut at = if op == opcode::RDMA_READ { 2 } else { 3 } * WQE_DS;
    let mut skip = offset;
    let mut left = data;
    while !left.is_empty() && at + WQE_DS <= ds * WQE_DS {
        let seg = DataSeg::new(&wqe[at..at + WQE_DS]).map_err(|_| CqeSyndrome::LocalLength)?;
        at += WQE_DS;
        let cap = seg.byte_count() as usize;
        if skip >= cap {
            skip -= cap;
            continue;
        }
        let n = (cap - skip).min(left.len());
        let (now, later) = left.split_at(n);
        translate(
            core,
            seg.lkey(),
            pd,
            seg.addr() + skip as u64,
            n as u64,
            true,
            |iova, off, bytes| {
                core.dma_write(iova, &now[off as usize..(off + bytes) as usize])
                    .map_err(|_| crate::fw::mkey::KeyFault::Bounds)
            },
        )
        .map_err(|_| CqeSyndrome::LocalProtection)?;
        left = later;
        skip = 0;
    }
    if left.is_empty() {
        Ok(())
    } else {
        Err(CqeSyndrome::LocalLength)
    }
}

/// The local ACK timeout of code `code`: 4.096 us << code.
pub(crate) fn ack_timeout(code: u8) -> Duration {
    Duration::from_nanos(4096u64 << code.min(31))
}

/// The RNR timer of code `code` (IBA table 45): 0 is 655.36 ms, 1..=31 run from 0.01 ms to
/// 491.52 ms.
pub(crate) fn rnr_delay(code: u8) -> Duration {
    const MICROS: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
        5120, 7680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
        245_760, 327_680, 491_520,
    ];
    Duration::from_micros(u64::from(MICROS[usize::from(code & 0x1f)]))
}

/// `rnr_retry` that means retry without limit.
const RNR_RETRY_FOREVER: u8 = 7;

/// Starts the ACK timer of QP `qpn` (a QP with `ack_timeout` 0 has none).
fn arm_ack_timer(core: &mut Core, qpn: u32) {
    if let Some(qp) = core.res.qps.get_mut(qpn) {
        if qp.path.ack_timeout != 0 {
            qp.req.ack_deadline = Some(Instant::now() + ack_timeout(qp.path.ack_timeout));
        }
        if qp.req.outstanding.is_empty() {
            qp.req.retries_left = qp.retry_count;
            qp.req.rnr_retries_left = qp.rnr_retry;
        }
    }
}

/// An RNR NAK with timer code `code`: wait, then send again from the NAKed WQE; past the
/// QP's `rnr_retry` NAKs, fail it (RNR retry exceeded).
fn rnr_nak(core: &mut Core, qpn: u32, code: u8, now: Instant) {
    let Some(qp) = core.res.qps.get_mut(qpn) else {
        return;
    };
    qp.req.ack_deadline = None;
    if qp.rnr_retry != RNR_RETRY_FOREVER {
        if qp.req.rnr_retries_left == 0 {
            exhausted(core, qpn, CqeSyndrome::RnrRetryExceeded);
            return;
        }
        qp.req.rnr_retries_left -= 1;
    }
    qp.req.rnr_until = Some(now + rnr_delay(code));
}

/// Retries ran out: the oldest WQE completes with `syndrome`, the QP goes to error and every
/// other WQE is flushed.
fn exhausted(core: &mut Core, qpn: u32, syndrome: CqeSyndrome) {
    let front = core.res.qps.get_mut(qpn).and_then(|qp| {
        qp.req.ack_deadline = None;
        qp.req.rnr_until = None;
        qp.req.outstanding.pop_front()
    });
    if let Some(front) = front {
        fail(core, qpn, front.index, front.opcode, syndrome);
    }
    flush(core, qpn);
}

/// Go-back-N: sends every outstanding WQE again, with the PSNs it had.
fn resend_outstanding(core: &mut Core, qpn: u32) {
    let mut scratch = std::mem::take(&mut core.rc_scratch);
    let mut n = 0;
    while let Some(o) = core
        .res
        .qps
        .get(qpn)
        .and_then(|qp| qp.req.outstanding.get(n).copied())
    {
        add(&core.counters.roce_retransmits, 1);
        if let Err((opcode, syndrome)) =
            execute(core, qpn, o.index, Some(o.first_psn), &mut scratch)
        {
            fail(core, qpn, o.index, opcode, syndrome);
            flush(core, qpn);
            break;
        }
        n += 1;
    }
    core.rc_scratch = scratch;
}

/// Runs the RC timers of every QP due at `now`: an expired ACK timer sends the outstanding
/// WQEs again (up to `retry_count` times, then retry exceeded); an expired RNR wait sends
/// them again. Returns whether anything was sent.
pub(crate) fn run_timers(core: &mut Core, now: Instant) -> bool {
    if core.res.qps.len() == 0 {
        return false;
    }
    let mut sent = false;
    let mut qpn_due = None;
    loop {
        // One QP at a time: a retransmission changes the table's QPs' state.
        let next = core.res.qps.iter().find_map(|(qpn, qp)| {
            let due = |at: Option<Instant>| at.is_some_and(|t| t <= now);
            (qp.state == state::RTS
                && !qp.req.outstanding.is_empty()
                && (due(qp.req.ack_deadline) || due(qp.req.rnr_until))
                && Some(qpn) != qpn_due)
                .then_some(qpn)
        });
        let Some(qpn) = next else {
            return sent;
        };
        qpn_due = Some(qpn);
        let Some(qp) = core.res.qps.get_mut(qpn) else {
            continue;
        };
        if qp.req.rnr_until.is_some_and(|t| t <= now) {
            qp.req.rnr_until = None;
        } else {
            if qp.req.retries_left == 0 {
                exhausted(core, qpn, CqeSyndrome::RetryExceeded);
                sent = true;
                continue;
            }
            qp.req.retries_left -= 1;
        }
        resend_outstanding(core, qpn);
        sent = true;
    }
}
