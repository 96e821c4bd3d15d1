//! Bring-up steps: the function enabled, capabilities set, boot and init pages given, and the
//! firmware woken before any of it.

use super::Device;
use crate::backend::Backend;
use crate::control::cmd::{input, output_too_short};
use crate::error::DriverError;
use cxdirect_hw::caps::{port_type, CmdHcaCap};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::hca::{
    self, cap_type, query_cap_op_mod, QueryHcaCapOut, QueryIssiOut, QueryPagesOut,
};
use cxdirect_hw::roce::RoceCap;

impl<B: Backend> Device<B> {
    pub(super) fn setup_function(&mut self) -> Result<(), DriverError> {
        self.exec(&input(Opcode::EnableHca, 0, 16), 16)?;
        let out = self.exec(
            &input(Opcode::QueryIssi, 0, 16),
            QueryIssiOut::<&[u8]>::SIZE,
        )?;
        if QueryIssiOut::new(&out[..])
            .map(|o| o.supported_issi_dw0() & 0b10 != 0)
            .unwrap_or(false)
        {
            let mut set = input(Opcode::SetIssi, 0, 16);
            hca::SetIssiIn::new(&mut set[..])
                .map(|mut s| {
                    s.set_current_issi(1);
                })
                .ok();
            self.exec(&set, 16)?;
        }
        self.info.pages_boot = self.satisfy_startup_pages(hca::query_pages_op_mod::BOOT)?;
        self.caps_general = self.query_caps(cap_type::GENERAL_DEVICE, true)?;
        let general = CmdHcaCap::new(&self.caps_general[..]).map_err(|_| bad_caps())?;
        if general.port_type() != port_type::ETHERNET {
            return Err(DriverError::Unsupported {
                what: "a port that is not Ethernet (port_type InfiniBand)",
                why: "the driver speaks Ethernet only; set LINK_TYPE to ETH with mlxconfig",
            });
        }
        let roce = general.roce();
        self.set_caps()?;
        if roce {
            self.set_roce_caps()?;
        }
        self.caps_ethernet = self.query_caps(cap_type::ETHERNET_OFFLOADS, true)?;
        self.info.pages_init = self.satisfy_startup_pages(hca::query_pages_op_mod::INIT)?;
        self.exec(&input(Opcode::InitHca, 0, 16), 16)?;
        self.uar = self.alloc_id(Opcode::AllocUar, |o| {
            hca::AllocUarOut::new(o).map(|o| o.uar())
        })?;
        self.pd = self.alloc_id(Opcode::AllocPd, |o| hca::AllocPdOut::new(o).map(|o| o.pd()))?;
        self.td = self.alloc_id(Opcode::AllocTransportDomain, |o| {
            hca::AllocTransportDomainOut::new(o).map(|o| o.transport_domain())
        })?;
        self.interrupts = self.backend.enable_msix(self.options.msix_vectors.max(1))?;
        self.create_async_eq()?;
        self.serve_page_requests()?;
        self.refresh_port()?;
        Ok(())
    }

    fn alloc_id(
        &mut self,
        op: Opcode,
        get: impl Fn(&[u8]) -> Result<u32, cxdirect_hw::LayoutError>,
    ) -> Result<u32, DriverError> {
        let out = self.exec(&input(op, 0, 16), 16)?;
        get(&out).map_err(|_| DriverError::BadDeviceValue {
            what: "allocation output",
            value: out.len() as u64,
        })
    }

    fn query_caps(&mut self, kind: u16, current: bool) -> Result<[u8; 0x100], DriverError> {
        let out = self.exec(
            &input(Opcode::QueryHcaCap, query_cap_op_mod(kind, current), 16),
            QueryHcaCapOut::<&[u8]>::SIZE,
        )?;
        let out = QueryHcaCapOut::new(&out[..]).map_err(output_too_short)?;
        let mut caps = [0u8; 0x100];
        let len = caps.len();
        caps.copy_from_slice(&out.capability().as_bytes()[..len]);
        Ok(caps)
    }

    fn set_caps(&mut self) -> Result<(), DriverError> {
        let mut set = input(
            Opcode::SetHcaCap,
            hca::set_cap_op_mod(cap_type::GENERAL_DEVICE),
            hca::SetHcaCapIn::<&[u8]>::SIZE,
        );
        set[0x10..0x110].copy_from_slice(&self.caps_general);
        if let Ok(mut caps) = CmdHcaCap::new(&mut set[0x10..0x110]) {
            // Checksums cost a pass over every command; the PCIe link already protects it.
            caps.set_cmdif_checksum(0).set_log_uar_page_sz(0);
        }
        self.exec(&set, 16)?;
        self.caps_general.copy_from_slice(&set[0x10..0x110]);
        Ok(())
    }

    /// As rdma-core's VFIO provider and Linux do before INIT_HCA: when the device lets
    /// software choose a RoCE QP's UDP source port (`ads.udp_sport`, which the RDMA queue
    /// pairs spread by QPN) but does not yet, SET_HCA_CAP(ROCE) turns that on.
    fn set_roce_caps(&mut self) -> Result<(), DriverError> {
        let current = self.query_caps(cap_type::ROCE, true)?;
        let offered = self.query_caps(cap_type::ROCE, false)?;
        let wanted =
            |page: &[u8; 0x100]| RoceCap::new(&page[..]).is_ok_and(|c| c.sw_r_roce_src_udp_port());
        if wanted(&current) || !wanted(&offered) {
            return Ok(());
        }
        let mut set = input(
            Opcode::SetHcaCap,
            hca::set_cap_op_mod(cap_type::ROCE),
            hca::SetHcaCapIn::<&[u8]>::SIZE,
        );
        set[0x10..0x110].copy_from_slice(&current);
        if let Ok(mut caps) = RoceCap::new(&mut set[0x10..0x110]) {
            caps.set_sw_r_roce_src_udp_port(true);
        }
        self.exec(&set, 16).map(|_| ())
    }

    /// QUERY_PAGES for boot or init pages and gives them; returns the count.
    fn satisfy_startup_pages(&mut self, op_mod: u16) -> Result<usize, DriverError> {
        let out = self.exec(&input(Opcode::QueryPages, op_mod, 16), 16)?;
        let pages = QueryPagesOut::new(&out[..])
            .map(|o| o.num_pages_signed())
            .unwrap_or(-1);
        if pages < 0 || pages as usize > self.options.max_firmware_pages {
            return Err(DriverError::BadDeviceValue {
                what: "startup page count (negative, or past Options::max_firmware_pages)",
                value: pages as u64,
            });
        }
        self.give_pages(pages as usize)?;
        Ok(pages as usize)
    }

    pub(super) fn give_pages(&mut self, count: usize) -> Result<(), DriverError> {
        if count == 0 {
            return Ok(());
        }
        let pages = self.pages.alloc(count)?;
        let mut cmd = input(
            Opcode::ManagePages,
            hca::manage_pages_op_mod::GIVE,
            16 + 8 * count,
        );
        {
            let mut m = hca::ManagePagesIn::new(&mut cmd[..])
                .map_err(|_| DriverError::layout(Opcode::ManagePages, "input page list"))?;
            m.set_input_num_entries(count as u32);
            for (i, &p) in pages.iter().enumerate() {
                let _ = m.set_pas(i, p);
            }
        }
        if let Err(e) = self.exec(&cmd, 16) {
            if matches!(&e, DriverError::Command(c) if c.failure.reached_device()) {
                self.info.pages_in_doubt += count;
            } else {
                // Never posted: the device cannot have them.
                self.pages.release(&pages);
            }
            return Err(e);
        }
        Ok(())
    }

    /// Asks for `count` pages back; returns how many came back. Refuses (and takes none of) an
    /// answer that claims more pages than asked or pages never given.
    pub(super) fn take_pages(&mut self, count: usize) -> Result<usize, DriverError> {
        let mut cmd = input(Opcode::ManagePages, hca::manage_pages_op_mod::TAKE, 16);
        hca::ManagePagesIn::new(&mut cmd[..])
            .map(|mut m| {
                m.set_input_num_entries(count as u32);
            })
            .ok();
        let out = self.exec(&cmd, 16 + 8 * count)?;
        let out = hca::ManagePagesOut::new(&out[..])
            .map_err(|_| DriverError::layout(Opcode::ManagePages, "output page list"))?;
        let returned = out.output_num_entries() as usize;
        if returned > count {
            return Err(DriverError::BadDeviceValue {
                what: "page count returned (more than asked)",
                value: returned as u64,
            });
        }
        let mut pages = Vec::with_capacity(returned);
        for i in 0..returned {
            pages.push(out.pas(i).map_err(|_| DriverError::BadDeviceValue {
                what: "page list length",
                value: i as u64,
            })?);
        }
        self.pages.check_returned(&pages)?;
        self.pages.release(&pages);
        Ok(returned)
    }
}

pub(super) fn bad_caps() -> DriverError {
    DriverError::BadDeviceValue {
        what: "capability page",
        value: 0,
    }
}
