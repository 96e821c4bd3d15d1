//! The PCI face of the modelled ConnectX-6 Dx function: its 4 KiB PCI Express configuration space
//! ([`ConfigSpace`]) and the MSI-X table and pending-bit array that live in BAR0 ([`MsixTable`]).
//!
//! Both are plain state machines with no I/O, no threads and no `unsafe`: the in-process device
//! model and the vfio-user server feed them the guest's accesses and then ask what the guest has set
//! up (is memory decoding on, where is BAR0, may the function master the bus, should a vector fire).
//! Everything a guest writes is hostile input: any offset and any length is either served or refused
//! with an error, never a panic.
//!
//! Configuration space layout (byte offsets):
//!
//! | offset          | contents                                                             |
//! |-----------------|----------------------------------------------------------------------|
//! | `0x000..0x040`  | type 0 header; BAR0 is a 64-bit prefetchable memory BAR, BARs 2-5 absent |
//! | [`PM_CAP_OFFSET`] (`0x40`)   | Power Management, version 3, D0 and D3hot            |
//! | [`PCIE_CAP_OFFSET`] (`0x60`) | PCI Express, version 2, endpoint, FLR, x16 at 16 GT/s |
//! | [`MSIX_CAP_OFFSET`] (`0xa0`) | MSI-X, table and PBA in BAR0                          |
//! | [`VSC_CAP_OFFSET`] (`0xc0`)  | vendor-specific gateway, 0x18 bytes (last in the chain; [`crate::pci_vsc`]) |
//! | [`EXT_CAP_OFFSET`] (`0x100`) | no extended capabilities: the header dword reads 0     |
//!
//! Multi-byte registers are little-endian, as on the PCI bus.

use std::fmt;
use std::ops::Range;

use thiserror::Error;

use crate::pci_vsc::{VendorGateway, CAP_ID_VENDOR, VSC_CAP_LEN, VSC_CTRL, VSC_DATA};

// ---------------------------------------------------------------------------------------------
// Identity and sizes
// ---------------------------------------------------------------------------------------------

/// Size of the function's configuration space in bytes (PCI Express extended configuration space).
pub const CONFIG_SPACE_SIZE: usize = 4096;

/// Vendor ID reported at [`REG_VENDOR_ID`]: Mellanox Technologies (NVIDIA networking).
pub const VENDOR_ID: u16 = 0x15b3;
/// Device ID reported at [`REG_DEVICE_ID`]: ConnectX-6 Dx physical function.
pub const DEVICE_ID: u16 = 0x101d;
/// Revision ID reported at [`REG_REVISION_ID`].
pub const REVISION_ID: u8 = 0;
/// Class code (base class, sub-class, programming interface) at [`REG_CLASS_CODE`]: Ethernet
/// controller.
pub const CLASS_CODE: u32 = 0x02_00_00;
/// Subsystem vendor ID reported at [`REG_SUBSYSTEM_VENDOR_ID`].
pub const SUBSYSTEM_VENDOR_ID: u16 = 0x15b3;
/// Subsystem ID reported at [`REG_SUBSYSTEM_ID`].
pub const SUBSYSTEM_ID: u16 = 0x0016;

/// Default size of BAR0 in bytes (32 MiB), matching the ConnectX-6 Dx.
pub const DEFAULT_BAR0_SIZE: u64 = 32 << 20;
/// Smallest BAR0 size accepted, in bytes (4 KiB): one page, as the PCI spec asks of memory BARs
/// that may be mapped separately.
pub const MIN_BAR0_SIZE: u64 = 4096;
/// Default number of MSI-X vectors (64).
pub const DEFAULT_MSIX_VECTORS: u16 = 64;
/// Largest number of MSI-X vectors a function can advertise (2048: an 11-bit N-1 field).
pub const MAX_MSIX_VECTORS: u16 = 2048;
/// Default byte offset of the MSI-X table inside BAR0, where ConnectX parts place it.
pub const DEFAULT_MSIX_TABLE_OFFSET: u32 = 0x2000;
/// Default byte offset of the MSI-X pending-bit array inside BAR0, where ConnectX parts place it.
pub const DEFAULT_MSIX_PBA_OFFSET: u32 = 0x3000;
/// Size of one MSI-X table entry in bytes.
pub const MSIX_ENTRY_SIZE: u64 = 16;

// ---------------------------------------------------------------------------------------------
// Type 0 header registers (byte offsets into configuration space)
// ---------------------------------------------------------------------------------------------

/// Vendor ID, 16 bits, read-only.
pub const REG_VENDOR_ID: u64 = 0x00;
/// Device ID, 16 bits, read-only.
pub const REG_DEVICE_ID: u64 = 0x02;
/// Command register, 16 bits; see the `COMMAND_*` bits.
pub const REG_COMMAND: u64 = 0x04;
/// Status register, 16 bits, read-only here.
pub const REG_STATUS: u64 = 0x06;
/// Revision ID, 8 bits, read-only.
pub const REG_REVISION_ID: u64 = 0x08;
/// Class code, 24 bits (programming interface, sub-class, base class), read-only.
pub const REG_CLASS_CODE: u64 = 0x09;
/// Cache line size, 8 bits, read-write with no effect (PCI Express keeps it for software).
pub const REG_CACHE_LINE_SIZE: u64 = 0x0c;
/// Header type, 8 bits, read-only: 0 (type 0, single function).
pub const REG_HEADER_TYPE: u64 = 0x0e;
/// BAR0, low dword: address bits 31:4 plus the memory type bits.
pub const REG_BAR0: u64 = 0x10;
/// BAR0, high dword: address bits 63:32 (BAR0 is 64-bit, so it consumes the BAR1 slot).
pub const REG_BAR0_HIGH: u64 = 0x14;
/// BAR2, unimplemented: reads 0, ignores writes (as do BAR3-5 at `0x1c`, `0x20`, `0x24`).
pub const REG_BAR2: u64 = 0x18;
/// Subsystem vendor ID, 16 bits, read-only.
pub const REG_SUBSYSTEM_VENDOR_ID: u64 = 0x2c;
/// Subsystem ID, 16 bits, read-only.
pub const REG_SUBSYSTEM_ID: u64 = 0x2e;
/// Expansion ROM BAR, 32 bits: absent, reads 0.
pub const REG_EXPANSION_ROM: u64 = 0x30;
/// Capabilities pointer, 8 bits: offset of the first capability ([`PM_CAP_OFFSET`]).
pub const REG_CAPABILITIES_POINTER: u64 = 0x34;
/// Interrupt line, 8 bits, read-write scratch for software.
pub const REG_INTERRUPT_LINE: u64 = 0x3c;
/// Interrupt pin, 8 bits, read-only 0: the function has no INTx pin.
pub const REG_INTERRUPT_PIN: u64 = 0x3d;

/// Command bit 1: the function decodes memory accesses to BAR0.
pub const COMMAND_MEMORY_SPACE: u16 = 1 << 1;
/// Command bit 2: the function may issue DMA and MSI-X writes.
pub const COMMAND_BUS_MASTER: u16 = 1 << 2;
/// Command bit 10: INTx assertion disabled (kept writable for software; there is no INTx).
pub const COMMAND_INTERRUPT_DISABLE: u16 = 1 << 10;
/// Status bit 4: the capabilities list at [`REG_CAPABILITIES_POINTER`] is valid.
pub const STATUS_CAPABILITIES_LIST: u16 = 1 << 4;

/// BAR low-dword type bits 2:1 = `10b`: the BAR is 64 bits wide.
pub const BAR_MEM_TYPE_64: u32 = 0b10 << 1;
/// BAR low-dword bit 3: the memory behind the BAR is prefetchable.
pub const BAR_PREFETCHABLE: u32 = 1 << 3;

// ---------------------------------------------------------------------------------------------
// Capabilities
// ---------------------------------------------------------------------------------------------

/// Capability ID of Power Management.
pub const CAP_ID_PM: u8 = 0x01;
/// Capability ID of PCI Express.
pub const CAP_ID_PCIE: u8 = 0x10;
/// Capability ID of MSI-X.
pub const CAP_ID_MSIX: u8 = 0x11;

/// Configuration-space offset of the Power Management capability (first in the chain).
pub const PM_CAP_OFFSET: u64 = 0x40;
/// Configuration-space offset of the PCI Express capability (second in the chain).
pub const PCIE_CAP_OFFSET: u64 = 0x60;
/// Configuration-space offset of the MSI-X capability (third in the chain).
pub const MSIX_CAP_OFFSET: u64 = 0xa0;
/// Configuration-space offset of the vendor-specific capability, the gateway of
/// [`crate::pci_vsc`] (last in the chain; next pointer 0), where a ConnectX has it.
pub const VSC_CAP_OFFSET: u64 = 0xc0;
/// Configuration-space offset of the first extended capability header; it reads 0 (none).
pub const EXT_CAP_OFFSET: u64 = 0x100;

/// Offset inside the PM capability of the Power Management Capabilities register (16 bits).
pub const PM_PMC: u64 = 0x02;
/// Offset inside the PM capability of the Control/Status register (16 bits); bits 1:0 are the
/// power state.
pub const PM_PMCSR: u64 = 0x04;

/// Offset inside the PCIe capability of the PCI Express Capabilities register (16 bits).
pub const PCIE_FLAGS: u64 = 0x02;
/// Offset inside the PCIe capability of Device Capabilities (32 bits).
pub const PCIE_DEVCAP: u64 = 0x04;
/// Offset inside the PCIe capability of Device Control (16 bits).
pub const PCIE_DEVCTL: u64 = 0x08;
/// Offset inside the PCIe capability of Device Status (16 bits).
pub const PCIE_DEVSTA: u64 = 0x0a;
/// Offset inside the PCIe capability of Link Capabilities (32 bits).
pub const PCIE_LNKCAP: u64 = 0x0c;
/// Offset inside the PCIe capability of Link Control (16 bits).
pub const PCIE_LNKCTL: u64 = 0x10;
/// Offset inside the PCIe capability of Link Status (16 bits).
pub const PCIE_LNKSTA: u64 = 0x12;
/// Offset inside the PCIe capability of Device Capabilities 2 (32 bits).
pub const PCIE_DEVCAP2: u64 = 0x24;
/// Offset inside the PCIe capability of Device Control 2 (16 bits).
pub const PCIE_DEVCTL2: u64 = 0x28;
/// Offset inside the PCIe capability of Link Capabilities 2 (32 bits).
pub const PCIE_LNKCAP2: u64 = 0x2c;
/// Offset inside the PCIe capability of Link Control 2 (16 bits).
pub const PCIE_LNKCTL2: u64 = 0x30;
/// Length in bytes of the version 2 PCIe capability structure of an endpoint.
pub const PCIE_CAP_LEN: u64 = 0x3c;

/// Device Capabilities bit 28: the function supports Function Level Reset.
pub const PCIE_DEVCAP_FLR: u32 = 1 << 28;
/// Device Control bit 15: writing 1 initiates a Function Level Reset; always reads 0.
pub const PCIE_DEVCTL_INITIATE_FLR: u16 = 1 << 15;
/// Device Control bits 7:5: Max_Payload_Size (128 << n bytes).
pub const PCIE_DEVCTL_MPS_MASK: u16 = 0b111 << 5;
/// Device Control bits 14:12: Max_Read_Request_Size (128 << n bytes).
pub const PCIE_DEVCTL_MRRS_MASK: u16 = 0b111 << 12;
/// Link speed code for 16 GT/s (PCIe Gen4), as used in Link Capabilities and Link Status.
pub const PCIE_LINK_SPEED_16GT: u16 = 4;
/// Link width of the modelled function, in lanes.
pub const PCIE_LINK_WIDTH: u16 = 16;

/// Offset inside the MSI-X capability of Message Control (16 bits).
pub const MSIX_MSG_CTRL: u64 = 0x02;
/// Offset inside the MSI-X capability of the Table Offset/BIR register (32 bits).
pub const MSIX_TABLE: u64 = 0x04;
/// Offset inside the MSI-X capability of the PBA Offset/BIR register (32 bits).
pub const MSIX_PBA: u64 = 0x08;
/// Message Control bit 15: MSI-X enabled.
pub const MSIX_CTRL_ENABLE: u16 = 1 << 15;
/// Message Control bit 14: every vector of the function is masked.
pub const MSIX_CTRL_FUNCTION_MASK: u16 = 1 << 14;
/// Message Control bits 10:0: table size, encoded as the number of vectors minus one.
pub const MSIX_CTRL_TABLE_SIZE_MASK: u16 = 0x07ff;
/// MSI-X entry Vector Control bit 0: the vector is masked.
pub const MSIX_VECTOR_CTRL_MASKED: u32 = 1;

// Byte positions of the two registers whose writes need more than a bit mask.
const DEVCTL_HIGH_BYTE: usize = (PCIE_CAP_OFFSET + PCIE_DEVCTL + 1) as usize;
const PMCSR_LOW_BYTE: usize = (PM_CAP_OFFSET + PM_PMCSR) as usize;
const INITIATE_FLR_IN_HIGH_BYTE: u8 = (PCIE_DEVCTL_INITIATE_FLR >> 8) as u8;

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Which MSI-X structure inside BAR0 an error or access concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsixRegion {
    /// The vector table: [`MSIX_ENTRY_SIZE`] bytes per vector.
    Table,
    /// The pending-bit array: one bit per vector, in whole quadwords.
    Pba,
}

impl fmt::Display for MsixRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Table => "MSI-X table",
            Self::Pba => "MSI-X pending-bit array",
        })
    }
}

/// Errors from building or accessing a [`ConfigSpace`].
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// An access touched bytes outside the 4096-byte configuration space; nothing was read or
    /// written.
    #[error(
        "config space access of {len} bytes at offset {offset:#x} runs past the end of the \
         4096-byte configuration space; keep offset + length <= 0x1000"
    )]
    OutOfRange {
        /// Byte offset the access started at.
        offset: u64,
        /// Length of the access in bytes.
        len: usize,
    },
    /// The requested BAR0 size cannot be expressed by the BAR sizing protocol.
    #[error("BAR0 size {size:#x} bytes is not a power of two of at least 4 KiB (0x1000)")]
    InvalidBar0Size {
        /// The rejected size in bytes.
        size: u64,
    },
    /// The requested MSI-X vector count does not fit the 11-bit table size field.
    #[error("MSI-X vector count {count} is outside 1..=2048")]
    InvalidMsixVectors {
        /// The rejected vector count.
        count: u16,
    },
    /// An MSI-X structure offset leaves no room for the 3-bit BIR field.
    #[error("{region} offset {offset:#x} in BAR0 is not a multiple of 8 bytes")]
    MsixRegionMisaligned {
        /// The structure whose offset is misaligned.
        region: MsixRegion,
        /// The rejected byte offset inside BAR0.
        offset: u32,
    },
    /// An MSI-X structure would extend past the end of BAR0.
    #[error(
        "{region} at BAR0 offset {offset:#x} ({len} bytes) does not fit in a BAR0 of {bar0_size:#x} \
         bytes; move it or enlarge BAR0"
    )]
    MsixRegionOutsideBar0 {
        /// The structure that does not fit.
        region: MsixRegion,
        /// Its byte offset inside BAR0.
        offset: u32,
        /// Its length in bytes.
        len: u64,
        /// The size of BAR0 in bytes.
        bar0_size: u64,
    },
    /// The MSI-X table and pending-bit array would share bytes.
    #[error(
        "MSI-X table at BAR0 offset {table_offset:#x} ({table_len} bytes) overlaps the pending-bit \
         array at {pba_offset:#x} ({pba_len} bytes); place them apart"
    )]
    MsixRegionsOverlap {
        /// Byte offset of the table inside BAR0.
        table_offset: u32,
        /// Length of the table in bytes.
        table_len: u64,
        /// Byte offset of the pending-bit array inside BAR0.
        pba_offset: u32,
        /// Length of the pending-bit array in bytes.
        pba_len: u64,
    },
}

/// Errors from building or accessing an [`MsixTable`].
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum MsixError {
    /// The vector count does not fit the 11-bit table size field.
    #[error("MSI-X vector count {count} is outside 1..=2048")]
    InvalidVectorCount {
        /// The rejected vector count.
        count: u16,
    },
    /// A vector number at or past the table size was triggered or looked up.
    #[error("MSI-X vector {vector} does not exist: the table has {vectors} vectors")]
    VectorOutOfRange {
        /// The vector asked for.
        vector: u16,
        /// The number of vectors in the table.
        vectors: u16,
    },
    /// The access was not a naturally aligned 4- or 8-byte access, which is all MSI-X allows.
    #[error(
        "{region} access of {len} bytes at offset {offset:#x} is not a naturally aligned 4- or \
         8-byte access"
    )]
    BadAccess {
        /// The structure accessed.
        region: MsixRegion,
        /// Byte offset of the access inside the structure.
        offset: u64,
        /// Length of the access in bytes.
        len: usize,
    },
    /// The access ran past the end of the structure.
    #[error("{region} access of {len} bytes at offset {offset:#x} runs past its end ({region_len} bytes)")]
    OutOfRange {
        /// The structure accessed.
        region: MsixRegion,
        /// Byte offset of the access inside the structure.
        offset: u64,
        /// Length of the access in bytes.
        len: usize,
        /// Length of the structure in bytes.
        region_len: u64,
    },
}

// ---------------------------------------------------------------------------------------------
// Layout parameters
// ---------------------------------------------------------------------------------------------

/// The construction parameters of the function: BAR0's size and where MSI-X lives in it.
///
/// [`FunctionLayout::default`] gives the ConnectX-6 Dx values: a 32 MiB BAR0, 64 vectors, the
/// table at `0x2000` and the pending-bit array at `0x3000`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FunctionLayout {
    /// Size of BAR0 in bytes: a power of two, at least [`MIN_BAR0_SIZE`].
    pub bar0_size: u64,
    /// Number of MSI-X vectors, `1..=`[`MAX_MSIX_VECTORS`].
    pub msix_vectors: u16,
    /// Byte offset of the MSI-X table inside BAR0; a multiple of 8.
    pub msix_table_offset: u32,
    /// Byte offset of the MSI-X pending-bit array inside BAR0; a multiple of 8.
    pub msix_pba_offset: u32,
}

impl Default for FunctionLayout {
    fn default() -> Self {
        Self {
            bar0_size: DEFAULT_BAR0_SIZE,
            msix_vectors: DEFAULT_MSIX_VECTORS,
            msix_table_offset: DEFAULT_MSIX_TABLE_OFFSET,
            msix_pba_offset: DEFAULT_MSIX_PBA_OFFSET,
        }
    }
}

impl FunctionLayout {
    /// Length of the MSI-X table in bytes ([`MSIX_ENTRY_SIZE`] per vector).
    pub fn msix_table_len(&self) -> u64 {
        table_len(self.msix_vectors)
    }

    /// Length of the MSI-X pending-bit array in bytes (one bit per vector, whole quadwords).
    pub fn msix_pba_len(&self) -> u64 {
        pba_len(self.msix_vectors)
    }

    /// Checks that BAR0's size is expressible and that the MSI-X table and pending-bit array are
    /// aligned, inside BAR0 and apart.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.bar0_size.is_power_of_two() || self.bar0_size < MIN_BAR0_SIZE {
            return Err(ConfigError::InvalidBar0Size {
                size: self.bar0_size,
            });
        }
        if !valid_vector_count(self.msix_vectors) {
            return Err(ConfigError::InvalidMsixVectors {
                count: self.msix_vectors,
            });
        }
        let regions = [
            (
                MsixRegion::Table,
                self.msix_table_offset,
                self.msix_table_len(),
            ),
            (MsixRegion::Pba, self.msix_pba_offset, self.msix_pba_len()),
        ];
        for (region, offset, len) in regions {
            // The low three bits of the Offset/BIR registers hold the BIR, so offsets are 8-aligned.
            if offset % 8 != 0 {
                return Err(ConfigError::MsixRegionMisaligned { region, offset });
            }
            if u64::from(offset) + len > self.bar0_size {
                return Err(ConfigError::MsixRegionOutsideBar0 {
                    region,
                    offset,
                    len,
                    bar0_size: self.bar0_size,
                });
            }
        }
        let table = u64::from(self.msix_table_offset)
            ..u64::from(self.msix_table_offset) + self.msix_table_len();
        let pba =
            u64::from(self.msix_pba_offset)..u64::from(self.msix_pba_offset) + self.msix_pba_len();
        if table.start < pba.end && pba.start < table.end {
            return Err(ConfigError::MsixRegionsOverlap {
                table_offset: self.msix_table_offset,
                table_len: self.msix_table_len(),
                pba_offset: self.msix_pba_offset,
                pba_len: self.msix_pba_len(),
            });
        }
        Ok(())
    }
}

fn valid_vector_count(count: u16) -> bool {
    (1..=MAX_MSIX_VECTORS).contains(&count)
}

fn table_len(vectors: u16) -> u64 {
    u64::from(vectors) * MSIX_ENTRY_SIZE
}

fn pba_len(vectors: u16) -> u64 {
    u64::from(vectors).div_ceil(64) * 8
}

// ---------------------------------------------------------------------------------------------
// Configuration space
// ---------------------------------------------------------------------------------------------

/// A function's power state as set through the PM capability's Control/Status register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerState {
    /// Fully on; the power-on state.
    D0,
    /// Software-requested low power. The function keeps its state (No_Soft_Reset is set), but a
    /// faithful model should not decode BAR0 while here.
    D3Hot,
}

/// The 4096-byte PCI Express configuration space of the modelled function.
///
/// It is a byte image plus a per-byte write mask: a write changes only the bits its mask allows,
/// which is how read-only fields, the BAR sizing protocol and absent BARs all fall out of one
/// mechanism. Two registers need more than a mask: Initiate FLR (latched for
/// [`ConfigSpace::take_flr_request`], reads back 0) and the power state (unsupported D1/D2 writes are
/// discarded, as the PM spec requires).
#[derive(Clone)]
pub struct ConfigSpace {
    layout: FunctionLayout,
    bytes: Box<[u8; CONFIG_SPACE_SIZE]>,
    wmask: Box<[u8; CONFIG_SPACE_SIZE]>,
    flr_requested: bool,
    gateway: VendorGateway,
}

impl fmt::Debug for ConfigSpace {
    // The raw 8 KiB of image and mask would drown the fields anyone debugging wants to see.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfigSpace")
            .field("layout", &self.layout)
            .field("command", &format_args!("{:#06x}", self.command()))
            .field("bar0_address", &format_args!("{:#x}", self.bar0_address()))
            .field(
                "msix_control",
                &format_args!("{:#06x}", self.msix_control()),
            )
            .field("power_state", &self.power_state())
            .field("flr_requested", &self.flr_requested)
            .finish()
    }
}

impl Default for ConfigSpace {
    /// A configuration space with [`FunctionLayout::default`].
    fn default() -> Self {
        Self::build(FunctionLayout::default())
    }
}

impl ConfigSpace {
    /// Builds the power-on configuration space for `layout`, after checking it with
    /// [`FunctionLayout::validate`].
    pub fn new(layout: FunctionLayout) -> Result<Self, ConfigError> {
        layout.validate()?;
        Ok(Self::build(layout))
    }

    fn build(layout: FunctionLayout) -> Self {
        let mut space = Self {
            layout,
            bytes: Box::new([0; CONFIG_SPACE_SIZE]),
            wmask: Box::new([0; CONFIG_SPACE_SIZE]),
            flr_requested: false,
            gateway: VendorGateway::default(),
        };
        space.reset();
        space
    }

    /// The layout this space was built with.
    pub fn layout(&self) -> FunctionLayout {
        self.layout
    }

    /// Restores every register to its power-on value and drops any pending FLR request, as a
    /// Function Level Reset does.
    pub fn reset(&mut self) {
        self.bytes.fill(0);
        self.wmask.fill(0);
        self.flr_requested = false;
        self.gateway = VendorGateway::default();
        let layout = self.layout;
        let mut img = Image {
            bytes: &mut self.bytes,
            wmask: &mut self.wmask,
        };

        // Type 0 header.
        img.reg16(REG_VENDOR_ID, VENDOR_ID, 0);
        img.reg16(REG_DEVICE_ID, DEVICE_ID, 0);
        img.reg16(
            REG_COMMAND,
            0,
            COMMAND_MEMORY_SPACE | COMMAND_BUS_MASTER | COMMAND_INTERRUPT_DISABLE,
        );
        img.reg16(REG_STATUS, STATUS_CAPABILITIES_LIST, 0);
        img.reg8(REG_REVISION_ID, REVISION_ID, 0);
        let [class_pi, class_sub, class_base, _] = CLASS_CODE.to_le_bytes();
        img.reg8(REG_CLASS_CODE, class_pi, 0);
        img.reg8(REG_CLASS_CODE + 1, class_sub, 0);
        img.reg8(REG_CLASS_CODE + 2, class_base, 0);
        img.reg8(REG_CACHE_LINE_SIZE, 0, 0xff);
        img.reg8(REG_HEADER_TYPE, 0, 0);
        // Only the address bits at or above the BAR's size are writable, so writing all-ones
        // reads back the size mask with the (read-only) type bits: the sizing protocol for free.
        let bar0_wmask = !(layout.bar0_size.wrapping_sub(1)) & !0xf;
        let [bar0_wmask_lo, bar0_wmask_hi] = split_u64(bar0_wmask);
        img.reg32(REG_BAR0, BAR_MEM_TYPE_64 | BAR_PREFETCHABLE, bar0_wmask_lo);
        img.reg32(REG_BAR0_HIGH, 0, bar0_wmask_hi);
        img.reg16(REG_SUBSYSTEM_VENDOR_ID, SUBSYSTEM_VENDOR_ID, 0);
        img.reg16(REG_SUBSYSTEM_ID, SUBSYSTEM_ID, 0);
        img.reg8(REG_CAPABILITIES_POINTER, PM_CAP_OFFSET as u8, 0);
        img.reg8(REG_INTERRUPT_LINE, 0, 0xff);

        // Power Management: version 3, no D1/D2, no PME. No_Soft_Reset (bit 3) is set because the
        // model keeps its state across D3hot -> D0, so software need not re-initialise it.
        img.reg8(PM_CAP_OFFSET, CAP_ID_PM, 0);
        img.reg8(PM_CAP_OFFSET + 1, PCIE_CAP_OFFSET as u8, 0);
        img.reg16(PM_CAP_OFFSET + PM_PMC, 0x0003, 0);
        img.reg16(PM_CAP_OFFSET + PM_PMCSR, 1 << 3, 0b11);

        // PCI Express: version 2, device/port type 0 (endpoint).
        let pcie = PCIE_CAP_OFFSET;
        img.reg8(pcie, CAP_ID_PCIE, 0);
        img.reg8(pcie + 1, MSIX_CAP_OFFSET as u8, 0);
        img.reg16(pcie + PCIE_FLAGS, 0x0002, 0);
        // 512-byte max payload supported, extended tags, unlimited L0s/L1 acceptable latency,
        // role-based error reporting, FLR.
        img.reg32(
            pcie + PCIE_DEVCAP,
            0b010 | (1 << 5) | (0b111 << 6) | (0b111 << 9) | (1 << 15) | PCIE_DEVCAP_FLR,
            0,
        );
        // Power-on: relaxed ordering and no-snoop enabled, 128-byte payload, 512-byte read
        // requests. Phantom functions (bit 9) and aux power (bit 10) are unsupported, so fixed 0.
        img.reg16(
            pcie + PCIE_DEVCTL,
            (1 << 4) | (1 << 11) | (0b010 << 12),
            !((1 << 9) | (1 << 10)),
        );
        img.reg16(pcie + PCIE_DEVSTA, 0, 0);
        // x16 at 16 GT/s, ASPM optionality compliance (bit 22), no ASPM.
        img.reg32(
            pcie + PCIE_LNKCAP,
            u32::from(PCIE_LINK_SPEED_16GT) | (u32::from(PCIE_LINK_WIDTH) << 4) | (1 << 22),
            0,
        );
        // Writable: read completion boundary (3), common clock (6), extended synch (7).
        img.reg16(pcie + PCIE_LNKCTL, 0, (1 << 3) | (1 << 6) | (1 << 7));
        // Trained at x16 16 GT/s, reference clock shared with the slot (bit 12).
        img.reg16(
            pcie + PCIE_LNKSTA,
            PCIE_LINK_SPEED_16GT | (PCIE_LINK_WIDTH << 4) | (1 << 12),
            0,
        );
        // All four completion timeout ranges, and completion timeout disable.
        img.reg32(pcie + PCIE_DEVCAP2, 0x1f, 0);
        img.reg16(pcie + PCIE_DEVCTL2, 0, 0x1f);
        // Supported link speeds vector: 2.5, 5, 8 and 16 GT/s (bits 1..=4).
        img.reg32(pcie + PCIE_LNKCAP2, 0b1_1110, 0);
        img.reg16(pcie + PCIE_LNKCTL2, PCIE_LINK_SPEED_16GT, 0x000f);

        // MSI-X. Both structures sit in BAR0 (BIR 0), so the registers hold the bare offsets.
        let msix = MSIX_CAP_OFFSET;
        img.reg8(msix, CAP_ID_MSIX, 0);
        img.reg8(msix + 1, VSC_CAP_OFFSET as u8, 0);
        img.reg16(
            msix + MSIX_MSG_CTRL,
            layout.msix_vectors.wrapping_sub(1) & MSIX_CTRL_TABLE_SIZE_MASK,
            MSIX_CTRL_ENABLE | MSIX_CTRL_FUNCTION_MASK,
        );
        img.reg32(msix + MSIX_TABLE, layout.msix_table_offset & !0b111, 0);
        img.reg32(msix + MSIX_PBA, layout.msix_pba_offset & !0b111, 0);

        // The vendor-specific gateway, last: its header holds the length; its registers are
        // read-only in the image and written through [`ConfigSpace::write`].
        img.reg8(VSC_CAP_OFFSET, CAP_ID_VENDOR, 0);
        img.reg8(VSC_CAP_OFFSET + 1, 0, 0);
        img.reg8(VSC_CAP_OFFSET + 2, VSC_CAP_LEN, 0);
        self.show_gateway();
    }

    /// Copies the gateway's registers into the image, where reads find them.
    fn show_gateway(&mut self) {
        for reg in (VSC_CTRL..=VSC_DATA).step_by(4) {
            let value = self.gateway.read(reg).to_le_bytes();
            let at = (VSC_CAP_OFFSET + reg) as usize;
            if let Some(bytes) = self.bytes.get_mut(at..at + 4) {
                bytes.copy_from_slice(&value);
            }
        }
    }

    /// Hands the dwords of the gateway's registers that `range` writes to the gateway, each as
    /// its current value with the written bytes (`data`, from `range.start`) merged in.
    fn write_gateway(&mut self, range: Range<usize>, data: &[u8]) {
        let first = (VSC_CAP_OFFSET + VSC_CTRL) as usize;
        let end = (VSC_CAP_OFFSET + VSC_DATA + 4) as usize;
        for reg_at in (first..end).step_by(4) {
            let overlap = range.start.max(reg_at)..range.end.min(reg_at + 4);
            if overlap.is_empty() {
                continue;
            }
            let reg = (reg_at - VSC_CAP_OFFSET as usize) as u64;
            let mut value = self.gateway.read(reg).to_le_bytes();
            for index in overlap {
                if let Some(&byte) = data.get(index - range.start) {
                    value[index - reg_at] = byte;
                }
            }
            self.gateway.write(reg, u32::from_le_bytes(value));
        }
        self.show_gateway();
    }

    /// Reads `buf.len()` bytes starting at byte `offset`.
    ///
    /// Any length and alignment is served byte by byte (PCI allows 1-, 2- and 4-byte accesses;
    /// a vfio-user client may read the whole space at once). Fails, filling nothing, when
    /// `offset + buf.len()` exceeds [`CONFIG_SPACE_SIZE`].
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ConfigError> {
        let range = access_range(offset, buf.len())?;
        let src = self.bytes.get(range).ok_or(ConfigError::OutOfRange {
            offset,
            len: buf.len(),
        })?;
        buf.copy_from_slice(src);
        Ok(())
    }

    /// Writes `data` starting at byte `offset`; each bit changes only if its register allows it.
    ///
    /// Any length and alignment is accepted. Fails, changing nothing, when
    /// `offset + data.len()` exceeds [`CONFIG_SPACE_SIZE`].
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), ConfigError> {
        let range = access_range(offset, data.len())?;
        for (index, &value) in range.clone().zip(data) {
            self.write_byte(index, value);
        }
        self.write_gateway(range, data);
        Ok(())
    }

    fn write_byte(&mut self, index: usize, value: u8) {
        let (Some(&old), Some(&mask)) = (self.bytes.get(index), self.wmask.get(index)) else {
            return;
        };
        let mut new = (old & !mask) | (value & mask);
        if index == DEVCTL_HIGH_BYTE && new & INITIATE_FLR_IN_HIGH_BYTE != 0 {
            // Initiate FLR is an action, not state: latch it for the model and read back 0.
            self.flr_requested = true;
            new &= !INITIATE_FLR_IN_HIGH_BYTE;
        } else if index == PMCSR_LOW_BYTE && matches!(new & 0b11, 0b01 | 0b10) {
            // D1 and D2 are not supported; the PM spec says such writes complete but are dropped.
            new = (new & !0b11) | (old & 0b11);
        }
        if let Some(byte) = self.bytes.get_mut(index) {
            *byte = new;
        }
    }

    /// Reads the byte at `offset`.
    pub fn read_u8(&self, offset: u64) -> Result<u8, ConfigError> {
        let mut buf = [0; 1];
        self.read(offset, &mut buf)?;
        Ok(buf[0])
    }

    /// Reads the little-endian 16-bit value at `offset` (any alignment).
    pub fn read_u16(&self, offset: u64) -> Result<u16, ConfigError> {
        let mut buf = [0; 2];
        self.read(offset, &mut buf)?;
        Ok(u16::from_le_bytes(buf))
    }

    /// Reads the little-endian 32-bit value at `offset` (any alignment).
    pub fn read_u32(&self, offset: u64) -> Result<u32, ConfigError> {
        let mut buf = [0; 4];
        self.read(offset, &mut buf)?;
        Ok(u32::from_le_bytes(buf))
    }

    /// Writes one byte at `offset`.
    pub fn write_u8(&mut self, offset: u64, value: u8) -> Result<(), ConfigError> {
        self.write(offset, &[value])
    }

    /// Writes a little-endian 16-bit value at `offset` (any alignment).
    pub fn write_u16(&mut self, offset: u64, value: u16) -> Result<(), ConfigError> {
        self.write(offset, &value.to_le_bytes())
    }

    /// Writes a little-endian 32-bit value at `offset` (any alignment).
    pub fn write_u32(&mut self, offset: u64, value: u32) -> Result<(), ConfigError> {
        self.write(offset, &value.to_le_bytes())
    }

    fn u16_at(&self, offset: u64) -> u16 {
        // Only called with in-range constant offsets; 0 is a harmless answer if that ever changes.
        self.read_u16(offset).unwrap_or(0)
    }

    fn u32_at(&self, offset: u64) -> u32 {
        self.read_u32(offset).unwrap_or(0)
    }

    /// The Command register.
    pub fn command(&self) -> u16 {
        self.u16_at(REG_COMMAND)
    }

    /// Whether the function decodes accesses to BAR0 (Command bit 1).
    pub fn memory_enabled(&self) -> bool {
        self.command() & COMMAND_MEMORY_SPACE != 0
    }

    /// Whether the function may issue DMA and MSI-X writes (Command bit 2).
    pub fn bus_master_enabled(&self) -> bool {
        self.command() & COMMAND_BUS_MASTER != 0
    }

    /// Whether software has disabled INTx (Command bit 10). The function never asserts INTx.
    pub fn interrupt_disabled(&self) -> bool {
        self.command() & COMMAND_INTERRUPT_DISABLE != 0
    }

    /// The guest-physical (or IOVA) base address programmed into BAR0, with the type bits
    /// cleared; a multiple of [`FunctionLayout::bar0_size`].
    ///
    /// Meaningful only while [`memory_enabled`](Self::memory_enabled): during BAR sizing it holds
    /// the size mask.
    pub fn bar0_address(&self) -> u64 {
        let low = u64::from(self.u32_at(REG_BAR0));
        let high = u64::from(self.u32_at(REG_BAR0_HIGH));
        ((high << 32) | low) & !0xf
    }

    /// Size of BAR0 in bytes.
    pub fn bar0_size(&self) -> u64 {
        self.layout.bar0_size
    }

    /// The MSI-X Message Control register.
    pub fn msix_control(&self) -> u16 {
        self.u16_at(MSIX_CAP_OFFSET + MSIX_MSG_CTRL)
    }

    /// Whether software has enabled MSI-X (Message Control bit 15).
    pub fn msix_enabled(&self) -> bool {
        self.msix_control() & MSIX_CTRL_ENABLE != 0
    }

    /// Whether software has masked every vector at once (Message Control bit 14).
    pub fn msix_function_masked(&self) -> bool {
        self.msix_control() & MSIX_CTRL_FUNCTION_MASK != 0
    }

    /// The power state software selected through the PM capability.
    pub fn power_state(&self) -> PowerState {
        if self.u16_at(PM_CAP_OFFSET + PM_PMCSR) & 0b11 == 0b11 {
            PowerState::D3Hot
        } else {
            PowerState::D0
        }
    }

    /// Returns `true` once for each time software wrote 1 to Device Control's Initiate FLR bit
    /// since the last call (several writes before a call coalesce into one). The caller performs
    /// the reset, including [`reset`](Self::reset).
    pub fn take_flr_request(&mut self) -> bool {
        std::mem::take(&mut self.flr_requested)
    }
}

fn access_range(offset: u64, len: usize) -> Result<Range<usize>, ConfigError> {
    let err = ConfigError::OutOfRange { offset, len };
    let start = usize::try_from(offset).map_err(|_| err.clone())?;
    let end = start.checked_add(len).ok_or_else(|| err.clone())?;
    if end > CONFIG_SPACE_SIZE {
        return Err(err);
    }
    Ok(start..end)
}

fn split_u64(value: u64) -> [u32; 2] {
    [value as u32, (value >> 32) as u32]
}

/// Writes power-on values and write masks into the configuration image.
struct Image<'a> {
    bytes: &'a mut [u8; CONFIG_SPACE_SIZE],
    wmask: &'a mut [u8; CONFIG_SPACE_SIZE],
}

impl Image<'_> {
    fn put(&mut self, offset: u64, value: &[u8], wmask: &[u8]) {
        let Ok(start) = usize::try_from(offset) else {
            return;
        };
        for (i, (&v, &m)) in value.iter().zip(wmask).enumerate() {
            if let (Some(b), Some(w)) =
                (self.bytes.get_mut(start + i), self.wmask.get_mut(start + i))
            {
                *b = v;
                *w = m;
            }
        }
    }

    fn reg8(&mut self, offset: u64, value: u8, wmask: u8) {
        self.put(offset, &[value], &[wmask]);
    }

    fn reg16(&mut self, offset: u64, value: u16, wmask: u16) {
        self.put(offset, &value.to_le_bytes(), &wmask.to_le_bytes());
    }

    fn reg32(&mut self, offset: u64, value: u32, wmask: u32) {
        self.put(offset, &value.to_le_bytes(), &wmask.to_le_bytes());
    }
}

// ---------------------------------------------------------------------------------------------
// MSI-X table and pending-bit array
// ---------------------------------------------------------------------------------------------

/// Writable bits of each dword of a table entry: the address must be dword aligned, and only the
/// mask bit of Vector Control is defined.
const ENTRY_WORD_WMASK: [u32; 4] = [!0b11, u32::MAX, u32::MAX, MSIX_VECTOR_CTRL_MASKED];

/// One MSI-X table entry as software programmed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsixEntry {
    /// Message address (64 bits, dword aligned).
    pub address: u64,
    /// Message data written to `address` when the vector fires.
    pub data: u32,
    /// Vector Control bit 0: the vector is masked.
    pub masked: bool,
}

/// One MSI-X message ready to be written by the function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsixMessage {
    /// Vector number, below the table's vector count.
    pub vector: u16,
    /// Message address (64 bits).
    pub address: u64,
    /// Message data (32 bits).
    pub data: u32,
}

/// What [`MsixTable::trigger`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a Deliver outcome is a message the caller must write"]
pub enum MsixOutcome {
    /// Write `data` (4 bytes, little-endian) to `address`.
    Deliver {
        /// Message address.
        address: u64,
        /// Message data.
        data: u32,
    },
    /// The vector or the whole function is masked: the pending bit is now set, and the message
    /// comes out of [`MsixTable::take_pending_deliverable`] once unmasked.
    Pending,
    /// MSI-X is disabled: nothing is sent and nothing is remembered.
    Disabled,
}

/// The MSI-X vector table and pending-bit array (PBA) of the function, as seen through BAR0.
///
/// Offsets passed to the access methods are relative to the start of the structure (the BAR0
/// offsets in [`FunctionLayout`]). Accesses must be naturally aligned 4- or 8-byte accesses, the
/// only ones MSI-X defines; anything else is an error, not a panic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MsixTable {
    /// Per vector: address low, address high, data, vector control.
    entries: Vec<[u32; 4]>,
    /// One bit per vector, vector 0 in bit 0 of word 0.
    pending: Vec<u64>,
}

impl Default for MsixTable {
    /// A table of [`DEFAULT_MSIX_VECTORS`] vectors in the power-on state.
    fn default() -> Self {
        Self::build(DEFAULT_MSIX_VECTORS)
    }
}

impl MsixTable {
    /// Builds a table of `vectors` entries (`1..=`[`MAX_MSIX_VECTORS`]) in the power-on state:
    /// every vector masked, nothing pending.
    pub fn new(vectors: u16) -> Result<Self, MsixError> {
        if !valid_vector_count(vectors) {
            return Err(MsixError::InvalidVectorCount { count: vectors });
        }
        Ok(Self::build(vectors))
    }

    fn build(vectors: u16) -> Self {
        let mut table = Self {
            entries: vec![[0; 4]; usize::from(vectors)],
            pending: vec![0; usize::from(vectors).div_ceil(64)],
        };
        table.reset();
        table
    }

    /// Restores the power-on state: every vector masked with zeroed address and data, and the
    /// pending-bit array cleared.
    pub fn reset(&mut self) {
        self.entries.fill([0, 0, 0, MSIX_VECTOR_CTRL_MASKED]);
        self.pending.fill(0);
    }

    /// Number of vectors in the table.
    pub fn vectors(&self) -> u16 {
        // The constructor bounds the count to 2048, so this never saturates.
        u16::try_from(self.entries.len()).unwrap_or(u16::MAX)
    }

    /// Length of the table in bytes.
    pub fn table_len(&self) -> u64 {
        table_len(self.vectors())
    }

    /// Length of the pending-bit array in bytes.
    pub fn pba_len(&self) -> u64 {
        pba_len(self.vectors())
    }

    /// The entry of `vector`, or `None` past the end of the table.
    pub fn entry(&self, vector: u16) -> Option<MsixEntry> {
        self.entries
            .get(usize::from(vector))
            .map(|&words| MsixEntry {
                address: entry_address(words),
                data: words[2],
                masked: words[3] & MSIX_VECTOR_CTRL_MASKED != 0,
            })
    }

    /// Whether `vector`'s pending bit is set; `false` past the end of the table.
    pub fn is_pending(&self, vector: u16) -> bool {
        let v = usize::from(vector);
        v < self.entries.len()
            && self
                .pending
                .get(v / 64)
                .is_some_and(|w| w >> (v % 64) & 1 != 0)
    }

    /// Reads from the table at byte `offset` (relative to the table's start) into `buf`, which must
    /// be a naturally aligned 4- or 8-byte access.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), MsixError> {
        let first = check_access(MsixRegion::Table, offset, buf.len(), self.table_len())?;
        for (i, chunk) in buf.chunks_exact_mut(4).enumerate() {
            let dword = first + i;
            let value = self
                .entries
                .get(dword / 4)
                .map_or(0, |words| words[dword % 4]);
            chunk.copy_from_slice(&value.to_le_bytes());
        }
        Ok(())
    }

    /// Writes `data` to the table at byte `offset` (relative to the table's start); a naturally
    /// aligned 4- or 8-byte access. Reserved bits keep their value.
    ///
    /// Unmasking a vector does not send its pending message by itself: afterwards the caller
    /// drains [`take_pending_deliverable`](Self::take_pending_deliverable).
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), MsixError> {
        let first = check_access(MsixRegion::Table, offset, data.len(), self.table_len())?;
        for (i, chunk) in data.chunks_exact(4).enumerate() {
            let dword = first + i;
            let mut bytes = [0; 4];
            bytes.copy_from_slice(chunk);
            let value = u32::from_le_bytes(bytes);
            let word = dword % 4;
            if let Some(words) = self.entries.get_mut(dword / 4) {
                let mask = ENTRY_WORD_WMASK[word];
                words[word] = (words[word] & !mask) | (value & mask);
            }
        }
        Ok(())
    }

    /// Reads the pending-bit array at byte `offset` (relative to its start) into `buf`; a
    /// naturally aligned 4- or 8-byte access. Bits past the last vector read 0.
    pub fn read_pba(&self, offset: u64, buf: &mut [u8]) -> Result<(), MsixError> {
        let first = check_access(MsixRegion::Pba, offset, buf.len(), self.pba_len())?;
        for (i, chunk) in buf.chunks_exact_mut(4).enumerate() {
            let dword = first + i;
            let qword = self.pending.get(dword / 2).copied().unwrap_or(0);
            let value = (qword >> (32 * (dword % 2))) as u32;
            chunk.copy_from_slice(&value.to_le_bytes());
        }
        Ok(())
    }

    /// Accepts a write to the pending-bit array and ignores it (the PBA is read-only); the access
    /// is still checked so a bad one is reported like any other.
    pub fn write_pba(&mut self, offset: u64, data: &[u8]) -> Result<(), MsixError> {
        check_access(MsixRegion::Pba, offset, data.len(), self.pba_len()).map(|_| ())
    }

    /// Signals `vector`, given the MSI-X Enable and Function Mask bits of Message Control.
    ///
    /// Returns [`MsixOutcome::Disabled`] when `enabled` is false, [`MsixOutcome::Pending`] (and
    /// sets the vector's pending bit) when the function or the vector is masked, and otherwise
    /// [`MsixOutcome::Deliver`] with the programmed message, clearing the pending bit since this one
    /// message covers an earlier undelivered one. Fails for a vector past the end of the table.
    pub fn trigger(
        &mut self,
        vector: u16,
        function_masked: bool,
        enabled: bool,
    ) -> Result<MsixOutcome, MsixError> {
        let v = usize::from(vector);
        let Some(&words) = self.entries.get(v) else {
            return Err(MsixError::VectorOutOfRange {
                vector,
                vectors: self.vectors(),
            });
        };
        if !enabled {
            return Ok(MsixOutcome::Disabled);
        }
        let Some(pending) = self.pending.get_mut(v / 64) else {
            return Err(MsixError::VectorOutOfRange {
                vector,
                vectors: self.vectors(),
            });
        };
        let bit = 1u64 << (v % 64);
        if function_masked || words[3] & MSIX_VECTOR_CTRL_MASKED != 0 {
            *pending |= bit;
            return Ok(MsixOutcome::Pending);
        }
        *pending &= !bit;
        Ok(MsixOutcome::Deliver {
            address: entry_address(words),
            data: words[2],
        })
    }

    /// Yields, in vector order, the messages of pending vectors that are no longer masked, clearing
    /// each one's pending bit as it is yielded; yields nothing while `function_masked`.
    ///
    /// Call it after software unmasks a vector or the function, and only while MSI-X is enabled.
    /// Vectors not reached because the iterator was dropped early stay pending. It never
    /// allocates.
    pub fn take_pending_deliverable(&mut self, function_masked: bool) -> PendingDeliverable<'_> {
        PendingDeliverable {
            table: self,
            next: 0,
            active: !function_masked,
        }
    }
}

/// Iterator returned by [`MsixTable::take_pending_deliverable`].
#[derive(Debug)]
#[must_use = "pending bits are only cleared as the iterator is advanced"]
pub struct PendingDeliverable<'a> {
    table: &'a mut MsixTable,
    /// First vector not yet looked at.
    next: usize,
    active: bool,
}

impl Iterator for PendingDeliverable<'_> {
    type Item = MsixMessage;

    fn next(&mut self) -> Option<MsixMessage> {
        if !self.active {
            return None;
        }
        while self.next < self.table.entries.len() {
            let word_index = self.next / 64;
            let rest = self.table.pending.get(word_index).copied().unwrap_or(0) >> (self.next % 64);
            if rest == 0 {
                // Skip the rest of this quadword: nothing pending there.
                self.next = (word_index + 1) * 64;
                continue;
            }
            let v = self.next + rest.trailing_zeros() as usize;
            self.next = v + 1;
            let Some(&words) = self.table.entries.get(v) else {
                break;
            };
            if words[3] & MSIX_VECTOR_CTRL_MASKED != 0 {
                continue;
            }
            let vector = u16::try_from(v).ok()?;
            if let Some(pending) = self.table.pending.get_mut(word_index) {
                *pending &= !(1u64 << (v % 64));
            }
            return Some(MsixMessage {
                vector,
                address: entry_address(words),
                data: words[2],
            });
        }
        None
    }
}

fn entry_address(words: [u32; 4]) -> u64 {
    (u64::from(words[1]) << 32) | u64::from(words[0])
}

/// Checks an MSI-X access and returns the index of its first dword within the structure.
fn check_access(
    region: MsixRegion,
    offset: u64,
    len: usize,
    region_len: u64,
) -> Result<usize, MsixError> {
    let aligned = match len {
        4 => offset % 4 == 0,
        8 => offset % 8 == 0,
        _ => false,
    };
    if !aligned {
        return Err(MsixError::BadAccess {
            region,
            offset,
            len,
        });
    }
    let out_of_range = MsixError::OutOfRange {
        region,
        offset,
        len,
        region_len,
    };
    // `len` is 4 or 8 here, so the conversion is exact.
    let end = offset
        .checked_add(len as u64)
        .ok_or_else(|| out_of_range.clone())?;
    if end > region_len {
        return Err(out_of_range);
    }
    usize::try_from(offset / 4).map_err(|_| out_of_range)
}
