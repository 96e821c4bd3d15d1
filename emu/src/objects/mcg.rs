//! The function's multicast groups: for each multicast GID that ATTACH_TO_MCG named, the UD
//! QPs attached to it, in the order they joined. A RoCE datagram to that GID is delivered to
//! each of them (`engine::ud`).

use super::limits::{LOG_MAX_MCG, MAX_QP_MCG};
use std::collections::BTreeMap;

/// Why an attach was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttachError {
    /// The function holds `2^log_max_mcg` groups already.
    TooManyGroups,
    /// The group holds `max_qp_mcg` QPs already.
    GroupFull,
}

/// Multicast GID to attached QP numbers.
#[derive(Debug, Default)]
pub(crate) struct McastGroups {
    groups: BTreeMap<[u8; 16], Vec<u32>>,
}

impl McastGroups {
    /// Attaches QP `qpn` to the group of `gid`, creating the group. Attaching a member again
    /// changes nothing (a group holds each QP once).
    pub fn attach(&mut self, gid: [u8; 16], qpn: u32) -> Result<(), AttachError> {
        if !self.groups.contains_key(&gid) && self.groups.len() >= 1 << LOG_MAX_MCG {
            return Err(AttachError::TooManyGroups);
        }
        let members = self.groups.entry(gid).or_default();
        if members.contains(&qpn) {
            return Ok(());
        }
        if members.len() >= MAX_QP_MCG as usize {
            return Err(AttachError::GroupFull);
        }
        members.push(qpn);
        Ok(())
    }

    /// Detaches QP `qpn` from the group of `gid` (the group goes with its last member); false
    /// when it was not a member.
    pub fn detach(&mut self, gid: &[u8; 16], qpn: u32) -> bool {
        let Some(members) = self.groups.get_mut(gid) else {
            return false;
        };
        let Some(at) = members.iter().position(|&q| q == qpn) else {
            return false;
        };
        members.remove(at);
        if members.is_empty() {
            self.groups.remove(gid);
        }
        true
    }

    /// Detaches QP `qpn` from every group (the QP is destroyed).
    pub fn forget(&mut self, qpn: u32) {
        self.groups.retain(|_, members| {
            members.retain(|&q| q != qpn);
            !members.is_empty()
        });
    }

    /// The QPs attached to the group of `gid` (none when no QP joined it).
    pub fn members(&self, gid: &[u8; 16]) -> &[u32] {
        self.groups.get(gid).map_or(&[], Vec::as_slice)
    }
}
