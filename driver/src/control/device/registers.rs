//! Port registers through ACCESS_REG: read or written whole, of any length, as Linux's
//! `mlx5_core_access_reg` sends them.

use super::Device;
use crate::backend::Backend;
use crate::control::cmd::input;
use crate::error::DriverError;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::reg::{self, AccessRegisterIn};

/// Bytes of ACCESS_REG's input and output before the register's own (`register_data`).
const ACCESS_REG_HEADER: usize = 0x10;

impl<B: Backend> Device<B> {
    /// ACCESS_REG: reads or writes a 16-byte port register; returns the register's contents.
    pub fn access_reg(
        &mut self,
        register: u16,
        write: bool,
        data: &[u8; 16],
    ) -> Result<[u8; 16], DriverError> {
        let mut reply = [0u8; 16];
        reply.copy_from_slice(&self.access_register(register, write, data)?);
        Ok(reply)
    }

    /// ACCESS_REG of a register of any length: writes `data`, or reads with `data` naming
    /// what to read (its port, priority ...); returns the register's `data.len()` bytes as the
    /// device answers them.
    ///
    /// # Errors
    ///
    /// [`DriverError::Command`] when the device refuses the register,
    /// [`DriverError::BadDeviceValue`] for an answer shorter than the register.
    pub fn access_register(
        &mut self,
        register: u16,
        write: bool,
        data: &[u8],
    ) -> Result<Vec<u8>, DriverError> {
        let op_mod = if write {
            reg::ACCESS_REG_OP_MOD_WRITE
        } else {
            reg::ACCESS_REG_OP_MOD_READ
        };
        let len = ACCESS_REG_HEADER + data.len();
        let mut cmd = input(Opcode::AccessReg, op_mod, len);
        AccessRegisterIn::new(&mut cmd[..])
            .map(|mut a| {
                a.set_register_id(register);
            })
            .ok();
        cmd[ACCESS_REG_HEADER..].copy_from_slice(data);
        let out = self.exec(&cmd, len)?;
        out.get(ACCESS_REG_HEADER..len)
            .map(<[u8]>::to_vec)
            .ok_or(DriverError::BadDeviceValue {
                what: "access_register_out",
                value: out.len() as u64,
            })
    }
}
