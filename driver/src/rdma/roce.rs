//! RoCE on a function: the vport's `roce_en`, the RoCE capabilities, and the port's GID table.
//!
//! The table is filled as Linux fills it for a port with one IP address: first the link-local
//! GID made from the MAC, then the application's address (an IPv4 address as an IPv4-mapped
//! GID), each once per RoCE version the RoCE caps list (v1 before v2). mlx5_ib's
//! mlx5_get_roce_gid_type_mask hands ib_core only the versions the caps list, so a function
//! offering v2 alone gets no v1 entries. Queue pairs use the RoCE v2 entry of the address, as
//! `ibv_query_gid` users pick it.

use std::net::IpAddr;

use super::wr::PathMtu;
use crate::backend::Backend;
use crate::control::{input, output_too_short, Device};
use crate::error::DriverError;
use cxdirect_hw::caps::port_type;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::hca::{cap_type, query_cap_op_mod, QueryHcaCapOut};
use cxdirect_hw::roce::{
    l3_type, l3_type_cap, roce_version, roce_version_cap, RoceCap, SetRoceAddressIn,
};
use cxdirect_hw::vport::ModifyNicVportContextIn;

/// GID table entries this driver programs at most (link-local v1 and v2, the address v1 and
/// v2).
const GID_ENTRIES: u16 = 4;

/// RoCE enabled on a function, with its GID programmed ([`Roce::enable`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roce {
    gid: [u8; 16],
    gid_index: u8,
    mac: [u8; 6],
    max_path_mtu: PathMtu,
    log_max_msg: u8,
    log_max_rd_atomic: u8,
    log_max_dest_rd_atomic: u8,
}

impl Roce {
    /// Enables RoCE v2 on `dev`'s vport and programs its GID table from the port's MAC and
    /// `address` (the address peers reach this function at), then sets the port up.
    ///
    /// # Errors
    ///
    /// [`DriverError::Unsupported`] when the function has no RoCE (general cap `roce` clear,
    /// not an Ethernet port, no RoCE v2, no room for four GIDs, or the address's IP version
    /// not offered); [`DriverError::Command`] when the device refuses a command.
    pub fn enable<B: Backend>(dev: &mut Device<B>, address: IpAddr) -> Result<Self, DriverError> {
        let (log_max_msg, log_max_rd_atomic, log_max_dest_rd_atomic) = {
            let caps = dev.caps();
            if caps.port_type() != port_type::ETHERNET {
                return Err(DriverError::Unsupported {
                    what: "RoCE",
                    why: "the port is not an Ethernet port (general cap port_type)",
                });
            }
            if !caps.roce() {
                return Err(DriverError::Unsupported {
                    what: "RoCE",
                    why: "the function does not offer it (general cap roce is clear)",
                });
            }
            (
                caps.log_max_msg(),
                caps.log_max_ra_req_qp(),
                caps.log_max_ra_res_qp(),
            )
        };
        let current = roce_caps(dev, true)?;
        let caps = RoceCap::new(&current[..]).map_err(|_| DriverError::BadDeviceValue {
            what: "RoCE capability page length",
            value: current.len() as u64,
        })?;
        if caps.roce_version() & roce_version_cap::V2 == 0 {
            return Err(DriverError::Unsupported {
                what: "RoCE v2",
                why: "the RoCE capabilities do not list version 2",
            });
        }
        let with_v1 = caps.roce_version() & roce_version_cap::V1 != 0;
        if caps.roce_address_table_size() < GID_ENTRIES {
            return Err(DriverError::Unsupported {
                what: "RoCE",
                why: "the GID table has fewer than the 4 entries a port with one address needs",
            });
        }
        // The capability is a bit mask (`MLX5_ROCE_L3_TYPE_*_CAP`: IPv4 bit 1, IPv6 bit 2), not
        // one bit per `roce_l3_type` value.
        let l3_cap = match address {
            IpAddr::V4(_) => l3_type_cap::IPV4,
            IpAddr::V6(_) => l3_type_cap::IPV6,
        };
        if caps.l3_type() & l3_cap == 0 {
            return Err(DriverError::Unsupported {
                what: "RoCE over this IP version",
                why: "the RoCE capabilities do not list its L3 type",
            });
        }
        let mut cmd = input(
            Opcode::ModifyNicVportContext,
            0,
            ModifyNicVportContextIn::<&[u8]>::SIZE,
        );
        {
            let mut c = ModifyNicVportContextIn::new(&mut cmd[..])
                .map_err(|_| DriverError::layout(Opcode::ModifyNicVportContext, "input"))?;
            c.field_select_mut().set_roce_en(true);
            c.nic_vport_context_mut().set_roce_en(true);
        }
        dev.exec(&cmd, 16)?;
        let mac = dev.info().mac;
        let link_local = link_local_gid(mac);
        let gid = match address {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        };
        let entries = gid_entries(link_local, gid, with_v1);
        for (index, &(entry, version)) in entries.iter().enumerate() {
            set_gid(dev, index as u16, entry, mac, version)?;
        }
        let gid_index = (entries.len() - 1) as u8;
        dev.set_port_admin(true)?;
        let max_path_mtu = PathMtu::largest_for(u32::from(dev.info().port_mtu)).ok_or(
            DriverError::Unsupported {
                what: "RoCE",
                why: "the port MTU is too small for 256-byte RoCE packets",
            },
        )?;
        Ok(Self {
            gid,
            gid_index,
            mac,
            max_path_mtu,
            log_max_msg,
            log_max_rd_atomic,
            log_max_dest_rd_atomic,
        })
    }

    /// The GID queue pairs send from (16 bytes, network order; IPv4-mapped for IPv4).
    pub fn gid(&self) -> [u8; 16] {
        self.gid
    }

    /// Its index in the port's GID table (the QP path's `src_addr_index`).
    pub fn gid_index(&self) -> u8 {
        self.gid_index
    }

    /// The port's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The largest path MTU the port's frame carries.
    pub fn max_path_mtu(&self) -> PathMtu {
        self.max_path_mtu
    }

    /// Log2 of the largest message in bytes (general cap `log_max_msg`).
    pub fn log_max_msg(&self) -> u8 {
        self.log_max_msg
    }

    /// Log2 of the most outstanding RDMA READs and atomics a QP may issue.
    pub fn log_max_rd_atomic(&self) -> u8 {
        self.log_max_rd_atomic
    }

    /// Log2 of the most outstanding RDMA READs and atomics a QP may serve.
    pub fn log_max_dest_rd_atomic(&self) -> u8 {
        self.log_max_dest_rd_atomic
    }
}

/// The RoCE capability page: the values in force (`current`) or the most the device offers.
fn roce_caps<B: Backend>(dev: &mut Device<B>, current: bool) -> Result<[u8; 0x100], DriverError> {
    let out = dev.exec(
        &input(
            Opcode::QueryHcaCap,
            query_cap_op_mod(cap_type::ROCE, current),
            16,
        ),
        QueryHcaCapOut::<&[u8]>::SIZE,
    )?;
    let out = QueryHcaCapOut::new(&out[..]).map_err(output_too_short)?;
    let mut page = [0u8; 0x100];
    page.copy_from_slice(&out.capability().as_bytes()[..0x100]);
    Ok(page)
}

/// The link-local GID of `mac`: fe80::/64 with the modified EUI-64 of the MAC.
fn link_local_gid(mac: [u8; 6]) -> [u8; 16] {
    let mut gid = [0u8; 16];
    gid[0] = 0xfe;
    gid[1] = 0x80;
    gid[8] = mac[0] ^ 0x02;
    gid[9] = mac[1];
    gid[10] = mac[2];
    gid[11] = 0xff;
    gid[12] = 0xfe;
    gid[13] = mac[3];
    gid[14] = mac[4];
    gid[15] = mac[5];
    gid
}

/// The GID table's entries in order, as (GID, RoCE version): per address, v1 (only when the
/// caps list it) before v2; the address's v2 entry, the one queue pairs use, is last.
fn gid_entries(link_local: [u8; 16], gid: [u8; 16], with_v1: bool) -> Vec<([u8; 16], u8)> {
    let mut out = Vec::with_capacity(4);
    for g in [link_local, gid] {
        if with_v1 {
            out.push((g, roce_version::V1));
        }
        out.push((g, roce_version::V2));
    }
    out
}

/// SET_ROCE_ADDRESS of entry `index` on the function's one port. `vhca_port_num` stays 0:
/// mlx5_ib's set_roce_addr writes it only when the general cap `num_vhca_ports` is set.
fn set_gid<B: Backend>(
    dev: &mut Device<B>,
    index: u16,
    gid: [u8; 16],
    mac: [u8; 6],
    version: u8,
) -> Result<(), DriverError> {
    let l3 = if cxdirect_hw::roce::gid_is_ipv4_mapped(&gid) {
        l3_type::IPV4
    } else {
        l3_type::IPV6
    };
    let mut cmd = input(Opcode::SetRoceAddress, 0, SetRoceAddressIn::<&[u8]>::SIZE);
    {
        let mut c = SetRoceAddressIn::new(&mut cmd[..])
            .map_err(|_| DriverError::layout(Opcode::SetRoceAddress, "input"))?;
        c.set_roce_address_index(index);
        c.roce_address_mut()
            .set_gid(gid)
            .set_source_mac(mac)
            .set_roce_l3_type(l3)
            .set_roce_version(version);
    }
    dev.exec(&cmd, 16).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_offering_roce_v2_alone_gets_no_v1_entries() {
        let (ll, gid) = ([0xfe; 16], [0x0a; 16]);
        // As mlx5_get_roce_gid_type_mask reads the caps: v2 only, then v1 and v2.
        assert_eq!(
            gid_entries(ll, gid, false),
            vec![(ll, roce_version::V2), (gid, roce_version::V2)]
        );
        let both = gid_entries(ll, gid, true);
        assert_eq!(both.len(), 4);
        assert_eq!(both[3], (gid, roce_version::V2));
        assert_eq!(both[0], (ll, roce_version::V1));
    }
}
