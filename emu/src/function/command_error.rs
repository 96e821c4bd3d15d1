//! How a command fails: the status and syndrome the firmware answers with. The function's state
//! keeps the last one ([`Hca::last_error`](super::hca::Hca)), so the vocabulary sits here, below
//! the firmware that raises it.

use cxdirect_hw::cmd::CmdStatus;

/// Syndromes the model reports with failed commands: which check failed. The values are the
/// model's own (real firmware syndromes are undocumented); each names one rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Syndrome {
    /// The opcode is unknown or not implemented by the model.
    UnknownOpcode = 0x0c0d_0001,
    /// The input is shorter than the command's layout.
    InputTooShort = 0x0c0d_0002,
    /// The output buffer is shorter than the command's output layout.
    OutputTooShort = 0x0c0d_0003,
    /// The command is not allowed in the HCA's current state (e.g. before ENABLE_HCA).
    WrongHcaState = 0x0c0d_0010,
    /// INIT_HCA before all boot and init pages were given.
    PagesMissing = 0x0c0d_0011,
    /// An op_mod value the command does not define.
    BadOpMod = 0x0c0d_0012,
    /// ISSI not supported.
    BadIssi = 0x0c0d_0013,
    /// A function id other than 0 (this function).
    BadFunctionId = 0x0c0d_0014,
    /// A page address that is not 4 KiB aligned.
    PageMisaligned = 0x0c0d_0020,
    /// A page that was already given.
    PageDuplicate = 0x0c0d_0021,
    /// A page the device cannot reach through the IOMMU.
    PageUnreachable = 0x0c0d_0022,
    /// More page entries than the input carries.
    PageCountTooLarge = 0x0c0d_0023,
    /// SET_HCA_CAP asked for a value above the maximum capability.
    CapAboveMax = 0x0c0d_0030,
    /// SET_HCA_CAP changed a read-only capability.
    CapReadOnly = 0x0c0d_0031,
    /// A referenced object (UAR, PD, EQ, CQ, ...) does not exist.
    NoSuchObject = 0x0c0d_0040,
    /// The object is still referenced by another object.
    ObjectInUse = 0x0c0d_0041,
    /// The object table is full (log_max_* reached).
    TableFull = 0x0c0d_0042,
    /// Firmware context space ran out: more pages are needed.
    NoContextSpace = 0x0c0d_0043,
    /// A queue size above the capability, or zero.
    BadQueueSize = 0x0c0d_0050,
    /// The page list does not cover the queue buffer.
    PasTooShort = 0x0c0d_0051,
    /// A page list entry or doorbell record address that is misaligned.
    BadAddress = 0x0c0d_0052,
    /// An MSI-X vector beyond the function's table.
    BadVector = 0x0c0d_0053,
    /// A queue state transition the manual does not allow.
    BadStateTransition = 0x0c0d_0054,
    /// The current state named by a MODIFY does not match the queue's state.
    StateMismatch = 0x0c0d_0055,
    /// A WQ type, stride or mode the model does not support.
    BadWqParams = 0x0c0d_0056,
    /// A TIR, RQT or flow steering parameter out of range.
    BadSteeringParams = 0x0c0d_0060,
    /// A flow index outside every group of the table.
    FlowIndexOutOfRange = 0x0c0d_0061,
    /// A flow entry whose match value sets bits outside its group's criteria.
    MatchOutsideCriteria = 0x0c0d_0062,
    /// An unsupported register or register field.
    BadRegister = 0x0c0d_0070,
    /// A memory key parameter out of range (access mode, page size, length, translations).
    BadMkeyParams = 0x0c0d_0080,
    /// A vport other than this function's own.
    BadVport = 0x0c0d_0090,
    /// A QP service type other than RC.
    UnsupportedServiceType = 0x0c0d_00a0,
    /// A QP transition from a state that does not allow it.
    BadQpTransition = 0x0c0d_00a1,
    /// A mandatory attribute of a QP transition is missing (zero where zero is not allowed).
    MissingQpAttribute = 0x0c0d_00a2,
    /// An `opt_param_mask` bit the transition does not take.
    BadQpOptParam = 0x0c0d_00a3,
    /// A path MTU that is no MTU code or above what the port carries.
    BadPathMtu = 0x0c0d_00a4,
    /// A P_Key index past the port's P_Key table.
    BadPkeyIndex = 0x0c0d_00a8,
    /// A RoCE address (GID) index past the port's table, or one that holds no address.
    BadGidIndex = 0x0c0d_00a5,
    /// RoCE is not supported, or not enabled on the vport.
    RoceDisabled = 0x0c0d_00a6,
    /// A QP attribute out of range (sizes, RDMA limits, receive queue kind).
    BadQpParams = 0x0c0d_00a7,
    /// A multicast group command's parameter: a GID that is not multicast, a QP that is not
    /// UD, a QP not attached to the group it leaves.
    BadMcgParams = 0x0c0d_00b0,
    /// The command's `uid` names no live user context (CREATE_UCTX never returned it, or
    /// DESTROY_UCTX took it).
    UnknownUid = 0x0c0d_00c0,
    /// The command's `uid` does not own the object it names: a user context may modify,
    /// query or destroy only its own objects (uid 0, the function's driver, may touch any).
    UidMismatch = 0x0c0d_00c1,
    /// A umem cannot hold what a command placed in it: a range past its end, a misaligned
    /// offset, a page list that does not cover the umem, or a page size out of range.
    BadUmem = 0x0c0d_00c2,
    /// CREATE_UCTX asked for a capability outside `uctx_cap`.
    UctxCapDenied = 0x0c0d_00c3,
    /// SET_PP_RATE_LIMIT named index 0 (unlimited, fixed) or an index past the rate table.
    RateIndexOutOfRange = 0x0c0d_00d0,
    /// SET_PP_RATE_LIMIT asked for a rate outside the QoS page's range.
    RateOutOfRange = 0x0c0d_00d1,
    /// A scheduling element command named a hierarchy the QoS page does not offer (only the
    /// NIC's is), or an element of another hierarchy.
    SchedHierarchy = 0x0c0d_00d8,
    /// A scheduling element of a type (or a TSAR of an arbitration) the QoS page does not
    /// offer, or a MODIFY that names another type than the element's.
    SchedElementType = 0x0c0d_00d9,
    /// A scheduling element's parent is missing or no TSAR, or a queue group has none.
    SchedBadParent = 0x0c0d_00da,
    /// A scheduling element MODIFY named a field that cannot change.
    SchedModifyField = 0x0c0d_00db,
    /// A send queue or QP named a queue group that does not exist.
    NoSuchQueueGroup = 0x0c0d_00dc,
    /// A general object command named an object type the model does not offer.
    UnknownObjType = 0x0c0d_00dd,
    /// ALLOC_MEMIC asked for a size of 0, not a multiple of 64 bytes, past its range, or an
    /// alignment past `log_max_memic_addr_alignment`.
    MemicBadSize = 0x0c0d_00e0,
    /// A device-memory range or address outside the memory.
    MemicOutOfRange = 0x0c0d_00e1,
    /// DEALLOC_MEMIC or MODIFY_MEMIC named no piece ALLOC_MEMIC handed out (or one freed).
    MemicNoPiece = 0x0c0d_00e2,
    /// MODIFY_MEMIC named an operation outside `memic_operations`, or unmapped one not mapped.
    MemicBadOperation = 0x0c0d_00e3,
    /// ALLOC_MEMIC found no free piece of that size and alignment in its range.
    MemicNoSpace = 0x0c0d_00e4,
    /// CREATE_GENERAL_OBJECT asked for a `log_obj_range` outside what the capabilities allow
    /// for the type (RESERVED_QPN: `log_reserved_qpn_granularity` to
    /// `log_reserved_qpn_max_alloc`).
    BadObjRange = 0x0c0d_00e5,
    /// CREATE_GENERAL_OBJECT of type SW_ICM named a piece not inside one of the SW ICM ranges
    /// of the device-memory page.
    SwIcmOutOfRange = 0x0c0d_00e6,
    /// An SW_ICM piece smaller than `2^log_sw_icm_alloc_granularity` bytes.
    SwIcmBadSize = 0x0c0d_00e7,
    /// An SW_ICM piece whose start is not a multiple of the allocation granularity.
    SwIcmMisaligned = 0x0c0d_00e8,
    /// An SW_ICM piece overlapping a live SW_ICM object.
    SwIcmOverlap = 0x0c0d_00e9,
    /// Refused on purpose: [`crate::Fault::RefuseCommand`], [`crate::Fault::RefuseCommandAfter`].
    Refused = 0x0c0d_00f0,
}

/// A failed command: status, syndrome and what failed (for the model's log and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmdError {
    /// Command status returned to the driver.
    pub status: CmdStatus,
    /// Syndrome returned to the driver.
    pub syndrome: Syndrome,
    /// Human-readable detail.
    pub what: &'static str,
}

impl CmdError {
    pub(crate) const fn new(status: CmdStatus, syndrome: Syndrome, what: &'static str) -> Self {
        Self {
            status,
            syndrome,
            what,
        }
    }
}

pub(crate) type CmdResult = Result<(), CmdError>;

pub(crate) const fn bad_param(syndrome: Syndrome, what: &'static str) -> CmdError {
    CmdError::new(CmdStatus::BadParameter, syndrome, what)
}

pub(crate) const fn bad_res(what: &'static str) -> CmdError {
    CmdError::new(CmdStatus::BadResource, Syndrome::NoSuchObject, what)
}

pub(crate) const fn bad_state(syndrome: Syndrome, what: &'static str) -> CmdError {
    CmdError::new(CmdStatus::BadResourceState, syndrome, what)
}

pub(crate) const fn bad_sys_state(what: &'static str) -> CmdError {
    CmdError::new(CmdStatus::BadSystemState, Syndrome::WrongHcaState, what)
}

/// A command refused because the table it adds an object to is full.
pub(crate) const fn table_full(what: &'static str) -> CmdError {
    CmdError::new(CmdStatus::NoResources, Syndrome::TableFull, what)
}
