//! On-demand paging (ODP): the ODP capability page, the page-fault event's data and
//! PAGE_FAULT_RESUME (Linux `mlx5_ifc.h` `odp_cap`, `page_fault_resume_in`; `device.h`
//! `struct mlx5_eqe_page_fault`, read by mlx5_ib's `mlx5_ib_eq_pf_process` in odp.c).
//!
//! A memory key whose translation entries lack the read or write bit (`MLX5_IB_MTT_READ`,
//! `MLX5_IB_MTT_WRITE`) faults when the device reaches the page: it posts a
//! [`EventType::PageFault`](crate::eqe::EventType::PageFault) event to the EQ subscribed to it,
//! stops the faulting queue, and waits for the driver to load the page (by UMR) and send
//! PAGE_FAULT_RESUME.

use crate::layout;

/// Sub types of a page-fault EQE (`MLX5_PFAULT_SUBTYPE_*`).
pub mod pfault_subtype {
    /// A WQE's own buffers faulted (data: [`EqePageFaultWqe`](super::EqePageFaultWqe)).
    pub const WQE: u8 = 0;
    /// A remote access (RDMA WRITE, READ request or atomic) faulted at the responder (data:
    /// [`EqePageFaultRdma`](super::EqePageFaultRdma)).
    pub const RDMA: u8 = 1;
}

/// Flags of an RDMA page fault's type (`enum mlx5_pagefault_type_flags`).
pub mod pfault_flags {
    /// The fault is the requester's.
    pub const REQUESTOR: u8 = 1 << 0;
    /// The access writes the page.
    pub const WRITE: u8 = 1 << 1;
    /// The access is a remote one (RDMA).
    pub const RDMA: u8 = 1 << 2;
}

/// Types of a WQE page fault (`enum wqe_page_fault_type`, `MLX5_WQE_PF_TYPE_*`): which queue
/// holds the faulting WQE, as mlx5_ib's `odp_get_rsc` reads it.
pub mod wqe_pf_type {
    /// A receive WQE of an SRQ or RMP (`wq_num` names the SRQ).
    pub const RMP: u8 = 0;
    /// A SEND or RDMA WRITE WQE of a QP's send queue (gathering).
    pub const REQ_SEND_OR_WRITE: u8 = 1;
    /// A receive WQE of a QP's own receive queue.
    pub const RESP: u8 = 2;
    /// An RDMA READ or atomic WQE of a QP's send queue (scattering the response).
    pub const REQ_READ_OR_ATOMIC: u8 = 3;
}

layout! {
    /// Page-fault event data of sub type [`pfault_subtype::WQE`] (`mlx5_eqe_page_fault.wqe`).
    pub struct EqePageFaultWqe("mlx5_eqe_page_fault_wqe", 28) {
        /// Bytes of the WQE's data already moved before the fault (mlx5_ib skips them).
        bytes_committed: u32 @ 0x00 [0x20],
        /// Index of the faulting WQE in its queue (the counter, modulo 2^16).
        wqe_index: u16 @ 0x30 [0x10],
        /// Size of the packet being handled, in bytes (a responder's).
        packet_length: u16 @ 0x50 [0x10],
        /// The fault's token, returned in PAGE_FAULT_RESUME.
        token: u32 @ 0x60 [0x20],
        /// The queue holding the WQE: see [`wqe_pf_type`] (bits 26:24 of `pftype_wq`).
        pf_type: u8 @ 0xc5 [0x3],
        /// The QP (or SRQ) number (bits 23:0 of `pftype_wq`).
        wq_num: u32 @ 0xc8 [0x18],
    }
}

layout! {
    /// Page-fault event data of sub type [`pfault_subtype::RDMA`] (`mlx5_eqe_page_fault.rdma`).
    pub struct EqePageFaultRdma("mlx5_eqe_page_fault_rdma", 28) {
        /// Bytes of the message already landed before the fault (mlx5_ib adds them to
        /// `rdma_va`).
        bytes_committed: u32 @ 0x00 [0x20],
        /// The remote key of the request.
        r_key: u32 @ 0x20 [0x20],
        /// Payload bytes of the faulting packet.
        packet_length: u16 @ 0x50 [0x10],
        /// The request's whole length in bytes (its RETH length).
        rdma_op_len: u32 @ 0x60 [0x20],
        /// The request's first virtual address (its RETH address).
        rdma_va: u64 @ 0x80 [0x40],
        /// [`pfault_flags`] of the access (bits 31:24 of `pftype_token`).
        pf_type: u8 @ 0xc0 [0x8],
        /// The fault's token: the responder QP's number (bits 23:0 of `pftype_token`).
        token: u32 @ 0xc8 [0x18],
    }
}

layout! {
    /// PAGE_FAULT_RESUME input (`page_fault_resume_in`, its `trans_page_fault_info`), as
    /// mlx5_ib's `mlx5_ib_page_fault_resume` fills it.
    pub struct PageFaultResumeIn("page_fault_resume_in", 0x10) {
        /// Command opcode: [`Opcode::PageFaultResume`](crate::cmd::Opcode::PageFaultResume).
        opcode: u16 @ 0x00 [0x10],
        /// Opcode modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The fault could not be resolved: the queue goes to error.
        error: bool @ 0x40 [0x1],
        /// The fault's type as the event gave it (a WQE fault's [`wqe_pf_type`], an RDMA
        /// fault's [`pfault_flags`] in three bits).
        page_fault_type: u8 @ 0x45 [0x3],
        /// The queue: a WQE fault's `wq_num`, an RDMA fault's token (the QP).
        wq_number: u32 @ 0x48 [0x18],
        /// The fault's token as the event gave it.
        token: u32 @ 0x68 [0x18],
    }
}

layout! {
    /// PAGE_FAULT_RESUME output.
    pub struct PageFaultResumeOut("page_fault_resume_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Failure syndrome (0 on success).
        syndrome: u32 @ 0x20 [0x20],
    }
}

layout! {
    /// The ODP capability page (`MLX5_CAP_ODP`, `odp_cap`, HCA capability type
    /// [`cap_type::ODP`](crate::hca::cap_type::ODP)): the transport page-fault scheme's caps,
    /// read by mlx5_ib's `mlx5_ib_internal_fill_odp_caps` through `MLX5_CAP_ODP_SCHEME` when
    /// general `pg` is set. The memory page-fault scheme (`mem_page_fault`) is ConnectX-7's.
    pub struct OdpCap("odp_cap", 0x100) {
        /// Signature keys on ODP memory.
        sig: bool @ 0x40 [0x1],
        /// Prefetch of ODP memory by the device.
        page_prefetch: bool @ 0x45 [0x1],
        /// RC requester SEND faults resolved.
        rc_send: bool @ 0x80 [0x1],
        /// RC responder receive faults resolved.
        rc_receive: bool @ 0x81 [0x1],
        /// RC responder RDMA WRITE faults resolved.
        rc_write: bool @ 0x82 [0x1],
        /// RC responder RDMA READ faults resolved.
        rc_read: bool @ 0x83 [0x1],
        /// RC atomics on ODP memory.
        rc_atomic: bool @ 0x84 [0x1],
        /// RC receives from an SRQ on ODP memory.
        rc_srq_receive: bool @ 0x85 [0x1],
        /// UC SEND faults resolved.
        uc_send: bool @ 0xa0 [0x1],
        /// UC receive faults resolved.
        uc_receive: bool @ 0xa1 [0x1],
        /// UD SEND faults resolved.
        ud_send: bool @ 0xc0 [0x1],
        /// UD receives from an SRQ on ODP memory.
        ud_srq_receive: bool @ 0xc5 [0x1],
        /// XRC SEND faults resolved.
        xrc_send: bool @ 0xe0 [0x1],
        /// XRC receive faults resolved.
        xrc_receive: bool @ 0xe1 [0x1],
        /// XRC RDMA WRITE faults resolved.
        xrc_write: bool @ 0xe2 [0x1],
        /// XRC RDMA READ faults resolved.
        xrc_read: bool @ 0xe3 [0x1],
        /// XRC atomics on ODP memory.
        xrc_atomic: bool @ 0xe4 [0x1],
        /// XRC SRQ receives on ODP memory.
        xrc_srq_receive: bool @ 0xe5 [0x1],
        /// DC SEND faults resolved.
        dc_send: bool @ 0x100 [0x1],
        /// DC receive faults resolved (a DCT's own queue; DCTs receive from SRQs).
        dc_receive: bool @ 0x101 [0x1],
        /// DC RDMA WRITE faults resolved.
        dc_write: bool @ 0x102 [0x1],
        /// DC RDMA READ faults resolved.
        dc_read: bool @ 0x103 [0x1],
        /// DC atomics on ODP memory.
        dc_atomic: bool @ 0x104 [0x1],
        /// DCT SRQ receives on ODP memory.
        dc_srq_receive: bool @ 0x105 [0x1],
        /// The memory page-fault scheme (ConnectX-7 and later; 0 here).
        mem_page_fault: bool @ 0x600 [0x1],
    }
}
