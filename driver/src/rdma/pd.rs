//! Protection domains: ALLOC_PD and DEALLOC_PD.

use crate::backend::Backend;
use crate::control::{input, output_too_short, Device};
use crate::error::DriverError;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::hca::AllocPdOut;

/// A protection domain (`ibv_pd`): queue pairs, shared receive queues and memory regions of
/// one PD use only each other; a peer's rkey must name a region of the QP's PD.
#[derive(Debug)]
pub struct ProtectionDomain {
    pdn: u32,
}

impl ProtectionDomain {
    /// ALLOC_PD.
    ///
    /// # Errors
    ///
    /// [`DriverError::Command`] when the device refuses.
    pub fn alloc<B: Backend>(dev: &mut Device<B>) -> Result<Self, DriverError> {
        let out = dev.exec(&input(Opcode::AllocPd, 0, 16), AllocPdOut::<&[u8]>::SIZE)?;
        let pdn = AllocPdOut::new(&out[..]).map_err(output_too_short)?.pd();
        Ok(Self { pdn })
    }

    /// The PD number (24 bits).
    pub fn pdn(&self) -> u32 {
        self.pdn
    }

    /// DEALLOC_PD; every QP, SRQ and memory region of the PD must be gone first.
    ///
    /// # Errors
    ///
    /// [`DriverError::Command`] when the device refuses (objects of the PD remain).
    pub fn dealloc<B: Backend>(self, dev: &mut Device<B>) -> Result<(), DriverError> {
        let mut cmd = input(Opcode::DeallocPd, 0, 16);
        cmd[8..12].copy_from_slice(&self.pdn.to_be_bytes());
        dev.exec(&cmd, 16).map(|_| ())
    }
}
