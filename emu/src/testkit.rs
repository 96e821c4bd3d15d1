//! A minimal hand-rolled host for driving the model without a driver: host memory mapped into
//! the model's IOMMU, a command queue with mailbox chains, and helpers that build commands, WQEs
//! and doorbells byte by byte through `cxdirect-hw` layouts. The model's own tests and fuzz
//! targets use it; it is deliberately not the driver, so those tests stand on their own reading
//! of the manual. Helpers panic on unexpected failures: this is test scaffolding.

use crate::dma::{Access, HostRegion};
use crate::pci;
use crate::Device;
use cxdirect_hw::cmd::{
    xor8, CmdLayout, CmdMailbox, CmdStatus, Opcode, CMD_TYPE_PCIE, MAILBOX_BLOCK_SIZE,
    MAILBOX_DATA_BYTES,
};
use cxdirect_hw::cq::{CreateCqIn, CreateCqOut};
use cxdirect_hw::doorbell::{
    CqArm, EqDoorbell, UAR_BF_OFFSET, UAR_CQ_DOORBELL, UAR_EQ_UPDATE_CI, UAR_EQ_UPDATE_CI_ARM,
    UAR_PAGE_SIZE,
};
use cxdirect_hw::eq::{CreateEqIn, CreateEqOut};
use cxdirect_hw::flow;
use cxdirect_hw::hca::{self, QueryPagesOut};
use cxdirect_hw::init_seg;
use cxdirect_hw::mkey::{
    mkey_from_index, CreateMkeyIn, CreateMkeyOut, MKC_ACCESS_MODE_MTT, MKC_ACCESS_MODE_PA,
};
use cxdirect_hw::reg::{AccessRegisterIn, PmtuReg, ACCESS_REG_OP_MOD_WRITE, REG_PMTU};
use cxdirect_hw::tir::{
    CreateRqtIn, CreateRqtOut, CreateTirIn, CreateTirOut, CreateTisIn, CreateTisOut,
    HASH_FIELD_SEL_DST_IP, HASH_FIELD_SEL_L4_DPORT, HASH_FIELD_SEL_L4_SPORT, HASH_FIELD_SEL_SRC_IP,
};
use cxdirect_hw::wq::{
    CreateRmpIn, CreateRmpOut, CreateRqIn, CreateRqOut, CreateSqIn, CreateSqOut, ModifyRqIn,
    ModifySqIn, WqType,
};
use cxdirect_hw::wqe::{CtrlSeg, DataSeg, EthSeg, SrqNextSeg};
use std::sync::Arc;

pub mod devx;
pub mod dr;
pub mod dr_receive;
pub mod flow_tables;
pub mod mpwqe;
pub mod pacing;
pub mod pattern;
pub mod plug;
pub mod poll;
pub mod port;
pub mod rc;
pub mod rc_pair;
pub mod signature;
pub mod signature_dv;
pub mod signature_pair;
pub mod ste;
pub mod sw_icm;
pub mod tunnel_frame;
pub mod ud;
pub mod umr;
pub mod window;

/// IOVA where the host memory is mapped.
pub const IOVA_BASE: u64 = 0x10_0000_0000;

/// A command that did not succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmdFail {
    /// Delivery status (bits 7:1 of status_own) was not OK.
    Delivery(u8),
    /// Delivered, but the command status was not OK.
    Status {
        /// Command status.
        status: u8,
        /// Syndrome.
        syndrome: u32,
    },
    /// The entry was still owned by the device afterwards.
    NoCompletion,
}

impl CmdFail {
    /// The failure a command the device refused with `status` and `syndrome` reads as.
    pub fn status(status: CmdStatus, syndrome: crate::Syndrome) -> Self {
        CmdFail::Status {
            status: status as u8,
            syndrome: syndrome as u32,
        }
    }
}

/// Asserts that `result` is a command the device refused with `status` and `syndrome`.
pub fn refused<T: std::fmt::Debug>(
    result: Result<T, CmdFail>,
    status: CmdStatus,
    syndrome: crate::Syndrome,
) {
    assert_eq!(
        result.expect_err("command must be refused"),
        CmdFail::status(status, syndrome)
    );
}

/// A completion queue created by [`Host::create_cq`].
pub struct Cq {
    /// Queue number.
    pub cqn: u32,
    /// IOVA of the ring buffer.
    pub buf: u64,
    /// IOVA of the doorbell record.
    pub dbr: u64,
    /// Log2 of the number of entries.
    pub log: u8,
    /// Consumer index.
    pub ci: u32,
}

/// One packet of an enhanced multi-packet WQE built by [`Host::build_multi_packet`].
#[derive(Debug, Clone, Copy)]
pub enum MultiPacket<'a> {
    /// Gathered by the device through a data segment.
    Pointer(&'a [u8]),
    /// Carried in the WQE in an inline segment.
    Inline(&'a [u8]),
}

/// A send queue created by [`Host::create_sq`] (already in RDY).
pub struct Sq {
    /// Queue number.
    pub sqn: u32,
    /// IOVA of the ring buffer.
    pub buf: u64,
    /// IOVA of the doorbell record.
    pub dbr: u64,
    /// Log2 of the number of WQEBBs.
    pub log: u8,
    /// Producer index in WQEBBs.
    pub pi: u16,
    /// Which BlueFlame half comes next.
    pub bf_toggle: bool,
}

/// What a test SQ is created with besides its CQ, TIS and size (`sqc` fields).
#[derive(Debug, Clone, Copy, Default)]
struct SqOptions {
    /// `allow_multi_pkt_send_wqe`.
    multi_packet: bool,
    /// `qos_queue_group_id`.
    group: u16,
    /// `reg_umr`.
    reg_umr: bool,
    /// `flush_in_error_en`.
    flush_in_error: bool,
}

/// A receive queue (or RMP ring) made by [`Host::create_rq`] or [`Host::create_rmp`].
pub struct Rq {
    /// Queue number (the RMP number for an RMP ring).
    pub rqn: u32,
    /// IOVA of the ring buffer.
    pub buf: u64,
    /// IOVA of the doorbell record.
    pub dbr: u64,
    /// Log2 of the number of WQEs.
    pub log: u8,
    /// Producer index in WQEs.
    pub pi: u16,
}

/// The test host: one modelled function, its host memory and the objects made so far.
pub struct Host {
    /// The modelled function.
    pub dev: Device,
    /// Host memory, mapped at [`IOVA_BASE`].
    pub mem: Arc<HostRegion>,
    next: u64,
    /// IOVA of the command queue page.
    pub cmdq: u64,
    token: u8,
    /// The UAR page index.
    pub uar: u32,
    /// Protection domain.
    pub pd: u32,
    /// Transport domain.
    pub td: u32,
    /// The async EQ.
    pub eqn: u32,
    /// IOVA of the async EQ buffer.
    pub eq_buf: u64,
    /// Log2 of the async EQ size.
    pub eq_log: u8,
    /// Async EQ consumer index.
    pub eq_ci: u32,
    /// Firmware pages given and not yet taken back.
    pub pages: Vec<u64>,
    /// Sign command entries and mailboxes (needed once `cmdif_checksum` is on).
    pub sign: bool,
    /// At bring-up, ask requesters to write atomic results in host order, as Linux's
    /// mlx5_core does (`handle_hca_cap_atomic`); off: network order, the device's default.
    pub atomic_host_order: bool,
    /// The `user_index` the next QP the test kit creates gets (then counts up), as libmlx5
    /// gives each QP an index of its resource table that every CQE of the QP echoes.
    pub next_user_index: u32,
    /// The events the async EQ made at bring-up takes (every type by default; Linux's
    /// mlx5_core leaves page faults to an EQ of their own).
    pub async_event_mask: u64,
}

impl Host {
    /// A function with RoCE on, alone on a loopback cable, with `mem_size` bytes of host
    /// memory, brought up.
    pub fn roce_loopback(mem_size: usize) -> Self {
        let cfg = crate::EmuConfig {
            roce: true,
            ..crate::EmuConfig::default()
        };
        let mut h = Self::new(Device::loopback(cfg), mem_size);
        h.bring_up();
        h
    }

    /// Maps `mem_size` bytes of host memory and enables memory decoding, bus mastering and MSI-X.
    pub fn new(dev: Device, mem_size: usize) -> Self {
        let mem = HostRegion::new(mem_size).expect("host memory");
        dev.iommu()
            .map_region(IOVA_BASE, mem.clone(), Access::ReadWrite)
            .expect("map");
        let command = pci::COMMAND_MEMORY_SPACE | pci::COMMAND_BUS_MASTER;
        dev.config_write(pci::REG_COMMAND, &command.to_le_bytes())
            .expect("command register");
        let msix_ctrl = pci::MSIX_CAP_OFFSET + pci::MSIX_MSG_CTRL;
        dev.config_write(msix_ctrl, &pci::MSIX_CTRL_ENABLE.to_le_bytes())
            .expect("MSI-X enable");
        let mut host = Self {
            dev,
            mem,
            next: 0,
            cmdq: 0,
            token: 0,
            uar: 0,
            pd: 0,
            td: 0,
            eqn: 0,
            eq_buf: 0,
            eq_log: 0,
            eq_ci: 0,
            pages: Vec::new(),
            sign: false,
            atomic_host_order: false,
            next_user_index: 0x10_0000,
            async_event_mask: !0,
        };
        host.cmdq = host.alloc(4096, 4096);
        host
    }

    /// Bump-allocates zeroed host memory; returns its IOVA.
    pub fn alloc(&mut self, len: u64, align: u64) -> u64 {
        let start = (self.next + align - 1) & !(align - 1);
        self.next = start + len;
        assert!(
            self.next <= self.mem.len() as u64,
            "test host memory exhausted"
        );
        IOVA_BASE + start
    }

    /// Copies bytes into host memory at `iova`.
    pub fn write(&self, iova: u64, data: &[u8]) {
        self.mem
            .write((iova - IOVA_BASE) as usize, data)
            .expect("host write");
    }

    /// Copies `len` bytes of host memory at `iova`.
    pub fn read(&self, iova: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        self.mem
            .read((iova - IOVA_BASE) as usize, &mut buf)
            .expect("host read");
        buf
    }

    /// Reads a big-endian word of host memory.
    pub fn read_be32(&self, iova: u64) -> u32 {
        let b = self.read(iova, 4);
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Writes a big-endian word of host memory.
    pub fn write_be32(&self, iova: u64, value: u32) {
        self.write(iova, &value.to_be_bytes());
    }

    /// A 32-bit MMIO write of a big-endian register value.
    pub fn mmio_w32(&self, offset: u64, value: u32) {
        self.dev
            .mmio_write(offset, &value.to_be_bytes())
            .expect("mmio write");
    }

    /// A 32-bit MMIO read of a big-endian register.
    pub fn mmio_r32(&self, offset: u64) -> u32 {
        let mut b = [0u8; 4];
        self.dev.mmio_read(offset, &mut b).expect("mmio read");
        u32::from_be_bytes(b)
    }

    /// Waits for `initializing` to clear (at most one second) and programs the command queue.
    pub fn start_cmdif(&self) {
        for _ in 0..1000 {
            if self.mmio_r32(init_seg::INITIALIZING as u64) >> 31 == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(
            self.mmio_r32(init_seg::INITIALIZING as u64) >> 31,
            0,
            "firmware still initializing"
        );
        self.mmio_w32(init_seg::CMDQ_ADDR_H as u64, (self.cmdq >> 32) as u32);
        self.mmio_w32(init_seg::CMDQ_ADDR_L_SZ as u64, self.cmdq as u32);
    }

    /// Posts `input` on slot 0 with an output of `outlen` bytes and waits for completion.
    pub fn exec(&mut self, input: &[u8], outlen: usize) -> Result<Vec<u8>, CmdFail> {
        self.exec_with(input, outlen, |_| {})
    }

    /// As [`Host::exec`], but `tamper` may rewrite the input mailbox chain (IOVAs of the
    /// blocks) before the doorbell, to test delivery checks.
    pub fn exec_with(
        &mut self,
        input: &[u8],
        outlen: usize,
        tamper: impl FnOnce(&[u64]),
    ) -> Result<Vec<u8>, CmdFail> {
        self.token = self.token.wrapping_add(1).max(1);
        let token = self.token;
        let in_blocks = self.chain(input.len().saturating_sub(16), token);
        for (i, &block) in in_blocks.iter().enumerate() {
            let start = 16 + i * MAILBOX_DATA_BYTES;
            let end = input.len().min(start + MAILBOX_DATA_BYTES);
            self.write(block, &input[start..end]);
        }
        let out_blocks = self.chain(outlen.saturating_sub(16), token);
        if self.sign {
            for &block in &in_blocks {
                self.sign_block(block);
            }
        }
        tamper(&in_blocks);
        let mut entry = CmdLayout::zeroed();
        entry
            .set_kind(CMD_TYPE_PCIE)
            .set_inlen(input.len() as u32)
            .set_in_ptr(in_blocks.first().copied().unwrap_or(0))
            .set_out_ptr(out_blocks.first().copied().unwrap_or(0))
            .set_outlen(outlen as u32)
            .set_token(token)
            .set_status_own(1);
        entry.set_inline_input(&input[..input.len().min(16)]);
        if self.sign {
            let sig = !xor8(entry.as_bytes());
            entry.set_sig(sig);
        }
        self.write(self.cmdq, entry.as_bytes());
        self.mmio_w32(init_seg::CMD_DBELL as u64, 1);
        let back = self.read(self.cmdq, 64);
        let entry = CmdLayout::new(&back[..]).expect("entry");
        if entry.owned_by_hw() {
            return Err(CmdFail::NoCompletion);
        }
        if entry.delivery_status_raw() != 0 {
            return Err(CmdFail::Delivery(entry.delivery_status_raw()));
        }
        let mut out = vec![0u8; outlen];
        let inline = outlen.min(16);
        out[..inline].copy_from_slice(&entry.inline_output()[..inline]);
        for (i, &block) in out_blocks.iter().enumerate() {
            let start = 16 + i * MAILBOX_DATA_BYTES;
            let end = outlen.min(start + MAILBOX_DATA_BYTES);
            let data = self.read(block, end - start);
            out[start..end].copy_from_slice(&data);
        }
        let status = out[0];
        let syndrome = u32::from_be_bytes([out[4], out[5], out[6], out[7]]);
        if status != 0 {
            return Err(CmdFail::Status { status, syndrome });
        }
        Ok(out)
    }

    /// Allocates and links a mailbox chain for `len` data bytes.
    fn chain(&mut self, len: usize, token: u8) -> Vec<u64> {
        let blocks = len.div_ceil(MAILBOX_DATA_BYTES);
        let addrs: Vec<u64> = (0..blocks).map(|_| self.alloc(1024, 1024)).collect();
        for (i, &addr) in addrs.iter().enumerate() {
            let mut block = CmdMailbox::zeroed();
            block
                .set_block_num(i as u32)
                .set_token(token)
                .set_next(addrs.get(i + 1).copied().unwrap_or(0));
            self.write(addr, block.as_bytes());
        }
        addrs
    }

    /// Signs a mailbox block in place: control signature over the control fields, then the
    /// block signature over everything but itself (each makes its range XOR to 0xff).
    fn sign_block(&self, addr: u64) {
        let mut block = CmdMailbox::zeroed();
        block
            .as_bytes_mut()
            .copy_from_slice(&self.read(addr, MAILBOX_BLOCK_SIZE));
        block.set_ctrl_sig(0).set_sig(0);
        let ctrl = !xor8(&block.as_bytes()[MAILBOX_DATA_BYTES..MAILBOX_BLOCK_SIZE - 2]);
        block.set_ctrl_sig(ctrl);
        let sig = !xor8(&block.as_bytes()[..MAILBOX_BLOCK_SIZE - 1]);
        block.set_sig(sig);
        self.write(addr, block.as_bytes());
    }

    /// A work queue's ring of `ring_bytes` (page-aligned), its doorbell record, the ring's page
    /// count, and the create command `opcode`'s input with room for that many page addresses.
    fn ring_input(&mut self, opcode: Opcode, ring_bytes: u64) -> (u64, u64, usize, Vec<u8>) {
        let buf = self.alloc(ring_bytes, 4096);
        let dbr = self.alloc(8, 64);
        let pages = ring_bytes.div_ceil(4096) as usize;
        (buf, dbr, pages, Self::input(opcode, 0, 0x110 + 8 * pages))
    }

    /// A command input of `size` bytes with the opcode (and op_mod) set.
    pub fn input(opcode: Opcode, op_mod: u16, size: usize) -> Vec<u8> {
        let mut buf = vec![0u8; size];
        buf[0..2].copy_from_slice(&(opcode as u16).to_be_bytes());
        buf[6..8].copy_from_slice(&op_mod.to_be_bytes());
        buf
    }

    /// A command with a 16-byte input and output.
    pub fn simple(&mut self, opcode: Opcode, op_mod: u16) -> Result<Vec<u8>, CmdFail> {
        self.exec(&Self::input(opcode, op_mod, 16), 16)
    }

    /// QUERY_PAGES with `op_mod`; the signed count.
    pub fn query_pages(&mut self, op_mod: u16) -> i32 {
        let out = self
            .exec(&Self::input(Opcode::QueryPages, op_mod, 16), 16)
            .expect("QUERY_PAGES");
        QueryPagesOut::new(&out[..])
            .expect("layout")
            .num_pages_signed()
    }

    /// Gives `n` fresh pages.
    pub fn give_pages(&mut self, n: usize) -> Result<(), CmdFail> {
        let pages: Vec<u64> = (0..n).map(|_| self.alloc(4096, 4096)).collect();
        self.give_these(&pages)?;
        self.pages.extend(pages);
        Ok(())
    }

    /// Gives these pages.
    pub fn give_these(&mut self, pages: &[u64]) -> Result<(), CmdFail> {
        let mut input = Self::input(
            Opcode::ManagePages,
            hca::manage_pages_op_mod::GIVE,
            16 + 8 * pages.len(),
        );
        let mut cmd = hca::ManagePagesIn::new(&mut input[..]).expect("layout");
        cmd.set_input_num_entries(pages.len() as u32);
        for (i, &p) in pages.iter().enumerate() {
            cmd.set_pas(i, p).expect("room");
        }
        self.exec(&input, 16).map(|_| ())
    }

    /// Takes back up to `n` pages; returns how many came back.
    pub fn take_pages(&mut self, n: usize) -> usize {
        let mut input = Self::input(Opcode::ManagePages, hca::manage_pages_op_mod::TAKE, 16);
        hca::ManagePagesIn::new(&mut input[..])
            .expect("layout")
            .set_input_num_entries(n as u32);
        let out = self.exec(&input, 16 + 8 * n).expect("MANAGE_PAGES take");
        let out = hca::ManagePagesOut::new(&out[..]).expect("layout");
        let got = out.output_num_entries() as usize;
        for i in 0..got {
            let page = out.pas(i).expect("entry");
            self.pages.retain(|&p| p != page);
        }
        got
    }

    /// ENABLE_HCA through INIT_HCA, then UAR, PD, TD and an async EQ subscribed to every event.
    pub fn bring_up(&mut self) {
        self.start_cmdif();
        self.simple(Opcode::EnableHca, 0).expect("ENABLE_HCA");
        let mut set_issi = Self::input(Opcode::SetIssi, 0, 16);
        hca::SetIssiIn::new(&mut set_issi[..])
            .expect("layout")
            .set_current_issi(1);
        self.exec(&set_issi, 16).expect("SET_ISSI");
        let boot = self.query_pages(hca::query_pages_op_mod::BOOT);
        self.give_pages(boot as usize).expect("boot pages");
        let caps = self.query_cap(hca::cap_type::GENERAL_DEVICE, true);
        let mut set = Self::input(Opcode::SetHcaCap, 0, 0x1010);
        set[0x10..0x110].copy_from_slice(&caps[0x10..0x110]);
        self.exec(&set, 16).expect("SET_HCA_CAP");
        if self.atomic_host_order {
            let mut set = Self::input(
                Opcode::SetHcaCap,
                hca::set_cap_op_mod(hca::cap_type::ATOMIC),
                0x1010,
            );
            cxdirect_hw::caps::AtomicCaps::new(&mut set[0x10..0x110])
                .expect("layout")
                .set_atomic_req_8b_endianness_mode(cxdirect_hw::caps::atomic_endianness::HOST);
            self.exec(&set, 16).expect("SET_HCA_CAP (atomic)");
        }
        let init = self.query_pages(hca::query_pages_op_mod::INIT);
        self.give_pages(init as usize).expect("init pages");
        self.simple(Opcode::InitHca, 0).expect("INIT_HCA");
        let out = self.simple(Opcode::AllocUar, 0).expect("ALLOC_UAR");
        self.uar = hca::AllocUarOut::new(&out[..]).expect("layout").uar();
        self.pd = self.alloc_pd();
        let out = self
            .simple(Opcode::AllocTransportDomain, 0)
            .expect("ALLOC_TRANSPORT_DOMAIN");
        self.td = hca::AllocTransportDomainOut::new(&out[..])
            .expect("layout")
            .transport_domain();
        self.create_async_eq(6, self.async_event_mask);
    }

    /// ALLOC_PD: a new protection domain's number (the host's own is [`Host::pd`]).
    pub fn alloc_pd(&mut self) -> u32 {
        let out = self.simple(Opcode::AllocPd, 0).expect("ALLOC_PD");
        hca::AllocPdOut::new(&out[..]).expect("layout").pd()
    }

    /// Creates the async EQ (vector 0) subscribed to the events in `mask`, and arms it.
    pub fn create_async_eq(&mut self, log: u8, mask: u64) {
        let buf = self.alloc(64 << log, 4096);
        for i in 0..(1u64 << log) {
            self.write(buf + i * 64 + 63, &[1]);
        }
        let mut input = Self::input(Opcode::CreateEq, 0, 0x110 + 8);
        let mut cmd = CreateEqIn::new(&mut input[..]).expect("layout");
        cmd.set_event_bitmask(mask);
        let log_page = ((64u64 << log).max(4096).trailing_zeros() - 12) as u8;
        cmd.eq_context_entry_mut()
            .set_log_eq_size(log)
            .set_uar_page(self.uar)
            .set_intr(0)
            .set_log_page_size(log_page);
        cmd.set_pas(0, buf).expect("room");
        let out = self.exec(&input, 16).expect("CREATE_EQ");
        self.eqn = u32::from(CreateEqOut::new(&out[..]).expect("layout").eq_number());
        self.eq_buf = buf;
        self.eq_log = log;
        self.eq_ci = 0;
        self.arm_eq();
    }

    /// BAR0 offset of the UAR page.
    pub fn uar_base(&self) -> u64 {
        u64::from(self.uar) * UAR_PAGE_SIZE as u64
    }

    /// Reports the async EQ consumer index and arms it.
    pub fn arm_eq(&self) {
        let db = EqDoorbell::new()
            .with_eqn(self.eqn as u8)
            .with_ci(self.eq_ci & 0xff_ffff);
        self.mmio_w32(
            self.uar_base() + UAR_EQ_UPDATE_CI_ARM as u64,
            db.into_bits(),
        );
    }

    /// Takes every new EQE: (type, sub type, the 28 data bytes).
    pub fn drain_eq(&mut self) -> Vec<(u8, u8, Vec<u8>)> {
        let mut events = Vec::new();
        loop {
            let slot = self.eq_ci & ((1 << self.eq_log) - 1);
            let eqe = self.read(self.eq_buf + u64::from(slot) * 64, 64);
            let owner = u32::from(eqe[63] & 1);
            if owner != (self.eq_ci >> self.eq_log) & 1 {
                break;
            }
            events.push((eqe[1], eqe[3], eqe[0x20..0x3c].to_vec()));
            self.eq_ci += 1;
        }
        // Tell the device the entries are free again (without re-arming).
        let db = EqDoorbell::new()
            .with_eqn(self.eqn as u8)
            .with_ci(self.eq_ci & 0xff_ffff);
        self.mmio_w32(self.uar_base() + UAR_EQ_UPDATE_CI as u64, db.into_bits());
        events
    }

    /// Sets the port MTU (PMTU admin_mtu, bytes including L2 header and FCS).
    pub fn set_port_mtu(&mut self, mtu: u16) {
        let mut input = Self::input(Opcode::AccessReg, ACCESS_REG_OP_MOD_WRITE, 0x10 + 0x10);
        AccessRegisterIn::new(&mut input[..])
            .expect("layout")
            .set_register_id(REG_PMTU);
        PmtuReg::new(&mut input[0x10..])
            .expect("layout")
            .set_local_port(1)
            .set_admin_mtu(mtu);
        self.exec(&input, 0x20).expect("ACCESS_REG PMTU");
    }

    /// TEARDOWN_HCA, takes every page back, DISABLE_HCA.
    pub fn teardown(&mut self) {
        self.simple(Opcode::TeardownHca, 0).expect("TEARDOWN_HCA");
        let held = self.pages.len();
        let got = self.take_pages(held);
        assert_eq!(got, held, "every page comes back after teardown");
        self.simple(Opcode::DisableHca, 0).expect("DISABLE_HCA");
    }

    /// A memory key covering all host memory: PA mode (IOVA = key address) or MTT mode.
    pub fn create_mkey(&mut self, mtt: bool, write: bool) -> u32 {
        let len = self.mem.len() as u64;
        let pages = (len / 4096) as usize;
        let entries = if mtt { pages } else { 0 };
        let mut input = Self::input(Opcode::CreateMkey, 0, 0x110 + 8 * entries);
        let mut cmd = CreateMkeyIn::new(&mut input[..]).expect("layout");
        cmd.set_translations_octword_actual_size(entries.div_ceil(2) as u32);
        {
            let mut mkc = cmd.memory_key_mkey_entry_mut();
            mkc.set_access_mode(if mtt {
                MKC_ACCESS_MODE_MTT
            } else {
                MKC_ACCESS_MODE_PA
            })
            .set_lr(true)
            .set_lw(write)
            .set_pd(self.pd)
            .set_qpn(0xff_ffff)
            .set_mkey_7_0(0x42)
            .set_start_addr(IOVA_BASE)
            .set_len(len)
            .set_log_page_size(12)
            .set_translations_octword_size(entries.div_ceil(2) as u32);
        }
        for i in 0..entries {
            cmd.set_mtt(i, (IOVA_BASE + i as u64 * 4096) | 3)
                .expect("room");
        }
        let out = self.exec(&input, 16).expect("CREATE_MKEY");
        let index = CreateMkeyOut::new(&out[..]).expect("layout").mkey_index();
        mkey_from_index(index, 0x42)
    }

    /// Creates a CQ of `2^log` entries on the async EQ.
    pub fn create_cq(&mut self, log: u8) -> Cq {
        self.try_create_cq(log, None).expect("CREATE_CQ")
    }

    /// Creates a CQ of `2^log` entries on the async EQ, with CQE compression in mini-CQE
    /// `format` (`mini_cqe_res_format`) when given.
    pub fn try_create_cq(&mut self, log: u8, compression: Option<u8>) -> Result<Cq, CmdFail> {
        let buf = self.alloc(64 << log, 4096);
        for i in 0..(1u64 << log) {
            self.write(buf + i * 64 + 63, &[0xf1]);
        }
        let dbr = self.alloc(8, 64);
        let pages = (64u64 << log).div_ceil(4096) as usize;
        let mut input = Self::input(Opcode::CreateCq, 0, 0x110 + 8 * pages);
        let mut cmd = CreateCqIn::new(&mut input[..]).expect("layout");
        cmd.cq_context_mut()
            .set_log_cq_size(log)
            .set_uar_page(self.uar)
            .set_c_eqn(self.eqn as u8)
            .set_dbr_addr(dbr)
            .set_cqe_comp_en(compression.is_some())
            .set_mini_cqe_res_format(compression.unwrap_or(0));
        for i in 0..pages {
            cmd.set_pas(i, buf + i as u64 * 4096).expect("room");
        }
        let out = self.exec(&input, 16)?;
        Ok(Cq {
            cqn: CreateCqOut::new(&out[..]).expect("layout").cqn(),
            buf,
            dbr,
            log,
            ci: 0,
        })
    }

    /// The raw 64 bytes of CQ slot `slot` (no ownership check, nothing consumed).
    pub fn cq_slot(&self, cq: &Cq, slot: u32) -> Vec<u8> {
        let slot = slot & ((1 << cq.log) - 1);
        self.read(cq.buf + u64::from(slot) * 64, 64)
    }

    /// The next CQE software owns, consuming it and updating the doorbell record.
    pub fn poll_cq(&self, cq: &mut Cq) -> Option<Vec<u8>> {
        let slot = cq.ci & ((1 << cq.log) - 1);
        let cqe = self.read(cq.buf + u64::from(slot) * 64, 64);
        if !cxdirect_hw::cqe::sw_owns(cqe[63], cq.ci, cq.log) {
            return None;
        }
        cq.ci += 1;
        self.write_be32(cq.dbr, cq.ci & 0xff_ffff);
        Some(cqe)
    }

    /// Arms a CQ for the next completion.
    pub fn arm_cq(&self, cq: &Cq) {
        let arm = CqArm::new().with_ci(cq.ci & 0xff_ffff);
        let value = arm.doorbell(cq.cqn);
        self.write_be32(cq.dbr + 4, arm.into_bits());
        self.dev
            .mmio_write(
                self.uar_base() + UAR_CQ_DOORBELL as u64,
                &value.to_be_bytes(),
            )
            .expect("mmio");
    }

    /// Creates a TIS in the transport domain.
    pub fn create_tis(&mut self) -> u32 {
        self.create_tis_in(self.td)
    }

    /// Creates a TIS in transport domain `td`.
    pub fn create_tis_in(&mut self, td: u32) -> u32 {
        let mut input = Self::input(Opcode::CreateTis, 0, 0xc0);
        CreateTisIn::new(&mut input[..])
            .expect("layout")
            .ctx_mut()
            .set_transport_domain(td);
        let out = self.exec(&input, 16).expect("CREATE_TIS");
        CreateTisOut::new(&out[..]).expect("layout").tisn()
    }

    /// Allocates another transport domain (as each mlx5_ib user context does) and returns it.
    pub fn alloc_transport_domain(&mut self) -> u32 {
        let out = self
            .simple(Opcode::AllocTransportDomain, 0)
            .expect("ALLOC_TRANSPORT_DOMAIN");
        hca::AllocTransportDomainOut::new(&out[..])
            .expect("layout")
            .transport_domain()
    }

    /// `mlx5_nic_vport_update_local_lb(mdev, enable)`: MODIFY_NIC_VPORT_CONTEXT writing
    /// `disable_uc_local_lb` and `disable_mc_local_lb` = `!enable`.
    pub fn update_local_lb(&mut self, enable: bool) {
        let mut input = Self::input(Opcode::ModifyNicVportContext, 0, 0x200);
        let mut cmd =
            cxdirect_hw::vport::ModifyNicVportContextIn::new(&mut input[..]).expect("layout");
        cmd.field_select_mut()
            .set_disable_uc_local_lb(true)
            .set_disable_mc_local_lb(true);
        cmd.nic_vport_context_mut()
            .set_disable_uc_local_lb(!enable)
            .set_disable_mc_local_lb(!enable);
        self.exec(&input, 16)
            .expect("MODIFY_NIC_VPORT_CONTEXT local_lb");
    }

    /// Creates an SQ of `2^log` WQEBBs on CQ `cqn` and TIS `tisn`, and moves it to RDY.
    pub fn create_sq(&mut self, cqn: u32, tisn: u32, log: u8) -> Sq {
        self.try_create_sq(cqn, tisn, log, false)
            .expect("CREATE_SQ")
    }

    /// Creates an SQ of `2^log` WQEBBs on CQ `cqn` and TIS `tisn`, allowing enhanced
    /// multi-packet WQEs when `multi_packet`, and moves it to RDY.
    pub fn try_create_sq(
        &mut self,
        cqn: u32,
        tisn: u32,
        log: u8,
        multi_packet: bool,
    ) -> Result<Sq, CmdFail> {
        self.create_sq_of(
            cqn,
            Some(tisn),
            log,
            SqOptions {
                multi_packet,
                ..SqOptions::default()
            },
        )
    }

    /// Creates an SQ of `2^log` WQEBBs on CQ `cqn` and TIS `tisn` with `flush_in_error_en`, as
    /// Linux's and DPDK's drivers create theirs, and moves it to RDY.
    pub fn create_flushing_sq(&mut self, cqn: u32, tisn: u32, log: u8) -> Sq {
        self.create_sq_of(
            cqn,
            Some(tisn),
            log,
            SqOptions {
                flush_in_error: true,
                ..SqOptions::default()
            },
        )
        .expect("CREATE_SQ")
    }

    /// Creates an SQ of `2^log` WQEBBs on CQ `cqn` and TIS `tisn` in NIC queue group `group`
    /// (`qos_queue_group_id`, as mlx5e opens an HTB leaf's SQ), and moves it to RDY;
    /// returns its number.
    pub fn try_create_sq_in_group(
        &mut self,
        cqn: u32,
        tisn: u32,
        log: u8,
        group: u32,
    ) -> Result<u32, CmdFail> {
        let group = u16::try_from(group).unwrap_or(u16::MAX);
        self.create_sq_of(
            cqn,
            Some(tisn),
            log,
            SqOptions {
                group,
                ..SqOptions::default()
            },
        )
        .map(|sq| sq.sqn)
    }

    /// CREATE_SQ of `2^log` WQEBBs on CQ `cqn` through TIS `tisn` (none: no TIS, as mlx5e's
    /// ICOSQ), then RDY.
    fn create_sq_of(
        &mut self,
        cqn: u32,
        tisn: Option<u32>,
        log: u8,
        options: SqOptions,
    ) -> Result<Sq, CmdFail> {
        let SqOptions {
            multi_packet,
            group,
            reg_umr,
            flush_in_error,
        } = options;
        let (buf, dbr, pages, mut input) = self.ring_input(Opcode::CreateSq, 64 << log);
        let mut cmd = CreateSqIn::new(&mut input[..]).expect("layout");
        {
            let mut ctx = cmd.ctx_mut();
            ctx.set_cqn(cqn)
                .set_tis_num_0(tisn.unwrap_or(0))
                .set_tis_lst_sz(u16::from(tisn.is_some()))
                .set_qos_queue_group_id(group)
                .set_allow_multi_pkt_send_wqe(multi_packet)
                .set_reg_umr(reg_umr)
                .set_flush_in_error_en(flush_in_error);
            ctx.wq_mut()
                .set_wq_type(1)
                .set_pd(self.pd)
                .set_uar_page(self.uar)
                .set_dbr_addr(dbr)
                .set_log_wq_stride(6)
                .set_log_wq_sz(log);
        }
        for i in 0..pages {
            cmd.set_pas(i, buf + i as u64 * 4096).expect("room");
        }
        let out = self.exec(&input, 16)?;
        let sqn = CreateSqOut::new(&out[..]).expect("layout").sqn();
        let mut modify = Self::input(Opcode::ModifySq, 0, 0x110);
        let mut m = ModifySqIn::new(&mut modify[..]).expect("layout");
        m.set_sq_state(0).set_sqn(sqn);
        m.ctx_mut().set_state(1);
        self.exec(&modify, 16).expect("MODIFY_SQ RST->RDY");
        Ok(Sq {
            sqn,
            buf,
            dbr,
            log,
            pi: 0,
            bf_toggle: false,
        })
    }

    /// Builds an enhanced multi-packet WQE at the SQ's producer index carrying `packets` (each
    /// by pointer, its bytes written to host memory, or inline), with checksum offload asked
    /// for when `checksums`; returns the WQE bytes (whole basic blocks).
    pub fn build_multi_packet(
        &mut self,
        sq: &Sq,
        packets: &[MultiPacket<'_>],
        lkey: u32,
        checksums: bool,
    ) -> Vec<u8> {
        let mut segments = Vec::new();
        for packet in packets {
            match *packet {
                MultiPacket::Pointer(bytes) => {
                    let iova = self.alloc(bytes.len() as u64, 64);
                    self.write(iova, bytes);
                    let mut seg = [0u8; 16];
                    DataSeg::new(&mut seg[..])
                        .expect("layout")
                        .set_byte_count(bytes.len() as u32)
                        .set_lkey(lkey)
                        .set_addr(iova);
                    segments.extend_from_slice(&seg);
                }
                MultiPacket::Inline(bytes) => {
                    let start = segments.len();
                    segments.extend_from_slice(
                        &(cxdirect_hw::wqe::INLINE_SEG | bytes.len() as u32).to_be_bytes(),
                    );
                    segments.extend_from_slice(bytes);
                    segments.resize(start + (4 + bytes.len()).div_ceil(16) * 16, 0);
                }
            }
        }
        let ds = 2 + segments.len() / 16;
        let mut wqe = vec![0u8; ds.div_ceil(4) * 64];
        CtrlSeg::new(&mut wqe[..16])
            .expect("layout")
            .set_opcode(cxdirect_hw::wqe::opcode::ENHANCED_MPSW)
            .set_wqe_index(sq.pi)
            .set_qpn_or_sqn(sq.sqn)
            .set_ds(ds as u8)
            .set_ce(2);
        EthSeg::new(&mut wqe[16..32])
            .expect("layout")
            .set_l3_csum(checksums)
            .set_l4_csum(checksums);
        wqe[32..32 + segments.len()].copy_from_slice(&segments);
        wqe
    }

    /// Builds a SEND WQE at the SQ's producer index: up to 18 bytes of headers inline, the rest
    /// by a data segment pointing at `payload_iova` through `lkey`; returns the WQE bytes.
    pub fn build_send(
        &self,
        sq: &Sq,
        frame: &[u8],
        payload_iova: u64,
        lkey: u32,
        completion: bool,
    ) -> Vec<u8> {
        let inline = frame.len().min(18);
        let rest = frame.len() - inline;
        let inline_tail = inline.saturating_sub(2);
        let ds = 2 + inline_tail.div_ceil(16) + usize::from(rest > 0);
        let mut wqe = vec![0u8; ds.div_ceil(4) * 64];
        CtrlSeg::new(&mut wqe[..16])
            .expect("layout")
            .set_opcode(cxdirect_hw::wqe::opcode::SEND)
            .set_wqe_index(sq.pi)
            .set_qpn_or_sqn(sq.sqn)
            .set_ds(ds as u8)
            .set_ce(if completion { 2 } else { 0 });
        EthSeg::new(&mut wqe[16..32])
            .expect("layout")
            .set_inline_hdr_sz(inline as u16);
        wqe[30..30 + inline.min(2)].copy_from_slice(&frame[..inline.min(2)]);
        wqe[32..32 + inline_tail].copy_from_slice(&frame[2..inline]);
        if rest > 0 {
            let at = 32 + inline_tail.div_ceil(16) * 16;
            self.write(payload_iova, &frame[inline..]);
            DataSeg::new(&mut wqe[at..at + 16])
                .expect("layout")
                .set_byte_count(rest as u32)
                .set_lkey(lkey)
                .set_addr(payload_iova);
        }
        wqe
    }

    /// Writes a WQE into the ring (wrapping basic block by basic block), bumps the producer
    /// index and the doorbell record, and rings the doorbell (as BlueFlame when `blueflame`).
    pub fn post(&self, sq: &mut Sq, wqe: &[u8], blueflame: bool) {
        self.write_wqe(sq, wqe);
        self.ring(sq, wqe, blueflame);
    }

    /// Writes a WQE into the ring (wrapping basic block by basic block) and bumps the producer
    /// index, without telling the device: [`Host::ring`] does, for every WQE written so far.
    pub fn write_wqe(&self, sq: &mut Sq, wqe: &[u8]) {
        let bbs = wqe.len() / 64;
        for i in 0..bbs {
            let slot = u64::from(sq.pi.wrapping_add(i as u16)) & ((1 << sq.log) - 1);
            self.write(sq.buf + slot * 64, &wqe[i * 64..(i + 1) * 64]);
        }
        sq.pi = sq.pi.wrapping_add(bbs as u16);
    }

    /// Updates the doorbell record to the producer index and rings the doorbell announcing
    /// `last`, the last WQE written (as BlueFlame when `blueflame`).
    pub fn ring(&self, sq: &mut Sq, last: &[u8], blueflame: bool) {
        self.write_be32(sq.dbr + 4, u32::from(sq.pi));
        let reg = self.uar_base() + UAR_BF_OFFSET as u64 + if sq.bf_toggle { 256 } else { 0 };
        sq.bf_toggle = !sq.bf_toggle;
        let bytes = if blueflame { &last[..64] } else { &last[..8] };
        self.dev.mmio_write(reg, bytes).expect("doorbell");
    }

    /// Creates an RQ (own ring of `2^log` one-segment WQEs, or drawing from RMP `rmpn`) and
    /// moves it to RDY.
    pub fn create_rq(&mut self, cqn: u32, log: u8, rmpn: Option<u32>) -> Rq {
        let buf = self.alloc(16 << log, 4096);
        let dbr = self.alloc(8, 64);
        let pages = if rmpn.is_some() {
            0
        } else {
            (16u64 << log).div_ceil(4096) as usize
        };
        let mut input = Self::input(Opcode::CreateRq, 0, 0x110 + 8 * pages);
        let mut cmd = CreateRqIn::new(&mut input[..]).expect("layout");
        {
            let mut ctx = cmd.ctx_mut();
            // Frames kept whole (`vsd`), as DPDK's default; a test of stripping clears it.
            ctx.set_cqn(cqn).set_flush_in_error_en(true).set_vsd(true);
            match rmpn {
                Some(rmpn) => {
                    ctx.set_mem_rq_type(1).set_rmpn(rmpn);
                }
                None => {
                    ctx.wq_mut()
                        .set_wq_type(1)
                        .set_pd(self.pd)
                        .set_dbr_addr(dbr)
                        .set_log_wq_stride(4)
                        .set_log_wq_sz(log);
                }
            }
        }
        self.submit_rq(input, pages, buf, dbr, log)
            .expect("CREATE_RQ, then MODIFY_RQ RST->RDY")
    }

    /// Creates a striding RQ (own ring of `2^log` WQEs of 32 bytes: a reserved header and one
    /// data segment) whose WQEs have `2^(9 + log_strides)` strides of `2^(6 + log_stride)`
    /// bytes (the raw context fields), and moves it to RDY.
    pub fn try_create_striding_rq(
        &mut self,
        cqn: u32,
        log: u8,
        log_strides: u8,
        log_stride: u8,
        two_byte_shift: bool,
    ) -> Result<Rq, CmdFail> {
        let (buf, dbr, pages, mut input) = self.ring_input(Opcode::CreateRq, 32 << log);
        let mut cmd = CreateRqIn::new(&mut input[..]).expect("layout");
        {
            let mut ctx = cmd.ctx_mut();
            // Frames kept whole (`vsd`), as DPDK's default; a test of stripping clears it.
            ctx.set_cqn(cqn).set_flush_in_error_en(true).set_vsd(true);
            ctx.wq_mut()
                .set_wq_type(cxdirect_hw::wq::WqType::StridingCyclic as u8)
                .set_pd(self.pd)
                .set_dbr_addr(dbr)
                .set_log_wq_stride(5)
                .set_log_wq_sz(log)
                .set_log_wqe_num_of_strides(log_strides)
                .set_log_wqe_stride_size(log_stride)
                .set_two_byte_shift_en(two_byte_shift);
        }
        self.submit_rq(input, pages, buf, dbr, log)
    }

    /// Completes a CREATE_RQ `input` with the `pages` 4 KiB pages of the ring at `buf` (`2^log`
    /// WQEs, doorbell record `dbr`), runs it and moves the RQ to RDY.
    fn submit_rq(
        &mut self,
        mut input: Vec<u8>,
        pages: usize,
        buf: u64,
        dbr: u64,
        log: u8,
    ) -> Result<Rq, CmdFail> {
        let mut cmd = CreateRqIn::new(&mut input[..]).expect("layout");
        for i in 0..pages {
            cmd.set_pas(i, buf + i as u64 * 4096).expect("room");
        }
        let out = self.exec(&input, 16)?;
        let rqn = CreateRqOut::new(&out[..]).expect("layout").rqn();
        self.rq_ready(rqn)?;
        Ok(Rq {
            rqn,
            buf,
            dbr,
            log,
            pi: 0,
        })
    }

    /// QUERY_HCA_CAP of `cap_type` (one of [`hca::cap_type`]), its current values or (with
    /// `current` false) its maximum ones: the command's output, the capabilities from byte
    /// 0x10. Panics when the device refuses.
    pub fn query_cap(&mut self, cap_type: u16, current: bool) -> Vec<u8> {
        let op_mod = hca::query_cap_op_mod(cap_type, current);
        self.exec(&Self::input(Opcode::QueryHcaCap, op_mod, 16), 0x1010)
            .expect("QUERY_HCA_CAP")
    }

    /// Whether the function offers general object type `ty` (its bit of the current general
    /// capabilities' `general_obj_types`).
    pub fn offers_obj_type(&mut self, ty: u16) -> bool {
        let page = self.query_cap(hca::cap_type::GENERAL_DEVICE, true);
        let types = cxdirect_hw::caps::CmdHcaCap::new(&page[0x10..])
            .expect("layout")
            .general_obj_types();
        types & cxdirect_hw::general_obj::general_obj_types_bit(ty) != 0
    }

    /// MODIFY_RQ RST->RDY.
    fn rq_ready(&mut self, rqn: u32) -> Result<(), CmdFail> {
        let mut modify = Self::input(Opcode::ModifyRq, 0, 0x110);
        let mut m = ModifyRqIn::new(&mut modify[..]).expect("layout");
        m.set_rq_state(0).set_rqn(rqn);
        m.ctx_mut().set_state(1);
        self.exec(&modify, 16).map(|_| ())
    }

    /// Posts one striding receive WQE (its buffer: `len` bytes at `iova`) on an RQ made by
    /// [`Host::try_create_striding_rq`], and updates the doorbell record.
    pub fn post_striding_recv(&self, rq: &mut Rq, iova: u64, len: u32, lkey: u32) {
        let slot = u64::from(rq.pi) & ((1 << rq.log) - 1);
        let mut seg = [0u8; 16];
        DataSeg::new(&mut seg[..])
            .expect("layout")
            .set_byte_count(len)
            .set_lkey(lkey)
            .set_addr(iova);
        self.write(rq.buf + slot * 32, &[0u8; 16]);
        self.write(rq.buf + slot * 32 + 16, &seg);
        rq.pi = rq.pi.wrapping_add(1);
        self.write_be32(rq.dbr, u32::from(rq.pi));
    }

    /// Creates an RMP of `2^log` one-segment WQEs with limit `lwm`; returns its number and ring.
    pub fn create_rmp(&mut self, log: u8, lwm: u16) -> (u32, Rq) {
        self.create_rmp_of(WqType::Cyclic, log, 4, lwm)
    }

    /// Creates an RMP of `wq_type` (cyclic or linked list) with `2^log` WQEs of
    /// `2^log_stride` bytes and limit `lwm`; returns its number and ring.
    pub fn create_rmp_of(
        &mut self,
        wq_type: WqType,
        log: u8,
        log_stride: u8,
        lwm: u16,
    ) -> (u32, Rq) {
        let (buf, dbr, pages, mut input) =
            self.ring_input(Opcode::CreateRmp, 1 << (log + log_stride));
        let mut cmd = CreateRmpIn::new(&mut input[..]).expect("layout");
        {
            let mut ctx = cmd.ctx_mut();
            ctx.set_state(1);
            ctx.wq_mut()
                .set_wq_type(wq_type as u8)
                .set_pd(self.pd)
                .set_dbr_addr(dbr)
                .set_log_wq_stride(log_stride)
                .set_log_wq_sz(log)
                .set_lwm(lwm);
        }
        for i in 0..pages {
            cmd.set_pas(i, buf + i as u64 * 4096).expect("room");
        }
        let out = self.exec(&input, 16).expect("CREATE_RMP");
        let rmpn = CreateRmpOut::new(&out[..]).expect("layout").rmpn();
        (
            rmpn,
            Rq {
                rqn: rmpn,
                buf,
                dbr,
                log,
                pi: 0,
            },
        )
    }

    /// Writes WQE `index` of a linked-list RMP of 32-byte WQEs ([`Host::create_rmp_of`]): a
    /// next segment naming WQE `next`, then one data segment of `len` bytes at `iova`. The
    /// doorbell record is left to the caller.
    pub fn write_linked_recv(
        &self,
        rq: &Rq,
        index: u16,
        next: u16,
        iova: u64,
        len: u32,
        lkey: u32,
    ) {
        let mut wqe = [0u8; 32];
        SrqNextSeg::new(&mut wqe[..16])
            .expect("layout")
            .set_next_wqe_index(next);
        DataSeg::new(&mut wqe[16..])
            .expect("layout")
            .set_byte_count(len)
            .set_lkey(lkey)
            .set_addr(iova);
        self.write(rq.buf + u64::from(index) * 32, &wqe);
    }

    /// Creates an RQ (own ring of `2^log` WQEs of `2^log_stride` bytes, room for
    /// `2^(log_stride - 4)` data segments each) and moves it to RDY.
    pub fn create_rq_segments(&mut self, cqn: u32, log: u8, log_stride: u8) -> Rq {
        let (buf, dbr, pages, mut input) =
            self.ring_input(Opcode::CreateRq, 1 << (log + log_stride));
        let mut cmd = CreateRqIn::new(&mut input[..]).expect("layout");
        cmd.ctx_mut()
            .set_cqn(cqn)
            .set_flush_in_error_en(true)
            .set_vsd(true)
            .wq_mut()
            .set_wq_type(1)
            .set_pd(self.pd)
            .set_dbr_addr(dbr)
            .set_log_wq_stride(log_stride)
            .set_log_wq_sz(log);
        self.submit_rq(input, pages, buf, dbr, log)
            .expect("CREATE_RQ, then MODIFY_RQ RST->RDY")
    }

    /// Posts one receive WQE of `2^log_stride` bytes (an RQ made by
    /// [`Host::create_rq_segments`]) whose data segments are `segments` (IOVA, length, lkey),
    /// the rest of the WQE left zero, and updates the doorbell record.
    pub fn post_recv_segments(&self, rq: &mut Rq, log_stride: u8, segments: &[(u64, u32, u32)]) {
        let slot = u64::from(rq.pi) & ((1 << rq.log) - 1);
        let mut wqe = vec![0u8; 1 << log_stride];
        for (seg, &(iova, len, lkey)) in wqe.chunks_exact_mut(16).zip(segments) {
            DataSeg::new(seg)
                .expect("layout")
                .set_byte_count(len)
                .set_lkey(lkey)
                .set_addr(iova);
        }
        self.write(rq.buf + (slot << log_stride), &wqe);
        rq.pi = rq.pi.wrapping_add(1);
        self.write_be32(rq.dbr, u32::from(rq.pi));
    }

    /// Posts one receive WQE (a single data segment of `len` bytes at `iova`) and updates the
    /// doorbell record.
    pub fn post_recv(&self, rq: &mut Rq, iova: u64, len: u32, lkey: u32) {
        let slot = u64::from(rq.pi) & ((1 << rq.log) - 1);
        let mut seg = [0u8; 16];
        DataSeg::new(&mut seg[..])
            .expect("layout")
            .set_byte_count(len)
            .set_lkey(lkey)
            .set_addr(iova);
        self.write(rq.buf + slot * 16, &seg);
        rq.pi = rq.pi.wrapping_add(1);
        self.write_be32(rq.dbr, u32::from(rq.pi));
    }

    /// Puts `frames` on the wire towards this (wired) device and has it take them in one
    /// receive pass.
    pub fn arrive(&self, frames: &[Vec<u8>]) {
        let (wire, port) = self.dev.wire().expect("wired");
        for frame in frames {
            wire.transmit(port, frame).expect("transmit");
        }
        self.dev.poll();
    }

    /// A direct TIR to `rqn` with a catch-all flow entry to it, made root; returns the TIR.
    pub fn steer_all_to(&mut self, rqn: u32) -> u32 {
        let tirn = self.create_direct_tir(rqn, self.td, 0);
        self.steer_to_tir(tirn);
        tirn
    }

    /// A direct TIR to `rqn` in transport domain `td` with `self_lb_block` (an OR of
    /// `SELF_LB_BLOCK_*`); returns the TIR.
    pub fn create_direct_tir(&mut self, rqn: u32, td: u32, self_lb_block: u8) -> u32 {
        let mut input = Self::input(Opcode::CreateTir, 0, 0x110);
        CreateTirIn::new(&mut input[..])
            .expect("layout")
            .ctx_mut()
            .set_disp_type(0)
            .set_inline_rqn(rqn)
            .set_transport_domain(td)
            .set_self_lb_block(self_lb_block);
        let out = self.exec(&input, 16).expect("CREATE_TIR");
        CreateTirOut::new(&out[..]).expect("layout").tirn()
    }

    /// An RQ table over `rqns` and an indirect TIR hashing IPv4/UDP 4-tuples over it with
    /// Toeplitz under `key`, symmetric (`rx_hash_symmetric`) or not; returns the TIR.
    pub fn create_udp_rss_tir(&mut self, rqns: &[u32], key: &[u8; 40], symmetric: bool) -> u32 {
        let size = rqns.len() as u16;
        let mut input = Self::input(Opcode::CreateRqt, 0, 0x110 + 4 * rqns.len());
        {
            let mut cmd = CreateRqtIn::new(&mut input[..]).expect("layout");
            cmd.rqt_context_mut()
                .set_rqt_max_size(size)
                .set_rqt_actual_size(size);
            for (i, &rqn) in rqns.iter().enumerate() {
                cmd.set_rq_num(i, rqn).expect("room");
            }
        }
        let out = self.exec(&input, 16).expect("CREATE_RQT");
        let rqtn = CreateRqtOut::new(&out[..]).expect("layout").rqtn();
        let mut input = Self::input(Opcode::CreateTir, 0, 0x110);
        {
            let mut cmd = CreateTirIn::new(&mut input[..]).expect("layout");
            let mut ctx = cmd.ctx_mut();
            ctx.set_disp_type(1)
                .set_indirect_table(rqtn)
                .set_rx_hash_fn(2)
                .set_rx_hash_symmetric(symmetric)
                .set_transport_domain(self.td);
            ctx.set_rx_hash_toeplitz_key_bytes(key);
            ctx.rx_hash_field_selector_outer_mut()
                .set_l3_prot_type(0)
                .set_l4_prot_type(1)
                .set_selected_fields(
                    HASH_FIELD_SEL_SRC_IP
                        | HASH_FIELD_SEL_DST_IP
                        | HASH_FIELD_SEL_L4_SPORT
                        | HASH_FIELD_SEL_L4_DPORT,
                );
        }
        let out = self.exec(&input, 16).expect("CREATE_TIR");
        CreateTirOut::new(&out[..]).expect("layout").tirn()
    }

    /// A flow table with one catch-all entry to `tirn`, made root.
    pub fn steer_to_tir(&mut self, tirn: u32) {
        let table = flow_tables::create_table(self, 0, 4, None).expect("CREATE_FLOW_TABLE");
        flow_tables::catch_all(self, table, flow::FLOW_DESTINATION_TYPE_TIR, tirn, 0);
        flow_tables::set_root(self, table);
    }
}

/// `frame` with VLAN tags `(tpid, tci)` inserted after its MAC addresses, outermost first.
pub fn vlan_tagged(frame: &[u8], tags: &[(u16, u16)]) -> Vec<u8> {
    let mut f = frame[..12].to_vec();
    for &(tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&frame[12..]);
    f
}

/// A test frame: broadcast destination, a source MAC, IPv4/UDP (checksums filled in) with
/// `payload_len` bytes of a pattern seeded by `seed`.
pub fn udp_frame(payload_len: usize, seed: u8) -> Vec<u8> {
    let mut f = Vec::with_capacity(42 + payload_len);
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x09]);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let total = 20 + 8 + payload_len;
    f.extend_from_slice(&[
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        1,
        0,
        0,
        64,
        17,
        0,
        0,
        10,
        0,
        0,
        1,
        10,
        0,
        0,
        2,
    ]);
    f.extend_from_slice(&[
        0x12,
        0x34,
        0x56,
        0x78,
        ((8 + payload_len) >> 8) as u8,
        (8 + payload_len) as u8,
        0,
        0,
    ]);
    f.extend((0..payload_len).map(|i| seed.wrapping_add(i as u8)));
    crate::packet::insert_checksums(&mut f, true, true).expect("checksums");
    f
}
