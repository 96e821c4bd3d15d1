//! Bringing the HCA up and down, and its basic resources: ENABLE_HCA / DISABLE_HCA, QUERY_ISSI /
//! SET_ISSI, QUERY_PAGES / MANAGE_PAGES, INIT_HCA / TEARDOWN_HCA, QUERY_HCA_CAP / SET_HCA_CAP
//! with the capability union, and allocation of UARs, protection domains and transport domains.
//!
//! The usual order at start-up: ENABLE_HCA, QUERY_ISSI and SET_ISSI, QUERY_PAGES (boot) and
//! MANAGE_PAGES (give), QUERY_HCA_CAP and SET_HCA_CAP, QUERY_PAGES (init) and MANAGE_PAGES,
//! INIT_HCA; then the device may ask for more pages at any time through page request events
//! (answered with MANAGE_PAGES give or take), and shutdown is TEARDOWN_HCA, MANAGE_PAGES (take
//! back everything), DISABLE_HCA.

use crate::caps::{CmdHcaCap, FlowTableNicCap, PerProtocolNetworkingOffloadCaps};
use crate::layout;

/// QUERY_PAGES op_mod values (`MLX5_QUERY_PAGES_IN_OP_MOD_*`): which stage's page count to ask
/// for.
pub mod query_pages_op_mod {
    /// Pages the device needs before INIT_HCA can be issued, for its boot.
    pub const BOOT: u16 = 0x1;
    /// Pages the device needs for INIT_HCA.
    pub const INIT: u16 = 0x2;
    /// Pages the device asks for (or gives back) while running, after a page request event.
    pub const REGULAR: u16 = 0x3;
}

/// MANAGE_PAGES op_mod values (`MLX5_MANAGE_PAGES_IN_OP_MOD_*`).
pub mod manage_pages_op_mod {
    /// Software could not allocate the pages the device asked for (no addresses follow);
    /// `ALLOCATION_FAIL` in the header.
    pub const ALLOC_FAIL: u16 = 0x0;
    /// Software gives the device the `input_num_entries` pages listed in `pas`;
    /// `ALLOCATION_SUCCESS` in the header.
    pub const GIVE: u16 = 0x1;
    /// Software asks the device to return up to `input_num_entries` pages; the output lists
    /// the `output_num_entries` pages returned; `HCA_RETURN_PAGES` in the header.
    pub const TAKE: u16 = 0x2;
}

/// Capability types (`enum mlx5_cap_type`): the capability layout QUERY_HCA_CAP and SET_HCA_CAP
/// address, combined into op_mod by [`query_cap_op_mod`] and [`set_cap_op_mod`].
pub mod cap_type {
    /// General device capabilities: [`CmdHcaCap`](crate::caps::CmdHcaCap).
    pub const GENERAL_DEVICE: u16 = 0x0;
    /// Ethernet offload capabilities:
    /// [`PerProtocolNetworkingOffloadCaps`](crate::caps::PerProtocolNetworkingOffloadCaps).
    pub const ETHERNET_OFFLOADS: u16 = 0x1;
    /// On-demand paging capabilities (`odp_cap`).
    pub const ODP: u16 = 0x2;
    /// Atomic operation capabilities (`atomic_caps`).
    pub const ATOMIC: u16 = 0x3;
    /// RoCE capabilities (`roce_cap`).
    pub const ROCE: u16 = 0x4;
    /// IPoIB offload capabilities.
    pub const IPOIB_OFFLOADS: u16 = 0x5;
    /// Enhanced IPoIB offload capabilities.
    pub const IPOIB_ENHANCED_OFFLOADS: u16 = 0x6;
    /// NIC flow table capabilities (`flow_table_nic_cap`).
    pub const FLOW_TABLE: u16 = 0x7;
    /// E-switch flow table capabilities (`flow_table_eswitch_cap`).
    pub const ESWITCH_FLOW_TABLE: u16 = 0x8;
    /// E-switch capabilities (`e_switch_cap`).
    pub const ESWITCH: u16 = 0x9;
    /// Vector calculation capabilities (`vector_calc_cap`).
    pub const VECTOR_CALC: u16 = 0xb;
    /// QoS capabilities (`qos_cap`).
    pub const QOS: u16 = 0xc;
    /// NVMe-oF offload capabilities (`nvmf_cap`).
    pub const NVMF: u16 = 0xe;
    /// On-device memory capabilities (`device_mem_cap`).
    pub const DEVICE_MEM: u16 = 0xf;
    /// General device capabilities, second page:
    /// [`CmdHcaCap2`](crate::caps::CmdHcaCap2) (`MLX5_CAP_GENERAL_2`), offered when the general
    /// page's `hca_cap_2` is set.
    pub const GENERAL_DEVICE_2: u16 = 0x20;
}

/// QUERY_HCA_CAP op_mod for capability type `cap_type` (see [`cap_type`]): `cap_type << 1`, with
/// bit 0 set to read the values currently in force (`HCA_CAP_OPMOD_GET_CUR`) and clear to read
/// the largest values the device supports (`HCA_CAP_OPMOD_GET_MAX`).
pub const fn query_cap_op_mod(cap_type: u16, current: bool) -> u16 {
    (cap_type << 1) | current as u16
}

/// SET_HCA_CAP op_mod for capability type `cap_type` (see [`cap_type`]): `cap_type << 1`
/// (`MLX5_SET_HCA_CAP_OP_MOD_*` in rdma-core; Linux shifts its unshifted values when it sends).
pub const fn set_cap_op_mod(cap_type: u16) -> u16 {
    cap_type << 1
}

/// TEARDOWN_HCA profiles (`MLX5_TEARDOWN_HCA_IN_PROFILE_*`).
pub mod teardown_profile {
    /// Orderly shutdown: the device flushes its state and releases its pages for MANAGE_PAGES
    /// take.
    pub const GRACEFUL_CLOSE: u16 = 0x0;
    /// Forced shutdown, when graceful close failed or cannot be waited for; supported when
    /// [`CmdHcaCap::force_teardown`](crate::caps::CmdHcaCap::force_teardown) is set. The
    /// result is in [`TeardownHcaOut::force_state`](super::TeardownHcaOut::force_state).
    pub const FORCE_CLOSE: u16 = 0x1;
}

/// Values of [`TeardownHcaOut::force_state`] (`MLX5_TEARDOWN_HCA_OUT_FORCE_STATE_*`).
pub mod teardown_force_state {
    /// The forced teardown completed.
    pub const SUCCESS: u8 = 0x0;
    /// The forced teardown failed.
    pub const FAIL: u8 = 0x1;
}

layout! {
    /// ENABLE_HCA input: the first command, which turns on a function's command processing.
    pub struct EnableHcaIn("enable_hca_in", 0x10) {
        /// Command opcode: [`Opcode::EnableHca`](crate::cmd::Opcode::EnableHca).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Function to enable: 0 for the function issuing the command (a PF may name its VFs).
        function_id: u16 @ 0x50 [0x10],
    }
}

layout! {
    /// DISABLE_HCA input: the last command, after TEARDOWN_HCA and the return of every page.
    pub struct DisableHcaIn("disable_hca_in", 0x10) {
        /// Command opcode: [`Opcode::DisableHca`](crate::cmd::Opcode::DisableHca).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// Function to disable: 0 for the function issuing the command.
        function_id: u16 @ 0x50 [0x10],
    }
}

layout! {
    /// QUERY_ISSI input.
    pub struct QueryIssiIn("query_issi_in", 0x10) {
        /// Command opcode: [`Opcode::QueryIssi`](crate::cmd::Opcode::QueryIssi).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
    }
}

layout! {
    /// QUERY_ISSI output: the interface step sequence ID (command set revision) in force and
    /// the ones the device supports.
    ///
    /// The supported set is an 80-byte bit mask at byte 0x20 (bit `n` set when ISSI `n` is
    /// supported, counting from the least significant bit of the last byte); the header names
    /// only its last dword, which holds ISSIs 0 to 31, as `supported_issi_dw0`.
    pub struct QueryIssiOut("query_issi_out", 0x70) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// ISSI the function currently runs with (0 until SET_ISSI).
        current_issi: u16 @ 0x50 [0x10],
        /// Supported ISSIs 0 to 31: bit `n` (from the least significant) set when ISSI `n` is
        /// supported. Drivers of this generation use ISSI 1 when bit 1 is set, else 0.
        supported_issi_dw0: u32 @ 0x360 [0x20],
    }
}

layout! {
    /// SET_ISSI input: selects the command set revision.
    pub struct SetIssiIn("set_issi_in", 0x10) {
        /// Command opcode: [`Opcode::SetIssi`](crate::cmd::Opcode::SetIssi).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// ISSI to use from now on (one the device reported as supported; 1 in practice).
        current_issi: u16 @ 0x50 [0x10],
    }
}

layout! {
    /// QUERY_PAGES input: how many 4 KiB pages the device wants for a stage.
    pub struct QueryPagesIn("query_pages_in", 0x10) {
        /// Command opcode: [`Opcode::QueryPages`](crate::cmd::Opcode::QueryPages).
        opcode: u16 @ 0x00 [0x10],
        /// Stage: see [`query_pages_op_mod`] (boot 1, init 2, regular 3).
        op_mod: u16 @ 0x30 [0x10],
        /// Function whose pages are asked about: 0 for the issuing function.
        function_id: u16 @ 0x50 [0x10],
    }
}

layout! {
    /// QUERY_PAGES output.
    pub struct QueryPagesOut("query_pages_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// Function the pages are for.
        function_id: u16 @ 0x50 [0x10],
        /// Number of 4 KiB pages the device wants. Signed in practice (two's complement): a
        /// negative count is pages the device offers to give back (MANAGE_PAGES take). Read it
        /// as `i32` through [`QueryPagesOut::num_pages_signed`].
        num_pages: u32 @ 0x60 [0x20],
    }
}

impl<T: AsRef<[u8]>> QueryPagesOut<T> {
    /// [`num_pages`](Self::num_pages) as the signed count it is: positive when the device wants
    /// that many pages, negative when it has that many to give back.
    pub fn num_pages_signed(&self) -> i32 {
        self.num_pages() as i32
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> QueryPagesOut<T> {
    /// Sets [`num_pages`](Self::num_pages) from a signed count (see
    /// [`num_pages_signed`](Self::num_pages_signed)).
    pub fn set_num_pages_signed(&mut self, pages: i32) -> &mut Self {
        self.set_num_pages(pages as u32)
    }
}

layout! {
    /// MANAGE_PAGES input: gives pages to the device or asks for them back. The buffer holds
    /// `input_num_entries` page addresses after the fixed part when giving.
    pub struct ManagePagesIn("manage_pages_in", 0x10) {
        /// Command opcode: [`Opcode::ManagePages`](crate::cmd::Opcode::ManagePages).
        opcode: u16 @ 0x00 [0x10],
        /// Direction: see [`manage_pages_op_mod`] (alloc fail 0, give 1, take 2).
        op_mod: u16 @ 0x30 [0x10],
        /// Function the pages are for: 0 for the issuing function.
        function_id: u16 @ 0x50 [0x10],
        /// Give: the number of addresses in `pas`. Take: the number of pages asked back.
        input_num_entries: u32 @ 0x60 [0x20],
    }
    arrays {
        /// Give: bus addresses of 4 KiB pages (4 KiB aligned) handed to the device.
        pas: u64 @ 0x80 [0x40],
    }
}

layout! {
    /// MANAGE_PAGES output. After take, the buffer holds `output_num_entries` page addresses
    /// after the fixed part.
    pub struct ManagePagesOut("manage_pages_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// Take: the number of pages the device returned, listed in `pas`.
        output_num_entries: u32 @ 0x40 [0x20],
    }
    arrays {
        /// Take: bus addresses of the 4 KiB pages the device returned.
        pas: u64 @ 0x80 [0x40],
    }
}

layout! {
    /// INIT_HCA input: starts the device once it has its init pages and capabilities are set.
    pub struct InitHcaIn("init_hca_in", 0x10) {
        /// Command opcode: [`Opcode::InitHca`](crate::cmd::Opcode::InitHca).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
    }
}

layout! {
    /// TEARDOWN_HCA input: stops the device; its pages are then taken back with MANAGE_PAGES.
    pub struct TeardownHcaIn("teardown_hca_in", 0x10) {
        /// Command opcode: [`Opcode::TeardownHca`](crate::cmd::Opcode::TeardownHca).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// How to close: see [`teardown_profile`] (graceful 0, force 1).
        profile: u16 @ 0x50 [0x10],
    }
}

layout! {
    /// TEARDOWN_HCA output.
    pub struct TeardownHcaOut("teardown_hca_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// Force-close profile only: see [`teardown_force_state`] (0 success, 1 fail).
        force_state: u8 @ 0x7f [0x1],
    }
}

layout! {
    /// The capability union of QUERY_HCA_CAP and SET_HCA_CAP: one 4 KiB page holding the
    /// capability layout selected by the command's op_mod, at offset 0.
    pub struct HcaCapUnion("hca_cap_union", 0x1000) {
    }
    nested {
        /// General device capabilities ([`cap_type::GENERAL_DEVICE`]).
        cmd_hca_cap: CmdHcaCap @ 0x0,
        /// Ethernet offload capabilities ([`cap_type::ETHERNET_OFFLOADS`]).
        per_protocol_networking_offload_caps: PerProtocolNetworkingOffloadCaps @ 0x0,
        /// NIC flow table capabilities ([`cap_type::FLOW_TABLE`]).
        flow_table_nic_cap: FlowTableNicCap @ 0x0,
    }
}

layout! {
    /// QUERY_HCA_CAP input.
    pub struct QueryHcaCapIn("query_hca_cap_in", 0x10) {
        /// Command opcode: [`Opcode::QueryHcaCap`](crate::cmd::Opcode::QueryHcaCap).
        opcode: u16 @ 0x00 [0x10],
        /// Capability type and mode: [`query_cap_op_mod`]`(cap_type, current)`.
        op_mod: u16 @ 0x30 [0x10],
    }
}

layout! {
    /// QUERY_HCA_CAP output: the capability layout asked for.
    pub struct QueryHcaCapOut("query_hca_cap_out", 0x1010) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
    }
    nested {
        /// The capabilities of the type the op_mod named.
        capability: HcaCapUnion @ 0x80,
    }
}

layout! {
    /// SET_HCA_CAP input: the settable capabilities in force from now on (issued before
    /// INIT_HCA). Software starts from the "current" values QUERY_HCA_CAP returned and changes
    /// the settable fields.
    pub struct SetHcaCapIn("set_hca_cap_in", 0x1010) {
        /// Command opcode: [`Opcode::SetHcaCap`](crate::cmd::Opcode::SetHcaCap).
        opcode: u16 @ 0x00 [0x10],
        /// Capability type: [`set_cap_op_mod`]`(cap_type)`.
        op_mod: u16 @ 0x30 [0x10],
    }
    nested {
        /// The capabilities to set, of the type the op_mod names.
        capability: HcaCapUnion @ 0x80,
    }
}

layout! {
    /// ALLOC_UAR input.
    pub struct AllocUarIn("alloc_uar_in", 0x10) {
        /// Command opcode: [`Opcode::AllocUar`](crate::cmd::Opcode::AllocUar).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
    }
}

layout! {
    /// ALLOC_UAR output.
    pub struct AllocUarOut("alloc_uar_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// Index of the new UAR page: it lies at BAR 0 offset `uar * uar page size`.
        uar: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// DEALLOC_UAR input.
    pub struct DeallocUarIn("dealloc_uar_in", 0x10) {
        /// Command opcode: [`Opcode::DeallocUar`](crate::cmd::Opcode::DeallocUar).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The UAR page to free.
        uar: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// ALLOC_PD input.
    pub struct AllocPdIn("alloc_pd_in", 0x10) {
        /// Command opcode: [`Opcode::AllocPd`](crate::cmd::Opcode::AllocPd).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
    }
}

layout! {
    /// ALLOC_PD output.
    pub struct AllocPdOut("alloc_pd_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// Number of the new protection domain.
        pd: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// DEALLOC_PD input.
    pub struct DeallocPdIn("dealloc_pd_in", 0x10) {
        /// Command opcode: [`Opcode::DeallocPd`](crate::cmd::Opcode::DeallocPd).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The protection domain to free.
        pd: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// ALLOC_XRCD output.
    pub struct AllocXrcdOut("alloc_xrcd_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// Number of the new XRC domain.
        xrcd: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// DEALLOC_XRCD input.
    pub struct DeallocXrcdIn("dealloc_xrcd_in", 0x10) {
        /// Command opcode: [`Opcode::DeallocXrcd`](crate::cmd::Opcode::DeallocXrcd).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The XRC domain to free.
        xrcd: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// ALLOC_TRANSPORT_DOMAIN input.
    pub struct AllocTransportDomainIn("alloc_transport_domain_in", 0x10) {
        /// Command opcode:
        /// [`Opcode::AllocTransportDomain`](crate::cmd::Opcode::AllocTransportDomain).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
    }
}

layout! {
    /// ALLOC_TRANSPORT_DOMAIN output.
    pub struct AllocTransportDomainOut("alloc_transport_domain_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
        /// Number of the new transport domain (TIRs and TISes name it; loopback between
        /// them is blocked per domain).
        transport_domain: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// DEALLOC_TRANSPORT_DOMAIN input.
    pub struct DeallocTransportDomainIn("dealloc_transport_domain_in", 0x10) {
        /// Command opcode:
        /// [`Opcode::DeallocTransportDomain`](crate::cmd::Opcode::DeallocTransportDomain).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The transport domain to free.
        transport_domain: u32 @ 0x48 [0x18],
    }
}

layout! {
    /// SET_DRIVER_VERSION input: the driver's name and version as text, kept by the device for
    /// its own reports (issued after INIT_HCA when `driver_version` is advertised).
    pub struct SetDriverVersionIn("set_driver_version_in", 0x50) {
        /// Command opcode: [`Opcode::SetDriverVersion`](crate::cmd::Opcode::SetDriverVersion).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
    }
    arrays {
        /// Byte `index` (0..64) of the version text, NUL-padded.
        driver_version: u8 @ 0x80 [0x8],
    }
}

/// Bytes of [`SetDriverVersionIn::driver_version`].
pub const DRIVER_VERSION_BYTES: usize = 64;

layout! {
    /// QUERY_ADAPTER input.
    pub struct QueryAdapterIn("query_adapter_in", 0x10) {
        /// Command opcode: [`Opcode::QueryAdapter`](crate::cmd::Opcode::QueryAdapter).
        opcode: u16 @ 0x00 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
    }
}

layout! {
    /// The adapter's identity in QUERY_ADAPTER's output: vendor ids and the board's PSID.
    pub struct QueryAdapterParamBlock("query_adapter_param_block", 0x100) {
        /// IEEE vendor id (OUI) of the adapter's vendor.
        ieee_vendor_id: u32 @ 0xc8 [0x18],
        /// PCI vendor id the vendor-specific data belongs to.
        vsd_vendor_id: u16 @ 0xf0 [0x10],
    }
    arrays {
        /// Byte `index` (0..16) of the board's PSID (parameter set id), NUL-padded ASCII.
        vsd_contd_psid: u8 @ 0x780 [0x8],
    }
}

/// Bytes of [`QueryAdapterParamBlock::vsd_contd_psid`].
pub const PSID_BYTES: usize = 16;

layout! {
    /// QUERY_ADAPTER output.
    pub struct QueryAdapterOut("query_adapter_out", 0x110) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
    }
    nested {
        /// The adapter's identity.
        query_adapter_struct: QueryAdapterParamBlock @ 0x80,
    }
}
