//! The command interface: queue entries, mailboxes, the input and output headers every command
//! shares, opcodes, command status codes and delivery status codes.
//!
//! A command is posted in a 64-byte entry of the command queue (whose address the driver writes
//! to the init segment). The first 16 bytes of input and output sit inline in the entry; longer
//! inputs and outputs continue in chains of 576-byte mailbox blocks, 512 data bytes each.

use crate::layout;

/// Size of one command queue entry in bytes (the minimum stride).
pub const CMD_ENTRY_SIZE: usize = 64;
/// Bytes of input or output carried inline in the entry.
pub const CMD_INLINE_BYTES: usize = 16;
/// Data bytes carried by one mailbox block.
pub const MAILBOX_DATA_BYTES: usize = 512;
/// Size of one mailbox block in bytes. Blocks are placed at 1 KiB-aligned bus addresses (the
/// pointer fields' low 10 bits are not address bits).
pub const MAILBOX_BLOCK_SIZE: usize = 576;
/// Alignment of mailbox blocks in bytes.
pub const MAILBOX_ALIGN: usize = 1024;
/// Transport type of a command entry: PCIe.
pub const CMD_TYPE_PCIE: u8 = 7;
/// `status_own` bit 0: set by software when posting, cleared by the device on completion.
pub const CMD_OWNER_HW: u8 = 1;

layout! {
    /// A command queue entry (`struct mlx5_cmd_layout` in Linux `device.h`).
    pub struct CmdLayout("mlx5_cmd_layout", 64) {
        /// Transport type: [`CMD_TYPE_PCIE`].
        kind: u8 @ 0x00 [0x8],
        /// Input length in bytes (inline part plus mailbox data).
        inlen: u32 @ 0x20 [0x20],
        /// Bus address of the first input mailbox block (1 KiB aligned), 0 when none.
        in_ptr: u64 @ 0x40 [0x40],
        /// Bus address of the first output mailbox block, 0 when none.
        out_ptr: u64 @ 0x180 [0x40],
        /// Output length in bytes (inline part plus mailbox data).
        outlen: u32 @ 0x1c0 [0x20],
        /// Token echoed in every mailbox block of this command, so stale blocks are detected.
        token: u8 @ 0x1e0 [0x8],
        /// XOR signature over the entry when checksums are enabled (`cmdif_checksum`).
        sig: u8 @ 0x1e8 [0x8],
        /// Delivery status (bits 7:1, see [`DeliveryStatus`]) and ownership (bit 0).
        status_own: u8 @ 0x1f8 [0x8],
    }
    arrays {
        /// The first 16 bytes of input (`in[0..16]`) followed, from byte 16, by the first 16
        /// bytes of output: read as bytes, index 0..32.
        inline_data: u8 @ 0x80 [0x8],
    }
}

impl<T: AsRef<[u8]>> CmdLayout<T> {
    /// The 16 bytes of input carried inline.
    pub fn inline_input(&self) -> [u8; CMD_INLINE_BYTES] {
        let mut out = [0u8; CMD_INLINE_BYTES];
        out.copy_from_slice(&self.as_bytes()[0x10..0x20]);
        out
    }

    /// The 16 bytes of output carried inline.
    pub fn inline_output(&self) -> [u8; CMD_INLINE_BYTES] {
        let mut out = [0u8; CMD_INLINE_BYTES];
        out.copy_from_slice(&self.as_bytes()[0x20..0x30]);
        out
    }

    /// True while the entry belongs to the device.
    pub fn owned_by_hw(&self) -> bool {
        self.status_own() & CMD_OWNER_HW != 0
    }

    /// The delivery status in bits 7:1 of `status_own` (raw; see [`DeliveryStatus::try_from`]).
    pub fn delivery_status_raw(&self) -> u8 {
        self.status_own() >> 1
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CmdLayout<T> {
    /// Copies up to 16 bytes of input into the inline part; the rest stays zero.
    pub fn set_inline_input(&mut self, bytes: &[u8]) -> &mut Self {
        let n = bytes.len().min(CMD_INLINE_BYTES);
        let buf = self.as_bytes_mut();
        buf[0x10..0x20].fill(0);
        buf[0x10..0x10 + n].copy_from_slice(&bytes[..n]);
        self
    }

    /// Copies up to 16 bytes of output into the inline part; the rest stays zero.
    pub fn set_inline_output(&mut self, bytes: &[u8]) -> &mut Self {
        let n = bytes.len().min(CMD_INLINE_BYTES);
        let buf = self.as_bytes_mut();
        buf[0x20..0x30].fill(0);
        buf[0x20..0x20 + n].copy_from_slice(&bytes[..n]);
        self
    }
}

layout! {
    /// One mailbox block of a command's input or output chain (`struct mlx5_cmd_prot_block`).
    pub struct CmdMailbox("mlx5_cmd_prot_block", 576) {
        /// Bus address of the next block in the chain, 0 in the last block.
        next: u64 @ 0x1180 [0x40],
        /// Position of this block in its chain, from 0.
        block_num: u32 @ 0x11c0 [0x20],
        /// The owning command's token.
        token: u8 @ 0x11e8 [0x8],
        /// Control signature (XOR over the control fields) when checksums are enabled.
        ctrl_sig: u8 @ 0x11f0 [0x8],
        /// Signature over the whole block when checksums are enabled.
        sig: u8 @ 0x11f8 [0x8],
    }
    arrays {
        /// The block's 512 data bytes (index 0..512; index 512 and up reaches the control part).
        data: u8 @ 0x0 [0x8],
    }
}

impl<T: AsRef<[u8]>> CmdMailbox<T> {
    /// The block's 512 data bytes.
    pub fn data_bytes(&self) -> &[u8] {
        &self.as_bytes()[..MAILBOX_DATA_BYTES]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CmdMailbox<T> {
    /// The block's 512 data bytes, writable.
    pub fn data_bytes_mut(&mut self) -> &mut [u8] {
        &mut self.as_bytes_mut()[..MAILBOX_DATA_BYTES]
    }
}

layout! {
    /// The header every command input starts with (`mbox_in` in `mlx5_ifc.h`).
    pub struct CmdIn("mbox_in", 0x10) {
        /// Command opcode (see [`Opcode`]).
        opcode: u16 @ 0x00 [0x10],
        /// User context the command acts for; 0 for the driver itself.
        uid: u16 @ 0x10 [0x10],
        /// Operation modifier: its meaning depends on the opcode.
        op_mod: u16 @ 0x30 [0x10],
    }
}

layout! {
    /// The header every command output starts with (`mbox_out` in `mlx5_ifc.h`); also the
    /// whole output of commands that return nothing else.
    pub struct CmdOut("mbox_out", 0x10) {
        /// Command status (see [`CmdStatus`]); 0 is success.
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome: a 32-bit code naming the exact failed check when status is not 0.
        syndrome: u32 @ 0x20 [0x20],
    }
}

/// Bytes of every command output that hold its status and syndrome. Some outputs are shorter
/// than [`CmdOut`] (`enable_hca_out` and `disable_hca_out` are 12 bytes), none is shorter than
/// this: an output length below it is a delivery error.
pub const CMD_STATUS_BYTES: usize = 8;

/// Declares a `#[repr]` enum of device codes with their manual names and a checked conversion.
macro_rules! device_codes {
    (
        $(#[doc = $doc:expr])*
        $vis:vis enum $name:ident : $repr:ty, $what:literal {
            $( $(#[doc = $vdoc:expr])* $variant:ident = $value:literal => $text:literal, )*
        }
    ) => {
        $(#[doc = $doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr($repr)]
        $vis enum $name {
            $( $(#[doc = $vdoc])* #[doc = concat!("`", $text, "` (", stringify!($value), ")")] $variant = $value, )*
        }

        impl $name {
            /// Every code, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The code's name as the manual writes it.
            pub const fn name(self) -> &'static str {
                match self { $($name::$variant => $text,)* }
            }
        }

        impl TryFrom<$repr> for $name {
            type Error = $crate::cmd::UnknownCode;
            fn try_from(raw: $repr) -> Result<Self, Self::Error> {
                match raw {
                    $($value => Ok($name::$variant),)*
                    _ => Err($crate::cmd::UnknownCode { kind: $what, value: raw as u32 }),
                }
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, "{} ({:#x})", self.name(), *self as $repr)
            }
        }
    };
}
pub(crate) use device_codes;

/// A raw code that names no known opcode, status or event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:#x}")]
pub struct UnknownCode {
    /// What kind of code it was meant to be ("opcode", "command status", ...).
    pub kind: &'static str,
    /// The raw value.
    pub value: u32,
}

device_codes! {
    /// Command opcodes (`MLX5_CMD_OP_*`).
    pub enum Opcode: u16, "opcode" {
        QueryHcaCap = 0x100 => "QUERY_HCA_CAP",
        QueryAdapter = 0x101 => "QUERY_ADAPTER",
        InitHca = 0x102 => "INIT_HCA",
        TeardownHca = 0x103 => "TEARDOWN_HCA",
        EnableHca = 0x104 => "ENABLE_HCA",
        DisableHca = 0x105 => "DISABLE_HCA",
        QueryPages = 0x107 => "QUERY_PAGES",
        ManagePages = 0x108 => "MANAGE_PAGES",
        SetHcaCap = 0x109 => "SET_HCA_CAP",
        QueryIssi = 0x10a => "QUERY_ISSI",
        SetIssi = 0x10b => "SET_ISSI",
        SetDriverVersion = 0x10d => "SET_DRIVER_VERSION",
        CreateMkey = 0x200 => "CREATE_MKEY",
        QueryMkey = 0x201 => "QUERY_MKEY",
        DestroyMkey = 0x202 => "DESTROY_MKEY",
        QuerySpecialContexts = 0x203 => "QUERY_SPECIAL_CONTEXTS",
        PageFaultResume = 0x204 => "PAGE_FAULT_RESUME",
        AllocMemic = 0x205 => "ALLOC_MEMIC",
        DeallocMemic = 0x206 => "DEALLOC_MEMIC",
        ModifyMemic = 0x207 => "MODIFY_MEMIC",
        CreateEq = 0x301 => "CREATE_EQ",
        DestroyEq = 0x302 => "DESTROY_EQ",
        QueryEq = 0x303 => "QUERY_EQ",
        GenEqe = 0x304 => "GEN_EQE",
        CreateCq = 0x400 => "CREATE_CQ",
        DestroyCq = 0x401 => "DESTROY_CQ",
        QueryCq = 0x402 => "QUERY_CQ",
        ModifyCq = 0x403 => "MODIFY_CQ",
        CreateQp = 0x500 => "CREATE_QP",
        DestroyQp = 0x501 => "DESTROY_QP",
        Rst2initQp = 0x502 => "RST2INIT_QP",
        Init2rtrQp = 0x503 => "INIT2RTR_QP",
        Rtr2rtsQp = 0x504 => "RTR2RTS_QP",
        Rts2rtsQp = 0x505 => "RTS2RTS_QP",
        Sqerr2rtsQp = 0x506 => "SQERR2RTS_QP",
        Qp2errQp = 0x507 => "2ERR_QP",
        Qp2rstQp = 0x50a => "2RST_QP",
        QueryQp = 0x50b => "QUERY_QP",
        SqdRtsQp = 0x50c => "SQD_RTS_QP",
        Init2initQp = 0x50e => "INIT2INIT_QP",
        CreatePsv = 0x600 => "CREATE_PSV",
        DestroyPsv = 0x601 => "DESTROY_PSV",
        CreateSrq = 0x700 => "CREATE_SRQ",
        DestroySrq = 0x701 => "DESTROY_SRQ",
        QuerySrq = 0x702 => "QUERY_SRQ",
        ArmRq = 0x703 => "ARM_RQ",
        CreateXrcSrq = 0x705 => "CREATE_XRC_SRQ",
        DestroyXrcSrq = 0x706 => "DESTROY_XRC_SRQ",
        QueryXrcSrq = 0x707 => "QUERY_XRC_SRQ",
        ArmXrcSrq = 0x708 => "ARM_XRC_SRQ",
        CreateDct = 0x710 => "CREATE_DCT",
        DestroyDct = 0x711 => "DESTROY_DCT",
        DrainDct = 0x712 => "DRAIN_DCT",
        QueryDct = 0x713 => "QUERY_DCT",
        ArmDctForKeyViolation = 0x714 => "ARM_DCT_FOR_KEY_VIOLATION",
        CreateXrq = 0x717 => "CREATE_XRQ",
        DestroyXrq = 0x718 => "DESTROY_XRQ",
        QueryXrq = 0x719 => "QUERY_XRQ",
        ArmXrq = 0x71a => "ARM_XRQ",
        QueryEswFunctions = 0x740 => "QUERY_ESW_FUNCTIONS",
        QueryVportState = 0x750 => "QUERY_VPORT_STATE",
        ModifyVportState = 0x751 => "MODIFY_VPORT_STATE",
        QueryEswVportContext = 0x752 => "QUERY_ESW_VPORT_CONTEXT",
        ModifyEswVportContext = 0x753 => "MODIFY_ESW_VPORT_CONTEXT",
        QueryNicVportContext = 0x754 => "QUERY_NIC_VPORT_CONTEXT",
        ModifyNicVportContext = 0x755 => "MODIFY_NIC_VPORT_CONTEXT",
        QueryRoceAddress = 0x760 => "QUERY_ROCE_ADDRESS",
        SetRoceAddress = 0x761 => "SET_ROCE_ADDRESS",
        QueryHcaVportPkey = 0x765 => "QUERY_HCA_VPORT_PKEY",
        QueryVportCounter = 0x770 => "QUERY_VPORT_COUNTER",
        AllocQCounter = 0x771 => "ALLOC_Q_COUNTER",
        DeallocQCounter = 0x772 => "DEALLOC_Q_COUNTER",
        QueryQCounter = 0x773 => "QUERY_Q_COUNTER",
        SetPpRateLimit = 0x780 => "SET_PP_RATE_LIMIT",
        CreateSchedulingElement = 0x782 => "CREATE_SCHEDULING_ELEMENT",
        DestroySchedulingElement = 0x783 => "DESTROY_SCHEDULING_ELEMENT",
        ModifySchedulingElement = 0x784 => "MODIFY_SCHEDULING_ELEMENT",
        QuerySchedulingElement = 0x785 => "QUERY_SCHEDULING_ELEMENT",
        AllocPd = 0x800 => "ALLOC_PD",
        DeallocPd = 0x801 => "DEALLOC_PD",
        AllocUar = 0x802 => "ALLOC_UAR",
        DeallocUar = 0x803 => "DEALLOC_UAR",
        AccessReg = 0x805 => "ACCESS_REG",
        AttachToMcg = 0x806 => "ATTACH_TO_MCG",
        DetachFromMcg = 0x807 => "DETACH_FROM_MCG",
        Nop = 0x80d => "NOP",
        AllocXrcd = 0x80e => "ALLOC_XRCD",
        DeallocXrcd = 0x80f => "DEALLOC_XRCD",
        AllocTransportDomain = 0x816 => "ALLOC_TRANSPORT_DOMAIN",
        DeallocTransportDomain = 0x817 => "DEALLOC_TRANSPORT_DOMAIN",
        CreateTir = 0x900 => "CREATE_TIR",
        ModifyTir = 0x901 => "MODIFY_TIR",
        DestroyTir = 0x902 => "DESTROY_TIR",
        QueryTir = 0x903 => "QUERY_TIR",
        CreateSq = 0x904 => "CREATE_SQ",
        ModifySq = 0x905 => "MODIFY_SQ",
        DestroySq = 0x906 => "DESTROY_SQ",
        QuerySq = 0x907 => "QUERY_SQ",
        CreateRq = 0x908 => "CREATE_RQ",
        ModifyRq = 0x909 => "MODIFY_RQ",
        DestroyRq = 0x90a => "DESTROY_RQ",
        QueryRq = 0x90b => "QUERY_RQ",
        CreateRmp = 0x90c => "CREATE_RMP",
        ModifyRmp = 0x90d => "MODIFY_RMP",
        DestroyRmp = 0x90e => "DESTROY_RMP",
        QueryRmp = 0x90f => "QUERY_RMP",
        CreateTis = 0x912 => "CREATE_TIS",
        ModifyTis = 0x913 => "MODIFY_TIS",
        DestroyTis = 0x914 => "DESTROY_TIS",
        QueryTis = 0x915 => "QUERY_TIS",
        CreateRqt = 0x916 => "CREATE_RQT",
        ModifyRqt = 0x917 => "MODIFY_RQT",
        DestroyRqt = 0x918 => "DESTROY_RQT",
        QueryRqt = 0x919 => "QUERY_RQT",
        SetFlowTableRoot = 0x92f => "SET_FLOW_TABLE_ROOT",
        CreateFlowTable = 0x930 => "CREATE_FLOW_TABLE",
        DestroyFlowTable = 0x931 => "DESTROY_FLOW_TABLE",
        QueryFlowTable = 0x932 => "QUERY_FLOW_TABLE",
        CreateFlowGroup = 0x933 => "CREATE_FLOW_GROUP",
        DestroyFlowGroup = 0x934 => "DESTROY_FLOW_GROUP",
        QueryFlowGroup = 0x935 => "QUERY_FLOW_GROUP",
        SetFlowTableEntry = 0x936 => "SET_FLOW_TABLE_ENTRY",
        QueryFlowTableEntry = 0x937 => "QUERY_FLOW_TABLE_ENTRY",
        DeleteFlowTableEntry = 0x938 => "DELETE_FLOW_TABLE_ENTRY",
        AllocFlowCounter = 0x939 => "ALLOC_FLOW_COUNTER",
        DeallocFlowCounter = 0x93a => "DEALLOC_FLOW_COUNTER",
        QueryFlowCounter = 0x93b => "QUERY_FLOW_COUNTER",
        ModifyFlowTable = 0x93c => "MODIFY_FLOW_TABLE",
        AllocPacketReformatContext = 0x93d => "ALLOC_PACKET_REFORMAT_CONTEXT",
        DeallocPacketReformatContext = 0x93e => "DEALLOC_PACKET_REFORMAT_CONTEXT",
        AllocModifyHeaderContext = 0x940 => "ALLOC_MODIFY_HEADER_CONTEXT",
        DeallocModifyHeaderContext = 0x941 => "DEALLOC_MODIFY_HEADER_CONTEXT",
        CreateGeneralObject = 0xa00 => "CREATE_GENERAL_OBJECT",
        ModifyGeneralObject = 0xa01 => "MODIFY_GENERAL_OBJECT",
        QueryGeneralObject = 0xa02 => "QUERY_GENERAL_OBJECT",
        DestroyGeneralObject = 0xa03 => "DESTROY_GENERAL_OBJECT",
        CreateUctx = 0xa04 => "CREATE_UCTX",
        DestroyUctx = 0xa06 => "DESTROY_UCTX",
        CreateUmem = 0xa08 => "CREATE_UMEM",
        DestroyUmem = 0xa0a => "DESTROY_UMEM",
        /// Software steering: make the device drop what it cached of steering entries in ICM
        /// (rdma-core's `dr_devx_sync_steering`).
        SyncSteering = 0xb00 => "SYNC_STEERING",
    }
}

device_codes! {
    /// Command completion status, byte 0 of every command output.
    pub enum CmdStatus: u8, "command status" {
        /// The command succeeded.
        Ok = 0x00 => "OK",
        InternalError = 0x01 => "INTERNAL_ERR",
        BadOpcode = 0x02 => "BAD_OP",
        BadParameter = 0x03 => "BAD_PARAM",
        BadSystemState = 0x04 => "BAD_SYS_STATE",
        BadResource = 0x05 => "BAD_RES",
        ResourceBusy = 0x06 => "RES_BUSY",
        NotReady = 0x07 => "NOT_READY",
        LimitsExceeded = 0x08 => "EXCEED_LIM",
        BadResourceState = 0x09 => "BAD_RES_STATE",
        BadIndex = 0x0a => "BAD_INDEX",
        NoResources = 0x0f => "NO_RES",
        BadQpState = 0x10 => "BAD_QP_STATE",
        BadPacket = 0x30 => "BAD_PKT",
        /// Destroying a CQ that still has outstanding CQEs, or a size too small for them.
        BadSize = 0x40 => "BAD_SIZE_OUTS_CQES",
        BadInputLength = 0x50 => "BAD_INP_LEN",
        BadOutputLength = 0x51 => "BAD_OUTP_LEN",
    }
}

device_codes! {
    /// Delivery status in bits 7:1 of a command entry's `status_own`: whether the device could
    /// read the command at all. Separate from (and checked before) the command status.
    pub enum DeliveryStatus: u8, "delivery status" {
        /// Delivered; the command status tells the outcome.
        Ok = 0x00 => "OK",
        SignatureError = 0x01 => "SIGNATURE_ERR",
        TokenError = 0x02 => "TOKEN_ERR",
        BadBlockNumber = 0x03 => "BAD_BLOCK_NUMBER",
        OutputPointerAlignment = 0x04 => "OUTPUT_POINTER_ALIGNMENT_ERR",
        InputPointerAlignment = 0x05 => "INPUT_POINTER_ALIGNMENT_ERR",
        FirmwareError = 0x06 => "FW_ERR",
        InputLengthError = 0x07 => "IN_LENGTH_ERR",
        OutputLengthError = 0x08 => "OUT_LENGTH_ERR",
        ReservedNotZero = 0x09 => "RES_FLD_NOT_CLR_ERR",
        BadCommandType = 0x10 => "CMD_TYPE_ERR",
    }
}

/// Number of mailbox blocks needed to carry `len` bytes of input or output.
pub const fn mailbox_blocks(len: usize) -> usize {
    len.saturating_sub(CMD_INLINE_BYTES)
        .div_ceil(MAILBOX_DATA_BYTES)
}

/// XOR of all bytes: the signature the command interface uses when checksums are on. A block
/// whose signature byte is included in the range XORs to 0xff when valid.
pub fn xor8(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0, |acc, b| acc ^ b)
}
