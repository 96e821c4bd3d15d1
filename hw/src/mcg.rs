//! Multicast group commands: ATTACH_TO_MCG and DETACH_FROM_MCG add a UD QP to, or take it
//! from, the group of a multicast GID (Linux `mlx5_cmd_attach_mcg` / `mlx5_cmd_detach_mcg`,
//! drivers/infiniband/hw/mlx5/cmd.c, called by `mlx5_ib_mcg_attach` / `mlx5_ib_mcg_detach`).

use crate::layout;

layout! {
    /// ATTACH_TO_MCG input.
    pub struct AttachToMcgIn("attach_to_mcg_in", 0x20) {
        /// Command opcode: [`Opcode::AttachToMcg`](crate::cmd::Opcode::AttachToMcg).
        opcode: u16 @ 0x00 [0x10],
        /// User context of the caller (0 for the kernel).
        uid: u16 @ 0x10 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The QP joining the group.
        qpn: u32 @ 0x48 [0x18],
    }
    arrays {
        /// Byte `index` (0..16) of the group's multicast GID, in network order.
        multicast_gid: u8 @ 0x80 [0x8],
    }
}

layout! {
    /// ATTACH_TO_MCG output.
    pub struct AttachToMcgOut("attach_to_mcg_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
    }
}

layout! {
    /// DETACH_FROM_MCG input.
    pub struct DetachFromMcgIn("detach_from_mcg_in", 0x20) {
        /// Command opcode: [`Opcode::DetachFromMcg`](crate::cmd::Opcode::DetachFromMcg).
        opcode: u16 @ 0x00 [0x10],
        /// User context of the caller (0 for the kernel).
        uid: u16 @ 0x10 [0x10],
        /// Operation modifier (0).
        op_mod: u16 @ 0x30 [0x10],
        /// The QP leaving the group.
        qpn: u32 @ 0x48 [0x18],
    }
    arrays {
        /// Byte `index` (0..16) of the group's multicast GID, in network order.
        multicast_gid: u8 @ 0x80 [0x8],
    }
}

layout! {
    /// DETACH_FROM_MCG output.
    pub struct DetachFromMcgOut("detach_from_mcg_out", 0x10) {
        /// Command status (see [`CmdStatus`](crate::cmd::CmdStatus)).
        status: u8 @ 0x00 [0x8],
        /// Firmware syndrome identifying the failure when status is not OK.
        syndrome: u32 @ 0x20 [0x20],
    }
}

macro_rules! gid_accessors {
    ($name:ident) => {
        impl<T: AsRef<[u8]>> $name<T> {
            /// The group's multicast GID, 16 bytes in network order.
            pub fn gid(&self) -> [u8; 16] {
                let mut gid = [0; 16];
                gid.copy_from_slice(&self.as_bytes()[0x10..0x20]);
                gid
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            /// Sets the group's multicast GID from its 16 bytes in network order.
            pub fn set_gid(&mut self, gid: [u8; 16]) -> &mut Self {
                self.as_bytes_mut()[0x10..0x20].copy_from_slice(&gid);
                self
            }
        }
    };
}

gid_accessors!(AttachToMcgIn);
gid_accessors!(DetachFromMcgIn);

/// True when `gid` is a multicast GID as the RDMA core takes one
/// (`rdma_is_multicast_addr`, include/rdma/ib_addr.h): an IPv6 multicast address (`ff00::/8`)
/// or an IPv4-mapped IPv4 multicast address (`::ffff:224.0.0.0/100`).
pub fn is_multicast_gid(gid: &[u8; 16]) -> bool {
    gid[0] == 0xff || (crate::roce::gid_is_ipv4_mapped(gid) && (0xe0..=0xef).contains(&gid[12]))
}
